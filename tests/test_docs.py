"""Every Python example in the documentation runs, and prints what the documentation says.

Conventions for ``docs/*.md`` and ``README.md``:

- Each fenced block opened with ```` ```python ```` is a complete program. It runs on its own
  in a fresh interpreter (``sys.executable -c <code>``, working directory = repository root,
  60 s timeout) and must exit with status 0.
- A ```` ```text ```` block that follows a Python block with nothing but blank lines in
  between is that block's expected standard output. The comparison is exact after removing
  trailing whitespace from every line and trailing blank lines from the whole text. Standard
  error is not compared (it is shown when a block fails).
- Fences may be indented (inside a list item); the block's code is dedented before it runs.
- A line ``<!-- no-run -->`` just before a Python block (blank lines allowed in between) keeps
  that block from running; use it sparingly, for fragments that cannot stand alone.

Tests are named ``<file>:<line>``, the line of the block's opening fence.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC_FILES = (*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md")
NO_RUN = "<!-- no-run -->"
TIMEOUT_SECONDS = 60

_FENCE = re.compile(r"^\s*```\s*([\w+-]*)\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a Markdown file."""

    path: Path
    line: int  # 1-based line of the opening fence
    end: int  # 1-based line of the closing fence
    lang: str
    code: str
    preceded_by: str  # the nearest non-blank line above the opening fence


@dataclass(frozen=True)
class Example:
    """A runnable Python block and, when the docs give one, the output it must print."""

    block: Block
    expected: str | None

    @property
    def id(self) -> str:
        return f"{self.block.path.relative_to(ROOT)}:{self.block.line}"


def parse_blocks(path: Path) -> list[Block]:
    """The fenced blocks of ``path`` in order; an unclosed fence is an error."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        start = i
        above = next((lines[j].strip() for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            i += 1
        if i == len(lines):
            raise ValueError(f"{path}:{start + 1}: code fence is never closed")
        code = textwrap.dedent("\n".join(lines[start + 1 : i]) + "\n")
        blocks.append(Block(path, start + 1, i + 1, match.group(1).lower(), code, above))
        i += 1
    return blocks


def collect_examples(path: Path) -> list[Example]:
    """The Python blocks of ``path`` that run, each paired with its expected output."""
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks = parse_blocks(path)
    examples: list[Example] = []
    for index, block in enumerate(blocks):
        if block.lang != "python" or block.preceded_by == NO_RUN:
            continue
        expected = None
        following = blocks[index + 1] if index + 1 < len(blocks) else None
        if following is not None and following.lang == "text":
            between = lines[block.end : following.line - 1]
            if all(not text.strip() for text in between):
                expected = following.code
        examples.append(Example(block, expected))
    return examples


def normalize(text: str) -> str:
    """``text`` without trailing whitespace on each line nor trailing blank lines."""
    return "\n".join(line.rstrip() for line in text.splitlines()).rstrip("\n")


EXAMPLES = [example for path in DOC_FILES for example in collect_examples(path)]


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.id for e in EXAMPLES])
def test_example_runs_and_prints_documented_output(example: Example) -> None:
    """A documentation example exits with status 0 and prints its documented output."""
    proc = subprocess.run(
        [sys.executable, "-c", example.block.code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
        check=False,
    )
    assert proc.returncode == 0, (
        f"{example.id} exited with {proc.returncode}\n--- stdout\n{proc.stdout}"
        f"\n--- stderr\n{proc.stderr}"
    )
    if example.expected is not None:
        assert normalize(proc.stdout) == normalize(example.expected), (
            f"{example.id} printed something else than its ```text block"
        )


def test_user_guides_have_runnable_examples() -> None:
    """Each user guide holds at least one runnable Python example."""
    for name in ("getting-started.md", "concepts.md"):
        path = ROOT / "docs" / name
        assert path.exists(), f"docs/{name} is missing"
        assert collect_examples(path), f"docs/{name} has no runnable ```python block"


def test_parser_pairs_output_and_honours_no_run(tmp_path: Path) -> None:
    """The parser pairs a Python block with an adjacent text block, dedents, and skips no-run."""
    doc = tmp_path / "sample.md"
    doc.write_text(
        "# Sample\n\n```python\nprint(1)\n```\n\n```text\n1\n```\n\n"
        "<!-- no-run -->\n```python\nraise SystemExit(1)\n```\n\n"
        "```python\nprint(2)\n```\nprose\n```text\nnot output\n```\n\n"
        "- item\n\n  ```python\n  print(3)\n  ```\n",
        encoding="utf-8",
    )
    examples = collect_examples(doc)
    assert [(e.block.line, e.block.code, e.expected) for e in examples] == [
        (3, "print(1)\n", "1\n"),
        (16, "print(2)\n", None),
        (26, "print(3)\n", None),
    ]
