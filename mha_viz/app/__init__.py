"""The Streamlit app: the only layer that imports streamlit.

    page.py     the page frame: sidebar, text box, token strip, the effect panel, then the chosen view
    state.py    session keys (which heads are off) and the URL (read once, written on every run)
    cache.py    shared models and runs (one per server), torch threads
    common.py   small helpers every view may use: head names, Markdown escaping, predictions, display transforms
    context.py  ViewContext: everything a view may read
    views/      one file per view, each with render(ctx); views/__init__.py is the registry
"""

__all__ = ["main"]


def main() -> None:
    """The page (page.main). Imported on call, so the streamlit-free helpers in this package (names.py) can be
    imported by the notebook widget without streamlit."""
    from mha_viz.app.page import main as page_main

    page_main()
