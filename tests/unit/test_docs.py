"""The README a newcomer reads in five minutes, and the docs/ pages that hold what it left out, each kept true here
where it holds a table (the measures' and the architectures' tables have their tests beside their makers)."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 150
FIRST_LINES = ("# mha-viz", "", "**Set up and run the app** (then open the URL it prints, default http://localhost:8501):",
               "", "```bash", "make run", "```")
# Pages another developer is writing this round: linked already, checked once they land.
PENDING = {"docs/lesson.md"}


def _links(text: str) -> set[str]:
    return {m for m in re.findall(r"\]\(([^)#\s]+)", text) if not m.startswith(("http://", "https://"))}


def test_the_readme_is_short_and_links_every_page():
    """At most 150 lines, starting with the two commands, and every page of docs/ linked (a page nobody links is
    a page nobody reads); every file it links is there."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines: move the detail to a page of docs/"
    assert tuple(lines[:len(FIRST_LINES)]) == FIRST_LINES
    assert "make test" in lines[:20]
    links = _links("\n".join(lines))
    pages = {p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md")}
    assert not pages - links, f"pages of docs/ the README does not link: {sorted(pages - links)}"
    broken = [link for link in links if not (ROOT / link).exists() and link not in PENDING]
    assert not broken, f"README.md links files that are not there: {broken}"


def test_every_page_links_files_that_are_there():
    broken = {page.name: [link for link in _links(page.read_text()) if not (page.parent / link).exists()
                          and f"docs/{link}" not in PENDING]
              for page in (ROOT / "docs").glob("*.md")}
    broken = {page: links for page, links in broken.items() if links}
    assert not broken, f"docs/ pages link files that are not there: {broken}"


def test_the_settings_page_lists_every_variable():
    """docs/settings.md's table has one row per environment variable `mha_viz.settings.Settings` reads, no more."""
    from mha_viz.settings import Settings

    page = (ROOT / "docs" / "settings.md").read_text()
    listed = re.findall(r"^\| `(MHA_VIZ_\w+)` \|", page, re.MULTILINE)
    assert sorted(listed) == sorted(name for name, _ in Settings.documented()), listed
