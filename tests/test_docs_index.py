"""The docs stay findable and the README stays short (issue 51).

- docs/README.md links every docs/*.md, so no page is orphaned (gpu.md was linked from nowhere);
- the README is at most 100 lines, and no paragraph, list item or table row in it runs past
  80 words (one cell had grown to 799 characters);
- every relative link in README.md and docs/*.md points at a file that exists;
- every source path the guides name (``engine/layout/shard_plan.py``, ``bench/sweeps/x.py``) exists:
  the code moved into rooms and three paths in the docs still named the old places.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
MAX_LINES = 100
MAX_WORDS = 80

_LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")


def links(path: Path) -> set[Path]:
    """The local files a Markdown file links to (http links and anchors left out)."""
    found = set()
    for target in _LINK.findall(path.read_text(encoding="utf-8")):
        if "://" in target or target.startswith("mailto:"):
            continue
        found.add((path.parent / target).resolve())
    return found


def paragraphs(text: str) -> list[str]:
    """Prose blocks: runs of lines between blank lines, outside code fences; each list item and
    each table row counts as a block of its own; headings are left out."""
    blocks: list[list[str]] = []
    current: list[str] = []
    in_fence = False

    def close() -> None:
        if current:
            blocks.append(current.copy())
            current.clear()

    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            close()
            in_fence = not in_fence
            continue
        if in_fence or stripped.startswith("#"):
            close()
            continue
        if not stripped:
            close()
            continue
        if re.match(r"([-*+]|\d+\.)\s", stripped) or stripped.startswith("|"):
            close()
            current.append(stripped)
            if stripped.startswith("|"):
                close()
            continue
        current.append(stripped)
    close()
    return [" ".join(block) for block in blocks]


def words(block: str) -> int:
    prose = re.sub(r"\]\([^)]*\)", "]", block)  # a link's target is not read as words
    return len([w for w in re.split(r"[\s|]+", prose) if re.search(r"\w", w)])


def test_docs_index_links_every_page():
    index = DOCS / "README.md"
    linked = links(index)
    pages = sorted(p for p in DOCS.glob("*.md") if p.name != "README.md")
    missing = [p.name for p in pages if p.resolve() not in linked]
    assert pages, "no docs/*.md found"
    assert not missing, f"docs/README.md does not link {', '.join(missing)}"


def test_readme_is_short():
    text = README.read_text(encoding="utf-8")
    n_lines = len(text.splitlines())
    assert n_lines <= MAX_LINES, f"README.md has {n_lines} lines (at most {MAX_LINES})"
    long = [(words(b), b[:60]) for b in paragraphs(text) if words(b) > MAX_WORDS]
    assert not long, f"README.md paragraphs over {MAX_WORDS} words: {long}"


def test_paragraph_counter_sees_a_long_paragraph():
    """The check itself: a paragraph of 81 words fails, a list of short items does not."""
    long = " ".join(["word"] * (MAX_WORDS + 1))
    assert max(words(b) for b in paragraphs(f"# t\n\n{long}\n")) == MAX_WORDS + 1
    items = "\n".join(f"- {' '.join(['w'] * 20)}" for _ in range(10))
    assert max(words(b) for b in paragraphs(items)) == 20


def test_relative_links_resolve():
    broken = []
    for page in [README, ROOT / "CONTRIBUTING.md", *sorted(DOCS.glob("*.md"))]:
        if not page.exists():
            continue
        for target in links(page):
            if not target.exists():
                broken.append(f"{page.relative_to(ROOT)} → {target}")
    assert not broken, "broken links:\n" + "\n".join(broken)


# A path into the tree: a top folder, lower-case folders and a file name; placeholders such as
# synth_NAME.py (upper case) do not match, test_x.py is skipped below.
_SOURCE_PATH = re.compile(r"(?<![\w./-])((?:engine|app|widgets|bench|tests|profiles)/"
                          r"[a-z0-9_/.-]*[a-z0-9_]\.(?:py|toml))\b")
# The engineering record keeps the names of its day.
RECORD = {"decisions.md", "benchmarks.md"}


def source_paths(text: str) -> set[str]:
    return {p for p in _SOURCE_PATH.findall(text) if not p.endswith("/test_x.py")}


def test_the_docs_name_only_source_files_that_exist():
    pages = [README, ROOT / "CONTRIBUTING.md", ROOT / "bench" / "README.md",
             *(p for p in sorted(DOCS.glob("*.md")) if p.name not in RECORD)]
    gone = [f"{page.relative_to(ROOT)}: {path}" for page in pages if page.exists()
            for path in sorted(source_paths(page.read_text(encoding="utf-8"))) if not (ROOT / path).exists()]
    assert not gone, "paths that do not exist (moved into a room?):\n" + "\n".join(gone)


def test_source_path_finder_sees_a_path_and_skips_placeholders():
    """The check itself: a moved path is found; prose, placeholders and URLs are not paths."""
    text = ("see bench/phone_check.py and engine/layout/shard_plan.py; add engine/synth/synth_NAME.py, "
            "run tests/test_x.py, https://x.org/engine/a.py")
    assert source_paths(text) == {"bench/phone_check.py", "engine/layout/shard_plan.py"}
