"""What the screenshot matrix (tests/e2e/screenshot_matrix.py) found in a real browser: on a long text
the Layer grid's first and last token labels were cut in half at the edge of their strip ("[CLS]" showed as its
lower half), because a label is centred on a row thinner than its font."""
from __future__ import annotations

from harness import GRID_DRAWN, open_app
from helpers import LONG_TEXT as LONG

N_HEADS = 12  # all-MiniLM-L6-v2

# Ink on the edges of the first tile's label pictures: the query labels' top and bottom pixel rows, the key labels'
# left and right pixel columns (a label cut by the edge leaves ink there), and the rows' height in pixels.
EDGE_INK = """async () => {
  const head = document.querySelector('.mhv-grid .mhv-head');
  const out = {cell: parseFloat(document.querySelector('.mhv-grid').dataset.labelCell),
               font: parseFloat(document.querySelector('.mhv-grid').dataset.labelFont)};
  for (const side of ['q', 'k']) {
    const div = head.querySelector('.mhv-labels-' + side);
    const url = getComputedStyle(div).backgroundImage.slice(5, -2);
    const img = new Image(); img.src = url; await img.decode();
    const c = document.createElement('canvas'); c.width = img.width; c.height = img.height;
    const ctx = c.getContext('2d'); ctx.drawImage(img, 0, 0);
    const px = ctx.getImageData(0, 0, c.width, c.height).data;
    const ink = (x, y) => px[(y * c.width + x) * 4 + 3] > 40;
    let a = 0, b = 0;
    if (side === 'q') for (let x = 0; x < c.width; x++) { a += ink(x, 0); b += ink(x, c.height - 1); }
    else for (let y = 0; y < c.height; y++) { a += ink(0, y); b += ink(c.width - 1, y); }
    out[side] = [a, b];
  }
  return out;
}"""


def test_long_text_grid_labels_are_not_cut_at_the_edges(browser, streamlit_url):
    context, page = open_app(browser, streamlit_url, {"model": "minilm", "view": "Layer", "text": LONG},
                             f"() => ({GRID_DRAWN})() === {N_HEADS}"
                             " && !!document.querySelector('.mhv-grid').dataset.labelFont",
                             "the grid and its token labels", 1600, 1000)
    try:
        found = page.evaluate(EDGE_INK)
        assert found["cell"] < found["font"], f"the rows must be thinner than the font for this check: {found}"
        assert found["q"] == [0, 0], f"query labels cut at the top / bottom edge: {found}"
        assert found["k"] == [0, 0], f"key labels cut at the left / right edge: {found}"
        assert not page.js_errors, page.js_errors
    finally:
        context.close()


# The drawn key labels of the first heads-row chart (Compare's heads side by side): each label's box on screen and
# its font size, left to right.
ROW_LABELS = """() => {
  const plot = [...document.querySelectorAll('.js-plotly-plot')].find(p => p.layout && p.layout.annotations
    && p.layout.annotations.some(a => (a.text || '').includes('L0 H0')));
  if (!plot) return null;
  const ticks = [...plot.querySelectorAll('.xaxislayer-above .xtick text')].filter(t => t.textContent);
  return ticks.map(t => { const r = t.getBoundingClientRect();
    return {left: r.left, right: r.right, size: parseFloat(getComputedStyle(t).fontSize)}; })
    .sort((a, b) => a.left - b.left);
}"""


def test_compare_key_labels_do_not_overlap_in_a_narrow_window(browser, streamlit_url):
    """At 1000x800 Compare's heads are ~150 px wide: labels placed for the figure's planned height (one per 7 px)
    overlapped there. Plotly now picks them from the drawn width: none overlaps, none under 8 px."""
    context, page = open_app(browser, streamlit_url, {"model": "minilm", "view": "Compare", "text": LONG},
                             f"() => {{ const l = ({ROW_LABELS})(); return l && l.length > 3; }}",
                             "Compare's heads", 1000, 800)
    try:
        labels = page.evaluate(ROW_LABELS)
        assert min(label["size"] for label in labels) >= 8, labels[:3]
        overlaps = [(a, b) for a, b in zip(labels, labels[1:]) if b["left"] < a["right"] - 0.5]
        assert not overlaps, f"{len(overlaps)} of {len(labels)} key labels overlap the next: {overlaps[:3]}"
        assert not page.js_errors, page.js_errors
    finally:
        context.close()


