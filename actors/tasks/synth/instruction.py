"""The instruction of a synthesized task, written from its failing tests only, like a maintainer's bug
report: which tests fail, what they check (their docstrings), what they report (an excerpt of each
failure), and what to do. It must help without giving the fix away, so it never shows:

- a *forbidden* snippet: the pipeline passes the replaced source text and its replacement; a snippet is
  checked line by line, whitespace collapsed, and only when it is *significant*: at least 4 characters
  other than spaces, at least one letter, and not only Python keywords. Shorter or punctuation-only
  snippets (`<=`, `+ 1`, `0`) and keyword ones (`None`, `is not`) are in every other error message,
  so they cannot be checked without hiding everything; where they would come from in a failure text,
  the project's source lines, no line is ever shown (below);
- a source line of any traceback frame (lines starting with `>` or indented code, in pytest's long,
  short and native formats), tests' own lines included: the `E` lines carry a failing assertion with
  its values, and the test ids say where the tests are;
- a file location (`toolz/itertoolz.py:123`, `File "...", line 123`), which would point at the line;
- the words "mutation", "mutant" or "mutated": nothing says the bug was made on purpose.

Test ids are shown as they are (the agent must know which tests to make pass); the pipeline's final
check, `leaks`, also reads them. Phrasings vary with a hash of the test ids, so that a thousand tasks do
not all read alike, and the same tests always give the same text.
"""

from __future__ import annotations

import hashlib
import keyword
import re
from collections.abc import Sequence
from dataclasses import dataclass

MAX_CHARS = 1500  # the instruction's length, aimed at (test ids longer than the budget still show)

_LOCATION = re.compile(r"[\w./\\-]+\.py(?::\d+|\", line \d+)|File \"[^\"]+\", line \d+")
_LOCATION_LINE = re.compile(r"^\S+\.py:\d+: (?P<rest>.*)$")
_SEPARATOR = re.compile(r"^(?:[_=\-+] ?){3,}")  # "_ _ _ _", "____ test_x ____", "---- Captured ----"
_NATIVE_FRAME = re.compile(r'^\s*File "[^"]*", line \d+')
_CODE_START = re.compile(r"^(?:(?:async\s+)?def|class)\s|^@")
_ARGUMENTS_LINE = re.compile(r"^[A-Za-z_]\w* = ")
_NOISE = re.compile(r"^(Use -v to get (more diff|the full diff)|Traceback \(most recent call last\):)")
_GIVEAWAY_WORDS = re.compile(r"\bmutat(?:ion|ions|ed)\b|\bmutants?\b", re.IGNORECASE)


@dataclass(frozen=True)
class FailingTest:
    test_id: str  # "tests/test_itertoolz.py::test_take", "tests/test_x.py::TestFoo::test_bar[1-2]"
    docstring: str | None  # the test function's docstring, if any
    error: str  # pytest's failure text for it (the report's longrepr)

    @property
    def name(self) -> str:
        return self.test_id.split("::", 1)[1] if "::" in self.test_id else self.test_id

    @property
    def file(self) -> str | None:
        return self.test_id.split("::", 1)[0] if "::" in self.test_id else None


def significant(forbidden: Sequence[str]) -> list[str]:
    """The snippets that are checked: each line of each snippet, whitespace collapsed, when significant."""
    found: list[str] = []
    for snippet in forbidden:
        for line in snippet.splitlines():
            flat = _flat(line)
            if not _is_trivial(flat) and flat not in found:
                found.append(flat)
    return found


def leaks(instruction: str, forbidden: Sequence[str]) -> list[str]:
    """The significant forbidden snippets found in `instruction` (whitespace-insensitive)."""
    text = _flat(instruction)
    return [snippet for snippet in significant(forbidden) if snippet in text]


