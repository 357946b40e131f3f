"""Test files need unique basenames across the tiers: pytest imports each as a top-level module (rootdir-relative
"prepend" mode, no __init__.py), so tests/unit/test_x.py and tests/e2e/test_x.py cannot both be collected and
the whole suite stops at collection."""
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_file_has_a_unique_basename():
    seen = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        if "artifacts" not in path.parts:
            seen[path.name].append(str(path.relative_to(TESTS)))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not clashes, f"rename one of each pair (e.g. add _browser to the e2e one): {clashes}"
