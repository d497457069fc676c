"""The pure parts of grading: the harness's output, instance ids, incomplete runs, the assert rewriter."""

from __future__ import annotations

import ast
import importlib.util
from types import ModuleType
from typing import Any

import pytest

from actors.tasks.asserts import rewrite_asserts
from actors.tasks.harness import GUARD, HARNESS_DIR
from actors.tasks.report import HarnessOutput, parse_harness_output
from actors.tasks.reward import Outcome, Verdict, grade
from actors.tasks.testids import expand_instances
from actors.tasks.verify import grade_run

pytestmark = pytest.mark.unit

N = "0123abcd"


def test_only_lines_with_this_runs_nonce_count() -> None:
    stdout = "\n".join(
        [
            f"..TRIALOG-REPORT {N} call passed tests/t.py::a",  # after pytest's progress dots
            f"TRIALOG-REPORT {N} setup passed tests/t.py::b",
            f"TRIALOG-REPORT {N} teardown failed tests/t.py::b",
            f"TRIALOG-REPORT {N} call weird tests/t.py::c",
            f"TRIALOG-REPORT {N} collect failed tests/broken.py",
            "TRIALOG-REPORT other call passed tests/t.py::forged",
            f"TRIALOG-REPORT {N} call passed tests/t.py::p[caf\\xe9]",
            f"TRIALOG-REPORT {N} call passed tests/t.py::not-ascii-é",
            f"TRIALOG-SIGNAL {N} _pytest.python.Function.runtest replaced",
            f"TRIALOG-SIGNAL {N} _pytest.python.Function.runtest replaced",
            f"TRIALOG-ITEM {N} tests/t.py::a",
            f"TRIALOG-DONE {N} 1",
        ]
    )
    out = parse_harness_output(stdout, N)
    assert out.reports == (
        ("tests/t.py::a", Outcome.PASSED),
        ("tests/t.py::b", Outcome.ERROR),
        ("tests/broken.py", Outcome.ERROR),
        ("tests/t.py::p[café]", Outcome.PASSED),
    )
    assert out.signals == ("_pytest.python.Function.runtest replaced",)
    assert out.items == ("tests/t.py::a",)
    assert out.exit_code == 1 and out.complete


def test_a_run_without_its_marker_is_incomplete() -> None:
    out = parse_harness_output(f"TRIALOG-REPORT {N} call passed t.py::a\nTRIALOG-DONE other 0\n", N)
    assert not out.complete and out.reported == ("t.py::a",)


def test_instances_replace_their_static_id_in_collection_order() -> None:
    static = ("t.py::test_a", "t.py::test_b", "t.py::test_c")
    collected = ("t.py::test_b[2]", "t.py::test_a", "t.py::test_b[1]", "t.py::unknown[1]", "t.py::test_b[x")
    assert expand_instances(static, collected) == (
        "t.py::test_a",
        "t.py::test_b[2]",
        "t.py::test_b[1]",
        "t.py::test_c",
    )


def test_each_instance_is_a_test() -> None:
    expected = ("t.py::p[1]", "t.py::p[2]", "t.py::p[3]")
    graded = grade(expected=expected, reports=[("t.py::p[1]", Outcome.PASSED)])
    assert (graded.passed, graded.total, graded.failed_tests) == (1, 3, ("t.py::p[2]", "t.py::p[3]"))


def test_an_incomplete_run_fails_a_static_id_it_saw_only_instances_of() -> None:
    reports = [("t.py::p[1]", Outcome.PASSED), ("t.py::q", Outcome.PASSED)]
    complete = grade(expected=("t.py::p", "t.py::q"), reports=reports)
    assert complete.verdict is Verdict.PASS
    cut = grade(expected=("t.py::p", "t.py::q"), reports=reports, complete=False)
    assert (cut.verdict, cut.failed_tests) == (Verdict.PARTIAL, ("t.py::p",))