def error_excerpt(error: str, forbidden: Sequence[str], max_lines: int = 6, max_chars: int = 600) -> str:
    """The lines of a pytest failure worth showing: its `E` lines (assertion message, exception and
    message), else its last plain lines; never a source line, a file location, a forbidden snippet.
    At most `max_lines` lines and `max_chars` characters, with a "..." line or suffix when trimmed."""
    if max_lines < 1 or max_chars < 10:
        raise ValueError(f"an excerpt needs max_lines >= 1 and max_chars >= 10, not {max_lines}, {max_chars}")
    snippets = significant(forbidden)
    lines = [line for line in _message_lines(error.splitlines(), max_lines) if _showable(line, snippets)]
    lines = [line.rstrip() for line in lines if line.strip()]
    if len(lines) > max_lines:
        lines = [*lines[: max_lines - 1], "..."]
    text = "\n".join(lines)
    if len(text) > max_chars:
        text = text[: max_chars - 3].rstrip() + "..."
    return text


def write_instruction(
    project: str, failing: Sequence[FailingTest], *, forbidden: Sequence[str] = (), max_tests: int = 5
) -> str:
    """The task's instruction (markdown), from the failing tests; see the module's docstring."""
    if not failing:
        raise ValueError("write_instruction needs at least one failing test")
    if max_tests < 1:
        raise ValueError(f"max_tests must be at least 1, not {max_tests}")
    tests = sorted({test.test_id: test for test in failing}.values(), key=lambda test: test.test_id)
    digest = int(hashlib.sha256("\n".join(test.test_id for test in tests).encode()).hexdigest(), 16)
    phrasing = _Phrasing(digest, len(tests))
    shown, more = tests[:max_tests], len(tests) - max_tests
    snippets = significant(forbidden)
    text = ""
    for doc_chars, excerpt_chars in ((200, 600), (160, 400), (120, 250), (80, 150), (0, 80), (0, 0)):
        parts = [phrasing.intro(project), _listing(shown, more)]
        checks = _checks(shown, snippets, doc_chars)
        if checks:
            parts.append(f"{phrasing.checks()}\n{checks}")
        reports = _reports(shown, forbidden, excerpt_chars)
        if reports:
            parts.append(f"{phrasing.reports()}\n\n{reports}")
        parts.append(phrasing.closing(project))
        text = "\n\n".join(parts) + "\n"
        if len(text) <= MAX_CHARS:
            break
    return text


# ------------------------------------------------------------------------------------------ pieces


def _flat(text: str) -> str:
    return " ".join(text.split())


def _is_trivial(flat: str) -> bool:
    compact = flat.replace(" ", "")
    return (
        len(compact) < 4
        or not any(char.isalpha() for char in compact)
        or all(keyword.iskeyword(word) for word in flat.split())
    )


def _showable(line: str, snippets: Sequence[str]) -> bool:
    flat = _flat(line)
    return (
        not _LOCATION.search(line)
        and not _GIVEAWAY_WORDS.search(line)
        and not _NOISE.match(line.strip())
        and not any(snippet in flat for snippet in snippets)
    )


def _dedent(lines: list[str]) -> list[str]:
    indents = [len(line) - len(line.lstrip()) for line in lines if line.strip()]
    cut = min(indents, default=0)
    return [line[cut:] for line in lines]


def _message_lines(lines: list[str], max_lines: int) -> list[str]:
    """pytest's `E` lines; else, in a native traceback, what follows the last frame (the exception and
    its message); else the last lines that are not part of a traceback frame."""
    messages = [line[1:] for line in lines if re.match(r"E(\s|$)", line)]
    if messages:
        return _dedent(messages)
    frames = [index for index, line in enumerate(lines) if _NATIVE_FRAME.match(line)]
    if frames:
        index = frames[-1] + 1
        while index < len(lines) and (not lines[index].strip() or lines[index][0].isspace()):
            index += 1  # the frame's code and its ^^^ markers
        if index < len(lines):
            return lines[index:]
    return [line for line in map(_plain, lines) if line][-max_lines:]


