"""The Training view in a real browser: open it from a link, move the step slider with the keyboard as a user
would, and see the heatmaps redraw with the patterns of the step chosen (different numbers, new titles)."""
from __future__ import annotations

from urllib.parse import urlencode

from test_browser import _assert_no_exception

from mha_viz import checkpoints

from harness import wait, wait_idle

TEXT = "anna berg said : red lamp river cup . then tom lind said : red lamp river cup ."

# Every heatmap trace the view drew for one step of training, as (name, flattened z), read from plotly's own data
# (a numpy z arrives as a base64 typed array {dtype, bdata, shape}, which plotly keeps as sent in `gd.data`).
_STEP_HEATMAPS = """(step) => {
  const flat = z => {
    if (z && z.bdata) {
      const bin = atob(z.bdata), bytes = new Uint8Array(bin.length);
      for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
      const T = {f4: Float32Array, f8: Float64Array, u1: Uint8Array}[z.dtype];
      return Array.from(new T(bytes.buffer));
    }
    return Array.from(z, r => (typeof r === 'number' ? [r] : Array.from(r))).flat();
  };
  return [...document.querySelectorAll('.js-plotly-plot')]
    .flatMap(gd => (gd.data || []).filter(t => t.type === 'heatmap' && (t.name || '').endsWith(' · step ' + step)))
    .map(t => [t.name, flat(t.z)]);
}"""


def test_moving_the_step_slider_redraws_the_heads(page, streamlit_url):
    steps = checkpoints("tiny")
    last = steps[-1]
    query = urlencode({"model": "tiny", "view": "Training", "text": TEXT, "layer": "1"})
    page.goto(f"{streamlit_url}/?{query}", wait_until="domcontentloaded")
    wait(page, f"() => ({_STEP_HEATMAPS})({last}).length === 4", f"the four heads of layer 1 at step {last}")
    wait_idle(page)
    _assert_no_exception(page, "opening the Training view")
    trained = dict(page.evaluate(_STEP_HEATMAPS, last))
    assert sorted(trained) == [f"L1 H{h} · step {last}" for h in range(4)]

    # The slider is a keyboard-operable widget: Home takes it to the first saved step, the initialisation.
    slider = page.locator('[data-testid="stSlider"]', has_text="Training step").get_by_role("slider")
    assert slider.count() == 1
    slider.focus()
    page.keyboard.press("Home")
    wait(page, f"() => ({_STEP_HEATMAPS})(0).length === 4", "the heads redrawn at step 0")
    wait_idle(page)
    _assert_no_exception(page, "moving the step slider to 0")
    initial = dict(page.evaluate(_STEP_HEATMAPS, 0))
    assert not page.evaluate(_STEP_HEATMAPS, last), "the last step's heatmaps should be gone"
    for h in range(4):
        a, b = trained[f"L1 H{h} · step {last}"], initial[f"L1 H{h} · step 0"]
        assert len(a) == len(b) > 0
        assert max(abs(x - y) for x, y in zip(a, b) if x == x and y == y) > 0.05, f"head {h} did not change"

    # One step right: the second saved step.
    page.keyboard.press("ArrowRight")
    wait(page, f"() => ({_STEP_HEATMAPS})({steps[1]}).length === 4", f"the heads redrawn at step {steps[1]}")
    wait_idle(page)
    _assert_no_exception(page, "moving the step slider one step")
