from __future__ import annotations

import dataclasses

from actors.tasks.reward import Verdict
from actors.tasks.validate import Admission, RunOutcome, id_mismatch, judge

FAIL = (Verdict.FAIL, ("tests/test_a.py::test_x",))
PASS = (Verdict.PASS, ())


def run(
    repo: tuple[Verdict, tuple[str, ...]], gold: tuple[Verdict, tuple[str, ...]], timed_out: bool = False
) -> RunOutcome:
    return RunOutcome(repo, gold, timed_out, 1.0)


def test_a_solvable_stable_task_is_valid() -> None:
    assert judge([run(FAIL, PASS)] * 3) == (Admission.VALID, ())


def test_any_timeout_wins() -> None:
    verdict, reasons = judge([run(FAIL, PASS), run(FAIL, PASS, timed_out=True)])
    assert verdict is Admission.TIMEOUT
    assert reasons == ("1 of 2 runs timed out",)


def test_differing_outcomes_are_flaky() -> None:
    assert judge([run(FAIL, PASS), run(FAIL, FAIL)])[0] is Admission.FLAKY
    other_failure = (Verdict.FAIL, ("tests/test_a.py::test_y",))
    assert judge([run(FAIL, PASS), run(other_failure, PASS)])[0] is Admission.FLAKY


def test_a_repo_that_already_passes_is_rejected() -> None:
    assert judge([run(PASS, PASS)])[0] is Admission.ALREADY_PASSING


def test_a_solution_that_does_not_pass_is_rejected() -> None:
    verdict, reasons = judge([run(FAIL, FAIL)] * 2)
    assert verdict is Admission.GOLD_FAILS
    assert "tests/test_a.py::test_x" in reasons[0]


def test_a_gold_solution_that_raises_a_tamper_signal_is_refused() -> None:
    tampered = dataclasses.replace(
        run(FAIL, PASS), gold_signals=("a value of type mock._ANY compares equal",)
    )
    verdict, reasons = judge([run(FAIL, PASS), tampered])
    assert verdict is Admission.GOLD_TAMPERS and "mock._ANY" in reasons[0]


def test_a_gold_run_with_other_tests_than_the_collection_is_refused() -> None:
    drifted = dataclasses.replace(run(FAIL, PASS), id_mismatch=("t.py::test_p[3]",))
    verdict, reasons = judge([drifted] * 2)
    assert verdict is Admission.UNSTABLE_IDS and "t.py::test_p[3]" in reasons[0]


def test_id_mismatch_folds_instances_and_ignores_collection_errors() -> None:
    assert id_mismatch(("t.py::a[1]", "t.py::a[2]"), ("t.py::a[1]", "t.py::a[2]")) == ()
    assert id_mismatch(("t.py::a",), ("t.py::a[1]", "t.py::a[2]", "t.py")) == ()
    assert id_mismatch(("t.py::a[1]", "t.py::a[2]"), ("t.py::a[1]", "t.py::a[3]")) == (
        "t.py::a[3]",
        "t.py::a[2]",
    )
