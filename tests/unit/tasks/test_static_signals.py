"""Static signals' pure parts and their orchestration over a scripted sandbox (the real checkers run in
tests/integration/tasks/test_verify_static.py)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

from actors.tasks.static_signals import (
    NOQA,
    TYPE_IGNORE,
    added_suppressions,
    mypy_counts,
    new_findings,
    ruff_counts,
    static_findings,
)
from sandbox_agent.backend import Sandbox
from sandbox_agent.results import ExecResult


def test_ruff_json_is_counted_per_file_under_its_root() -> None:
    out = json.dumps(
        [{"filename": "/workspace/a.py"}, {"filename": "/workspace/a.py"}, {"filename": "/x/b.py"}]
    )
    assert ruff_counts(out, "/workspace") == Counter({"a.py": 2})
    assert ruff_counts("not json", "/workspace") is None and ruff_counts('{"a": 1}', "/w") is None


def test_mypy_errors_are_counted_per_file_and_notes_are_not() -> None:
    out = (
        '/workspace/pkg/m.py:3: error: Name "x" is not defined  [name-defined]\n'
        "/workspace/pkg/m.py:4:5: error: Incompatible types  [assignment]\n"
        "/workspace/pkg/m.py:4: note: see the docs\n"
        "/inputs/repo/pkg/m.py:1: error: old  [misc]\n"
    )
    assert mypy_counts(out, "/workspace") == Counter({"pkg/m.py": 2, "/inputs/repo/pkg/m.py": 1})


def test_new_findings_never_go_below_zero_per_file() -> None:
    after, before = Counter({"a.py": 3, "b.py": 0}), Counter({"a.py": 1, "b.py": 5})
    assert new_findings(after, before, ["a.py", "b.py"]) == 2


def test_an_added_suppression_comment_counts_as_a_finding() -> None:
    before = b"import os  # noqa: F401\nx = 1\n"
    after = b"import os  # noqa: F401\nimport sys  # NOQA\nx: int = 'a'  # type: ignore[assignment]\n"
    assert added_suppressions(before, after, NOQA) == 1
    assert added_suppressions(before, after, TYPE_IGNORE) == 1
    assert added_suppressions(after, before, NOQA) == 0


class ScriptedChecks:
    """A sandbox whose ruff and mypy answer from a table by the root they are asked about."""

    workspace_path = "/workspace"

    def __init__(self, ruff: dict[str, list[str]], mypy: dict[str, str], fail: str = "") -> None:
        self.ruff, self.mypy, self.fail = ruff, mypy, fail
        self.calls: list[Sequence[str]] = []

    def exec(self, sandbox: Sandbox, argv: Sequence[str], **_: Any) -> ExecResult:
        self.calls.append(argv)
        tool = "ruff" if argv[0].endswith("/ruff") else "mypy"
        if tool == self.fail:
            return ExecResult(2, "", "crashed")
        root = "/workspace" if any(a.startswith("/workspace/") for a in argv) else "/inputs/repo"
        if tool == "ruff":
            return ExecResult(
                0, json.dumps([{"filename": f"{root}/{p}"} for p in self.ruff.get(root, [])]), ""
            )
        return ExecResult(1, self.mypy.get(root, ""), "")


def test_findings_are_the_changes_own_and_a_failed_checker_measures_nothing() -> None:
    checks = ScriptedChecks(
        {"/workspace": ["m.py", "m.py", "new.py"], "/inputs/repo": ["m.py"]},
        {"/workspace": "/workspace/m.py:1: error: bad  [misc]\n", "/inputs/repo": ""},
    )
    contents = (
        {"m.py": b"x = 1\n"},
        {"m.py": b"x = 2  # type: ignore\n", "new.py": b"y = 1\n", "d.txt": b""},
    )
    sandbox = Sandbox("s", None)  # type: ignore[arg-type]
    found = static_findings(checks, sandbox, "/inputs/repo", ["m.py", "new.py", "d.txt", "gone.py"], contents)  # type: ignore[arg-type]
    assert (found.lint_new, found.types_new) == (
        2,
        2,
    )  # one more in m.py, one in new.py; an error and an ignore
    assert all("--isolated" in call for call in checks.calls if call[0].endswith("/ruff"))
    crashed = ScriptedChecks({}, {}, fail="mypy")
    lost = static_findings(crashed, sandbox, "/inputs/repo", ["m.py"], contents)  # type: ignore[arg-type]
    assert lost.lint_new == 0 and lost.types_new is None
    untouched = static_findings(checks, sandbox, "/inputs/repo", ["README.md"], contents)  # type: ignore[arg-type]
    assert (untouched.lint_new, untouched.types_new) == (0, 0)
