from __future__ import annotations

from actors.tasks.reward import Verdict
from actors.tasks.validate import Admission, RunOutcome, judge

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