def _plain(line: str) -> str:
    """A line that is not part of a traceback frame (code, location, arguments, separators), or ""."""
    if not line.strip() or line[0].isspace() or line.startswith(">") or _CODE_START.match(line):
        return ""
    location = _LOCATION_LINE.match(line)
    if location is not None:  # "path.py:12: ValueError" keeps its exception; "path.py:12: in f" goes
        rest = location.group("rest").strip()
        return "" if rest.startswith("in ") else rest
    if _SEPARATOR.match(line) or _ARGUMENTS_LINE.match(line):
        return ""
    return line


def _listing(shown: Sequence[FailingTest], more: int) -> str:
    lines = [f"- `{test.name}` ({test.file})" if test.file else f"- `{test.name}`" for test in shown]
    if more > 0:
        lines.append(f"- and {more} more {'test' if more == 1 else 'tests'}")
    return "\n".join(lines)


def _checks(shown: Sequence[FailingTest], snippets: Sequence[str], max_chars: int) -> str:
    if max_chars <= 0:
        return ""
    lines = []
    for test in shown:
        summary = _flat((test.docstring or "").strip().split("\n\n")[0])
        if not summary or not _showable(summary, snippets):
            continue
        if len(summary) > max_chars:
            summary = summary[: max_chars - 3].rstrip() + "..."
        lines.append(f"- `{test.name}`: {summary}")
    return "\n".join(lines)


def _reports(shown: Sequence[FailingTest], forbidden: Sequence[str], max_chars: int) -> str:
    if max_chars <= 0:
        return ""
    by_excerpt: dict[str, list[str]] = {}
    for test in shown:
        excerpt = error_excerpt(test.error, forbidden, max_lines=6, max_chars=max_chars)
        if excerpt:
            by_excerpt.setdefault(excerpt, []).append(test.name)
    blocks = []
    for excerpt, names in by_excerpt.items():
        indented = "\n".join(f"    {line}" if line else "" for line in excerpt.splitlines())
        blocks.append(", ".join(f"`{name}`" for name in names) + ":\n\n" + indented)
    return "\n\n".join(blocks)


@dataclass(frozen=True)
class _Phrasing:
    """One of several wordings, picked by a hash of the test ids; `count` is how many tests fail."""

    digest: int
    count: int

    def _pick(self, choices: Sequence[str], salt: int, **values: str) -> str:
        one = self.count == 1
        words = {
            "tests": "this test" if one else f"these {self.count} tests",
            "fail": "fails" if one else "fail",
            "they": "it" if one else "they",
            "them": "it" if one else "them",
            "pass": "passes" if one else "pass",
            "check": "checks" if one else "check",
            "report": "reports" if one else "report",
            "its": "its" if one else "their",
        }
        return choices[(self.digest >> (salt * 8)) % len(choices)].format(**words, **values)

    def intro(self, project: str) -> str:
        intros = [
            "In this checkout of {project}, {tests} {fail}:",
            "{project}'s own test suite does not pass here: {tests} {fail}.",
            "Bug report for {project}: on the current code, {tests} {fail}:",
            "Running {project}'s tests in this checkout, {tests} {fail}:",
        ]
        return self._pick(intros, 0, project=project)

    def checks(self) -> str:
        return self._pick(
            ["What {they} {check}:", "What the tests are about:", "The intent, from {its} docstrings:"], 1
        )

    def reports(self) -> str:
        return self._pick(["What {they} {report}:", "How {they} {fail}:", "The failure messages:"], 2)

    def closing(self, project: str) -> str:
        closings = [
            "Find and fix the bug in the library code so that {they} {pass}, without breaking other tests. "
            "The tests themselves are right; do not change them.",
            "Please track down the cause in {project}'s code and fix it there, so that {they} {pass} and the "
            "rest of the suite keeps passing. The tests are correct: leave them as they are.",
            "The fix belongs in {project} itself, not in the tests: make {them} pass again without breaking "
            "any other test, and do not edit the tests.",
        ]
        return self._pick(closings, 3, project=project)
