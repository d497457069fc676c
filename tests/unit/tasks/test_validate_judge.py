from __future__ import annotations

import dataclasses
from pathlib import Path

from actors.tasks.reward import Grade, Verdict
from actors.tasks.spec import Task
from actors.tasks.validate import Admission, RunOutcome, id_mismatch, judge, validate_all
from actors.tasks.verify import Verification

from .helpers import REPO, make_task

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


def test_a_task_whose_validation_raises_is_recorded_and_the_others_go_on(tmp_path: Path) -> None:
    good, bad = make_task(tmp_path / "good", task_id="good"), make_task(tmp_path / "bad", task_id="bad")

    def verifier(task: Task, workspace: Path) -> Verification:
        if task.id == "bad":
            raise RuntimeError("the sandbox would not start")
        solved = (workspace / "calc.py").read_text() != REPO["calc.py"]
        failed = () if solved else task.test_ids
        grade = Grade(1.0 if solved else 0.0, Verdict.PASS if solved else Verdict.FAIL, 0, 1, failed)
        return Verification(grade, 0.1, expected=task.test_ids, reported=task.test_ids, complete=True)

    seen: list[str] = []
    results = validate_all([bad, good], verifier, runs=2, jobs=2, on_done=lambda r: seen.append(r.path))
    assert [r.verdict for r in results] == [Admission.ERROR, Admission.VALID]
    assert results[0].reasons == ("validation raised RuntimeError: the sandbox would not start",)
    assert seen == [str(bad), str(good)]
