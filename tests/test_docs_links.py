"""Every relative link in README and docs/ leads somewhere: the file exists, and a
``#anchor`` names one of its headings (as GitHub makes anchors from them)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#+ (.*)$", re.MULTILINE)


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_anchor_follows_githubs_rule() -> None:
    assert anchor("Restarts before where episodes end, on 1-3") == "restarts-before-where-episodes-end-on-1-3"
    assert anchor("What came next, as it stood on 2026-12-04") == "what-came-next-as-it-stood-on-2026-12-04"


def headings(page: Path) -> set[str]:
    """The anchors a page's headings make."""
    return {anchor(heading) for heading in HEADING.findall(page.read_text())}


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for link in LINK.findall(page.read_text()):
        if link.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, fragment = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(f"{link} (no file {target.relative_to(ROOT)})")
        elif fragment and target.suffix == ".md" and fragment not in headings(target):
            broken.append(f"{link} (no heading makes #{fragment})")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)
