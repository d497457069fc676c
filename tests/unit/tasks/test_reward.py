from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actors.tasks.reward import Grade, Outcome, Verdict, error_grade, grade

P, F, E, S = Outcome.PASSED, Outcome.FAILED, Outcome.ERROR, Outcome.SKIPPED
IDS = ("t.py::a", "t.py::b", "t.py::c", "t.py::d")


def _grade(
    reports: list[tuple[str, Outcome]], tampered_paths: Sequence[str] = (), build_ok: bool = True
) -> Grade:
    return grade(expected=IDS, reports=reports, tampered_paths=tampered_paths, build_ok=build_ok)


def test_all_pass() -> None:
    result = _grade([(i, P) for i in IDS])
    assert (result.reward, result.verdict, result.passed, result.total, result.failed_tests) == (
        1.0,
        Verdict.PASS,
        4,
        4,
        (),
    )


def test_partial_is_fraction_minus_penalty() -> None:
    result = _grade([("t.py::a", P), ("t.py::b", P), ("t.py::c", P), ("t.py::d", F)])
    assert result.verdict is Verdict.PARTIAL
    assert result.reward == pytest.approx(3 / 4 - 0.2)
    assert result.failed_tests == ("t.py::d",)


def test_nothing_passes() -> None:
    result = _grade([(i, F) for i in IDS])
    assert (result.verdict, result.passed) == (Verdict.FAIL, 0)
    assert result.reward == pytest.approx(-0.2)


def test_missing_errored_and_skipped_tests_fail() -> None:
    # a: passed; b: never reported; c: errored in setup; d: skipped (by the code under test, say)
    result = _grade([("t.py::a", P), ("t.py::c", E), ("t.py::d", S)])
    assert result.failed_tests == ("t.py::b", "t.py::c", "t.py::d")
    assert result.passed == 1 and result.reward == pytest.approx(1 / 4 - 0.2)


def test_empty_report_earns_nothing() -> None:
    result = _grade([])
    assert result.verdict is Verdict.FAIL and result.failed_tests == IDS


def test_any_failing_phase_fails_the_test() -> None:
    # The call passed but the teardown errored: not a pass.
    result = _grade([*((i, P) for i in IDS), ("t.py::a", E)])
    assert result.failed_tests == ("t.py::a",)


def test_parametrized_instances_fold_into_their_test() -> None:
    expected = ("t.py::p", "t.py::q")
    ok = grade(expected=expected, reports=[("t.py::p[1]", P), ("t.py::p[2-x]", P), ("t.py::q", P)])
    assert ok.verdict is Verdict.PASS
    one_bad = grade(expected=expected, reports=[("t.py::p[1]", P), ("t.py::p[2]", F), ("t.py::q", P)])
    assert one_bad.failed_tests == ("t.py::p",)


def test_reports_for_unknown_tests_change_nothing() -> None:
    # Extra passing reports (or a look-alike prefix) cannot stand in for a frozen test.
    result = _grade(
        [("t.py::a", P), ("t.py::ab", P), ("t.py::b[x]y", P), ("other.py::c", P), ("t.py::c ", P)]
    )
    assert result.passed == 1


def test_tampering_beats_everything() -> None:
    result = _grade(
        [(i, P) for i in IDS], tampered_paths=["tests/b.py", "tests/a.py", "tests/a.py"], build_ok=False
    )
    assert (result.reward, result.verdict, result.passed) == (-1.0, Verdict.TAMPERED, 0)
    assert result.tampered_paths == ("tests/a.py", "tests/b.py")


def test_build_failure_beats_tests() -> None:
    result = _grade([(i, P) for i in IDS], build_ok=False)
    assert (result.reward, result.verdict, result.failed_tests) == (-0.5, Verdict.BUILD_FAILED, IDS)


def test_no_expected_tests_is_an_error_not_a_pass() -> None:
    result = grade(expected=(), reports=[("t.py::a", P)])
    assert result.verdict is Verdict.ERROR and not result.trainable
    assert error_grade("sandbox lost").detail == "sandbox lost"


def test_json_shape() -> None:
    assert _grade([(i, P) for i in IDS[:3]]).as_dict() == {
        "reward": pytest.approx(0.55),
        "verdict": "partial",
        "passed": 3,
        "total": 4,
        "failed_tests": ["t.py::d"],
        "tampered_paths": [],
        "tamper_signals": [],
    }


def test_a_tamper_signal_grades_tampered_whatever_passed() -> None:
    signal = "audit: gc.get_objects refused"
    result = grade(expected=IDS, reports=[(i, P) for i in IDS], tamper_signals=[signal, signal])
    assert (result.verdict, result.reward) == (Verdict.TAMPERED, -1.0)
    assert result.tamper_signals == (signal,) and result.tampered_paths == ()
    assert result.as_dict()["tamper_signals"] == [signal]


@given(
    outcomes=st.lists(st.sampled_from(list(Outcome)), min_size=1, max_size=8),
    drop=st.sets(st.integers(0, 7)),
    tampered=st.booleans(),
    build_ok=st.booleans(),
)
def test_rule_properties(outcomes: list[Outcome], drop: set[int], tampered: bool, build_ok: bool) -> None:
    expected = [f"t.py::t{i}" for i in range(len(outcomes))]
    reports = [(tid, o) for i, (tid, o) in enumerate(zip(expected, outcomes, strict=True)) if i not in drop]
    result = grade(
        expected=expected, reports=reports, tampered_paths=["x"] if tampered else [], build_ok=build_ok
    )
    passing = sum(1 for i, o in enumerate(outcomes) if o is P and i not in drop)
    assert -1.0 <= result.reward <= 1.0
    assert result.passed + len(result.failed_tests) == result.total == len(expected)
    if tampered:
        assert result.verdict is Verdict.TAMPERED
    elif not build_ok:
        assert result.verdict is Verdict.BUILD_FAILED
    elif passing == len(expected):
        assert result.verdict is Verdict.PASS and result.reward == 1.0
    else:
        assert result.passed == passing
        assert result.reward == pytest.approx(passing / len(expected) - 0.2)
        assert result.reward < 1.0 - 0.2 + 1e-9
