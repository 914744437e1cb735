"""Every Python example in the documentation runs, as written.

Each Markdown page under ``docs/`` and ``README.md`` is one test. Its fenced code blocks whose
info string is exactly ``python`` run in order, in one namespace per page, so a later block
may use what an earlier one defined. Blocks that need ``await`` are complete programs ending in
``trio.run(main)``. A block fenced as ``python-no-run`` is shown (highlighted as Python) but not
run; use it only for code that truly cannot run here, such as a server.

A failing block's traceback names the Markdown file and the line inside it. Examples may use
only lionexec's public API: importing a private module or name is a failure here.

No Sphinx is needed: this only reads the Markdown files.
"""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import attrs
import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

#: The fence tag of examples that are run, and the one of examples that are only shown.
RUN_TAG = "python"
NO_RUN_TAG = "python-no-run"

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
_PRIVATE = re.compile(r"\blionexec(?:\.[A-Za-z0-9]\w*)*\._\w*")


@attrs.frozen
class Block:
    """One fenced code block: its tag, its first code line (1-based) and its source."""

    tag: str
    line: int
    source: str


def fenced_blocks(text: str, where: str) -> list[Block]:
    """Every fenced code block of a CommonMark document, in order."""
    blocks: list[Block] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opened = _FENCE.match(lines[index])
        if opened is None:
            index += 1
            continue
        fence = opened["fence"]
        tag = opened["info"].strip().split(" ", 1)[0] if opened["info"].strip() else ""
        start = index + 1
        index = start
        while index < len(lines):
            closing = lines[index].strip()
            if (
                closing
                and set(closing) == {fence[0]}
                and len(closing) >= len(fence)
                and len(lines[index]) - len(lines[index].lstrip(" ")) <= 3
            ):
                break
            index += 1
        else:
            raise AssertionError(f"{where}:{start}: code block opened here is never closed")
        blocks.append(Block(tag, start + 1, "\n".join(lines[start:index]) + "\n"))
        index += 1
    return blocks


def pages() -> list[Path]:
    found = sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.relative_to(DOCS).parts)
    readme = ROOT / "README.md"
    return [*found, readme] if readme.exists() else found


def _page_id(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def runnable(path: Path) -> list[Block]:
    text = path.read_text(encoding="utf-8")
    return [b for b in fenced_blocks(text, _page_id(path)) if b.tag == RUN_TAG]


def test_the_docs_have_examples_to_run() -> None:
    assert DOCS.is_dir(), f"{DOCS} is missing"
    count = sum(len(runnable(p)) for p in pages())
    assert count >= 20, f"only {count} runnable examples found under {DOCS}"


def test_the_fence_reader_finds_blocks_and_their_lines() -> None:
    text = "# t\n\n```python\nx = 1\n```\n\n````md\n```python\nnot a block\n```\n````\n"
    text += "```python-no-run\nraise SystemExit\n```\n"
    blocks = fenced_blocks(text, "t.md")
    assert [(b.tag, b.line) for b in blocks] == [("python", 4), ("md", 8), ("python-no-run", 13)]
    assert blocks[0].source == "x = 1\n"


@pytest.mark.parametrize("path", pages(), ids=_page_id)
def test_examples_run(path: Path) -> None:
    where = _page_id(path)
    # A real (temporary) module, so classes defined in examples have a module to live in.
    module = types.ModuleType("docs_example_" + re.sub(r"\W", "_", where))
    module.__file__ = str(path)
    sys.modules[module.__name__] = module
    try:
        for block in runnable(path):
            private = _PRIVATE.search(block.source)
            assert private is None, (
                f"{where}:{block.line}: examples use the public API only, not {private.group()}"
            )
            # Pad so that line numbers in a traceback are the Markdown file's own.
            padded = "\n" * (block.line - 1) + block.source
            exec(compile(padded, str(path), "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
