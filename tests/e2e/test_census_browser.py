"""The Census view in a real browser: open it from a link, run the census, see the map of the chosen score drawn from
the census's numbers, click a head in the map and open it in the Layer view."""
from __future__ import annotations

from urllib.parse import urlencode

from test_browser import _assert_no_exception

from mha_viz import measures

from harness import wait, wait_idle

# Plotly's own data of the census map: the heatmap's z (a base64 typed array or nested lists), flattened. Its title
# starts with the score's registered label ("previous token, 24 random sequences of ...").
_MAP = """() => {
  const gd = [...document.querySelectorAll('.js-plotly-plot')].find(g => (g.layout && g.layout.title &&
      String(g.layout.title.text || '').includes('""" + measures.score_label("previous") + """, ')));
  if (!gd) return null;
  const t = gd.data.find(d => d.type === 'heatmap');
  const z = t.z;
  if (z && z.bdata) {
    const bin = atob(z.bdata), bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    return Array.from(new Float32Array(bytes.buffer));
  }
  return Array.from(z).flat();
}"""


def test_run_the_census_and_open_a_head_in_the_layer_view(page, streamlit_url):
    from mha_viz import head_census, load_model

    page.goto(f"{streamlit_url}/?{urlencode({'model': 'tiny', 'view': 'Census'})}", wait_until="domcontentloaded")
    button = page.get_by_role("button", name="Run the census")
    button.wait_for(timeout=120_000)
    button.click()
    wait(page, f"() => ({_MAP})() !== null", "the census map of the previous-token score")
    wait_idle(page)
    _assert_no_exception(page, "running the census")
    drawn = page.evaluate(_MAP)
    census = head_census(load_model("tiny"))
    want = census.scores["previous"].flatten().tolist()
    assert len(drawn) == len(want) and max(abs(a - b) for a, b in zip(drawn, want)) < 1e-5
    (layer, head), _ = census.top("previous", 1)[0]
    # Open the leading head: the selectbox, then the button under it.
    page.get_by_text("Head (or click one in the map or the scatter)").wait_for()
    box = page.locator('[data-testid="stSelectbox"]', has_text="Head (or click one")
    if f"L{layer} H{head}" not in box.inner_text():  # the leading head may be the one shown already
        box.click()
        page.keyboard.type(f"L{layer} H{head}")
        page.keyboard.press("Enter")
        wait_idle(page)
    page.get_by_role("button", name=f"Open L{layer} H{head} in the Layer view").click()
    wait(page, f"() => document.body.innerText.includes('Layer {layer}: all 4 heads')", "the Layer view")
    _assert_no_exception(page, "opening the head in the Layer view")