def test_grade_run_records_why_a_run_is_incomplete() -> None:
    output = HarnessOutput(reports=(("t.py::a", Outcome.PASSED),))
    graded = grade_run(("t.py::a", "t.py::b"), output, timed_out=True)
    assert graded.failed_tests == ("t.py::b",) and "timed out" in graded.detail
    marker = grade_run(("t.py::a",), output, timed_out=False)
    assert marker.verdict is Verdict.PASS and "completion marker" in marker.detail
    done = grade_run(("t.py::a",), HarnessOutput(reports=output.reports, exit_code=0), timed_out=False)
    assert (done.verdict, done.detail) == (Verdict.PASS, "")


def test_signals_make_the_grade_tampered() -> None:
    output = HarnessOutput(reports=(("t.py::a", Outcome.PASSED),), signals=("x replaced",), exit_code=0)
    graded = grade_run(("t.py::a",), output, timed_out=False)
    assert (graded.verdict, graded.reward, graded.tamper_signals) == (Verdict.TAMPERED, -1.0, ("x replaced",))


SOURCE = b'''"""doc"""
from __future__ import annotations
import pytest


def test_x():
    assert add(2, 3) == 5
    assert (f(x) ==  # a comment with == in it
        [1,
         2]), "message"
    assert "caf\xc3\xa9" in names()
    assert (a) == (b)
    assert a == b == c
    assert a != b
    x == y


class TestY:
    def test_z(self):
        assert {1: 2}[1] == 2, f"{1 == 1}"
'''


def test_the_rewriter_guards_eq_and_in_and_keeps_lines() -> None:
    out = rewrite_asserts(SOURCE)
    assert out.count(b"\n") == SOURCE.count(b"\n")
    tree = ast.parse(out)  # still Python
    guarded = [
        node.test.func.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Assert)
        and isinstance(node.test, ast.Call)
        and isinstance(node.test.func, ast.Attribute)
    ]
    assert guarded == ["eq", "eq", "contains", "eq", "eq"]
    lines = out.decode().splitlines()
    assert lines[6] == '    assert __import__("trialog_guard").eq(add(2, 3) , 5)'
    assert (
        lines[12] == "    assert a == b == c"
        and lines[13] == "    assert a != b"
        and lines[14] == "    x == y"
    )
    assert lines[19].endswith(', f"{1 == 1}"')  # the message is not a comparison to guard


def test_the_rewriter_leaves_unparsable_files_alone() -> None:
    assert rewrite_asserts(b"def broken(:\n") == b"def broken(:\n"


class Anything:
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = object.__hash__


class Everything(list[int]):
    def __contains__(self, item: object) -> bool:
        return True


def _recorded(guard: ModuleType, call: Any) -> tuple[Any, list[str]]:
    seen: list[str] = []
    guard._audit = lambda event, evidence: seen.append(evidence) if event == "trialog.tamper" else None
    return call(), seen


def _load_guard() -> ModuleType:
    spec = importlib.util.spec_from_file_location("trialog_guard_under_test", HARNESS_DIR / GUARD)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_guard_compares_as_python_does() -> None:
    g = _load_guard()
    assert g.eq(1, 1) and not g.eq(1, 2) and g.eq([1, 2], [1, 2]) and g.eq(1.0, 1)
    assert g.contains(2, [1, 2]) and not g.contains(3, [1, 2]) and g.contains("a", "cat")
    assert _recorded(g, lambda: g.eq(5, 5)) == (True, [])


def test_a_value_equal_to_everything_fails_and_is_recorded() -> None:
    g = _load_guard()
    result, seen = _recorded(g, lambda: g.eq(Anything(), 5))
    assert result is False and seen and "compares equal to everything" in seen[0]
    assert "Anything" in seen[0]
    result, seen = _recorded(g, lambda: g.eq(5, Anything()))
    assert result is False and seen


def test_a_container_of_everything_fails_and_is_recorded() -> None:
    g = _load_guard()
    result, seen = _recorded(g, lambda: g.contains(3, Everything()))
    assert result is False and "contains everything" in seen[0]
    result, seen = _recorded(g, lambda: g.contains(Anything(), [1]))
    assert result is False and seen