# Every square heatmap with a colour bar on the page: the figure's top, its top margin, the drawn cells' box and
# the colour bar's box (px on screen).
SQUARES = """() => [...document.querySelectorAll('.js-plotly-plot')]
  .filter(p => p.data && p.data[0].type === 'heatmap' && p.data[0].showscale && p.layout.yaxis.scaleanchor)
  .map(p => { const cells = p.querySelector('.heatmaplayer image, .hm image');
    const bar = p.querySelector('.colorbar .cbfills');  // the colour strip itself, not its padded background
    const box = e => { if (!e) return null; const r = e.getBoundingClientRect();
      return {top: r.top, bottom: r.bottom, left: r.left, width: r.width}; };
    return {top: p.getBoundingClientRect().top, margin: p._fullLayout.margin.t, cells: box(cells),
            bar: box(bar)}; })"""


def _squares(browser, url, view, text, n):
    context, page = open_app(browser, url, {"model": "minilm", "view": view, "text": text},
                             f"() => ({SQUARES})().filter(s => s.cells !== null).length === {n}",
                             f"{view}'s {n} heatmaps")
    return context, page, page.evaluate(SQUARES)


def test_square_heatmaps_keep_to_the_top_of_a_narrow_column(browser, streamlit_url):
    """At 1000x800 Rollout's four maps sit in columns ~190 px wide: each square shrank and floated in the middle of
    its figure, ~200 px below its own title and labels, its colour bar spanning the whole height beside it. The
    square now starts right under its labels; its colour bar is a strip under it, from its left edge."""
    context, page, squares = _squares(browser, streamlit_url, "Rollout & norms", LONG, 4)
    try:
        for s in squares:
            assert s["cells"]["top"] - s["top"] <= s["margin"] + 3, f"the square floats below its labels: {s}"
            assert s["bar"]["top"] >= s["cells"]["bottom"] and abs(s["bar"]["left"] - s["cells"]["left"]) <= 3, s
        assert not page.js_errors, page.js_errors
    finally:
        context.close()


def test_inside_a_head_pattern_keeps_its_size_in_a_narrow_column(browser, streamlit_url):
    """At 1000x800 the Inside-a-head pattern's column is ~190 px wide: with its colour bar beside it the square
    shrank to ~45 px. With the bar under it, as wide as the square, the square keeps most of the column."""
    context, page, squares = _squares(browser, streamlit_url, "Inside a head",
                                      "The keys to the old cabinet were on the table, so she took them.", 1)
    try:
        square = squares[0]
        assert square["cells"]["width"] >= 90, squares
        # Its colour bar stays under it: a bar of the planned width (360 px) ran out of the ~190 px figure.
        cells, bar = square["cells"], square["bar"]
        assert bar["left"] + bar["width"] <= cells["left"] + cells["width"] + 3, square
    finally:
        context.close()


OVERVIEW = """() => { const p = [...document.querySelectorAll('.js-plotly-plot')]
  .find(p => p.layout && p.layout.meta && p.layout.meta.blocks !== undefined);
  const cells = p && p.querySelector('.heatmaplayer image, .hm image');
  return cells ? {top: p.getBoundingClientRect().top, margin: p._fullLayout.margin.t,
                  cells: cells.getBoundingClientRect().top} : null; }"""


def test_all_layers_tiles_keep_to_the_top_in_a_narrow_window(browser, streamlit_url):
    """At 1000x800 the All-layers picture is drawn ~540 px wide, its height made for 900: the tiles floated in the
    middle of ~100 px of white above and below. They now start under the head names."""
    context, page = open_app(browser, streamlit_url, {"model": "minilm", "view": "All layers", "text": LONG},
                             f"() => ({OVERVIEW})() !== null",
                             "the All-layers picture", 1000, 800)
    try:
        found = page.evaluate(OVERVIEW)
        assert found["cells"] - found["top"] <= found["margin"] + 3, found
    finally:
        context.close()


