"""The notebook tests' order (see below)."""

def pytest_collection_modifyitems(config, items):
    """The real-browser notebook tests first: nbclient (test_example) leaves an asyncio loop set in this thread,
    inside which Playwright's sync API refuses to start."""
    items.sort(key=lambda item: 0 if "test_jupyter_browser" in item.nodeid else 1)
