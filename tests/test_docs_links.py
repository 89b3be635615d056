"""Every relative link of the README, docs/*.md and tests/benchmarks/README.md
leads somewhere: its file exists and, for a Markdown file, its `#anchor` is
the slug of one of that file's headings (GitHub's rule), so that a section
moved to another page cannot leave a link behind."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [
    REPO / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
    REPO / "tests" / "benchmarks" / "README.md",
]

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
# [text](target) and ![alt](target); the text may hold `code` and span lines.
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
# A code span may wrap lines within a paragraph, never across a blank line.
CODE_SPAN = re.compile(r"(`+)(?:(?!\1)[^\n]|\n(?![ \t]*\n))+?\1")


def unfenced(text: str) -> str:
    """The text with fenced code blocks blanked (so that line numbers stay)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            lines.append("")
        else:
            lines.append("" if fenced else line)
    return "\n".join(lines)


def prose(text: str) -> str:
    """The text outside code: fenced blocks and inline code spans blanked."""
    return CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), unfenced(text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text (links and emphasis markers
    dropped) lowercased, every character but letters, digits, `_`, `-` and
    spaces removed, each space a hyphen."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.lower()
    text = "".join(c for c in text if c.isalnum() or c in "_- ")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: Counter[str] = Counter()
    found = set()
    for line in unfenced(path.read_text()).splitlines():
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        found.add(base if not seen[base] else f"{base}-{seen[base]}")
        seen[base] += 1
    return found


def links(path: Path) -> list[tuple[int, str]]:
    text = prose(path.read_text())
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in LINK.finditer(text)]


def broken(path: Path, root: Path = REPO) -> list[str]:
    problems = []
    for line, target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
            continue  # http:, mailto: ...: not ours to check
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(root)}:{line}: {target}"
        if not dest.exists():
            problems.append(f"{where}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{where}: no heading with that anchor in {dest.name}")
    return problems


def test_the_pages_exist():
    assert all(page.is_file() for page in PAGES)
    assert len(PAGES) > 3


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page):
    assert broken(page) == []


def test_the_readme_links_every_docs_page():
    targets = {
        (REPO / target.partition("#")[0]).resolve() for _, target in links(REPO / "README.md")
    }
    assert set(PAGES[1:-1]) - targets == set()


def test_the_slugs_follow_githubs_rule():
    assert slug("Security: what a queue may still receive") == (
        "security-what-a-queue-may-still-receive"
    )
    assert slug("Operator's guide") == "operators-guide"
    assert slug("fanout.py: eventq beside nginx + nchan") == "fanoutpy-eventq-beside-nginx--nchan"
    assert slug("Shards: `--shards N`") == "shards---shards-n"
    assert slug("`background_updates.py`") == "background_updatespy"
    assert "shards---shards-n" in anchors(REPO / "tests" / "benchmarks" / "README.md")


def test_a_broken_link_is_found(tmp_path):
    (tmp_path / "other.md").write_text("# Other\n\n## Real section\n\n## Real section\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\nSee [a](other.md#real-section), [b](other.md#real-section-1),\n"
        "[c](#page), [d](https://example.com/x#y) and `[e](nowhere.md)`.\n\n"
        "```\n[f](nowhere.md)\n```\n\n"
        "Broken: [g](missing.md), [h](other.md#no-such), [i](#nope).\n"
    )
    assert broken(page, root=tmp_path) == [
        "page.md:10: missing.md: no such file",
        "page.md:10: other.md#no-such: no heading with that anchor in other.md",
        "page.md:10: #nope: no heading with that anchor in page.md",
    ]