FIRST_HEAT = """() => { const c = document.querySelector('.mhv-grid .mhv-head canvas');
  const strip = document.querySelector('.mhv-strip');
  return c ? {top: c.getBoundingClientRect().top + window.scrollY, height: c.getBoundingClientRect().height,
              strip: strip.getBoundingClientRect().height, lines: strip.scrollHeight} : null; }"""


def test_a_long_texts_token_strip_leaves_the_first_heads_on_the_first_screen(browser, streamlit_url):
    """At 1000x800 a ~120-token text made the Layer grid's token strip nine lines (233 px) tall and the first
    heatmap started at y=806, below the first screen. The strip now shows three lines and scrolls (every token still
    in it); the first heatmap starts at y≈650, its top on the first screen."""
    context, page = open_app(browser, streamlit_url, {"model": "minilm", "view": "Layer", "text": LONG},
                             f"() => ({GRID_DRAWN})() === {N_HEADS}",
                             "the grid", 1000, 800)
    try:
        found = page.evaluate(FIRST_HEAT)
        assert found["strip"] <= 80 and found["lines"] > found["strip"], found  # three lines shown, the rest scrolls
        assert found["top"] < 700, f"the first heatmap starts at y={found['top']:.0f} of 800: {found}"
        chips = page.evaluate("() => document.querySelectorAll('.mhv-strip .mhv-tok').length")
        assert chips == 122, chips
    finally:
        context.close()


TRAINING = """() => {
  const play = [...document.querySelectorAll('button')].find(b => b.innerText.includes('Play'));
  const plot = [...document.querySelectorAll('.js-plotly-plot')].find(p => p.data && p.data[0].type === 'heatmap'
    && (p.data[0].name || '').includes(' · step '));
  if (!play || !plot) return null;
  const label = play.querySelector('p') || play;
  const range = document.createRange(); range.selectNodeContents(label);
  const titles = [...plot.querySelectorAll('.annotation')].map(a => a.getBoundingClientRect())
    .map(r => ({left: r.left, right: r.right})).sort((a, b) => a.left - b.left);
  return {play: {text: label.innerText, scroll: label.scrollWidth, client: label.clientWidth,
                 button: play.getBoundingClientRect().width, needs: range.getBoundingClientRect().width}, titles};
}"""


def test_training_controls_and_head_titles_fit_a_narrow_window(browser, streamlit_url):
    """At 1000x800 the Training view's Play button showed "▶…" (a ~50 px column) and the heads' titles
    "L0 H0 · step 4000" ran into each other over ~110 px wide heatmaps."""
    context, page = open_app(browser, streamlit_url, {"model": "tiny", "view": "Training"},
                             f"() => ({TRAINING})() !== null && ({TRAINING})().titles.length >= 2",
                             "the Training view", 1000, 800)
    try:
        found = page.evaluate(TRAINING)
        play = found["play"]
        # the button holds its label and its padding (12 px a side): at ~50 px it showed "▶…"
        assert "Play" in play["text"] and play["button"] >= play["needs"] + 24, \
            found
        titles = found["titles"]
        assert all(b["left"] >= a["right"] - 0.5 for a, b in zip(titles, titles[1:])), titles
    finally:
        context.close()


def test_the_census_seed_box_is_not_as_wide_as_the_page(browser, streamlit_url):
    """Screenshot matrix: the Census view's "Input seed" box (a number up to 999) ran across the whole page."""
    context, page = open_app(browser, streamlit_url, {"model": "tiny", "view": "Census"},
                             "() => !!document.querySelector('[data-testid=\"stNumberInput\"]')",
                             "the seed box", 1600, 1000)
    try:
        widths = page.evaluate("""() => {
          const box = [...document.querySelectorAll('[data-testid="stNumberInput"]')]
            .find(el => el.innerText.includes('Input seed'));
          const main = document.querySelector('[data-testid="stMain"] [data-testid="stMainBlockContainer"]')
            || document.querySelector('[data-testid="stMainBlockContainer"]');
          return [box.getBoundingClientRect().width, main.getBoundingClientRect().width];
        }""")
        assert widths[0] < 0.35 * widths[1], f"seed box {widths[0]:.0f} px in a {widths[1]:.0f} px page"
        assert not page.js_errors, page.js_errors
    finally:
        context.close()
