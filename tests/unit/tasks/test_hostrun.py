"""The harness report (plugin + parser) and host runs, end to end with real pytest subprocesses."""

from __future__ import annotations

from pathlib import Path

from actors.guard.canaries import BY_NAME
from actors.tasks.hostrun import grade_on_host, run_tests
from actors.tasks.reward import Outcome, Verdict, grade
from actors.tasks.spec import Task, load_task

from .helpers import TASK_TOML, TWO_TEST_MODULES, make_task

MIXED = """
import pytest

from calc import add


@pytest.fixture
def broken():
    raise RuntimeError("setup fails")


@pytest.fixture
def messy():
    yield
    raise RuntimeError("teardown fails")


def test_pass():
    assert add(1, 1) == 2


def test_fail():
    assert add(1, 1) == 3


def test_setup_error(broken):
    pass


def test_teardown_error(messy):
    pass


def test_skip():
    pytest.skip("not today")


@pytest.mark.xfail(reason="expected")
def test_xfail():
    assert False


@pytest.mark.xfail(reason="unexpectedly passes")
def test_xpass():
    pass


@pytest.mark.parametrize("n", [1, 2])
def test_param(n):
    assert add(n, 0) == n


def test_exit():
    raise SystemExit(0)
"""


def _task(tmp_path: Path, tests: dict[str, str], toml: str | None = None) -> Task:
    return load_task(make_task(tmp_path / "task", tests=tests, toml=toml))


def _solved(task: Task, tmp_path: Path) -> Path:
    return task.copy_repo(tmp_path / "ws", solved=True)


def test_every_outcome_is_reported(tmp_path: Path) -> None:
    task = _task(
        tmp_path,
        {"test_mixed.py": MIXED, "test_broken.py": "import does_not_exist\n\ndef test_x():\n    pass\n"},
    )
    run = run_tests(task, _solved(task, tmp_path))
    outcomes: dict[str, set[Outcome]] = {}
    for test_id, outcome in run.reports:
        outcomes.setdefault(test_id.removeprefix("tests/test_mixed.py::"), set()).add(outcome)
    assert outcomes == {
        "test_pass": {Outcome.PASSED},
        "test_fail": {Outcome.FAILED},
        "test_setup_error": {Outcome.ERROR},
        "test_teardown_error": {Outcome.PASSED, Outcome.ERROR},
        "test_skip": {Outcome.SKIPPED},
        "test_xfail": {Outcome.SKIPPED},
        "test_xpass": {Outcome.SKIPPED},
        "test_param[1]": {Outcome.PASSED},
        "test_param[2]": {Outcome.PASSED},
        "test_exit": {Outcome.FAILED},
        "tests/test_broken.py": {Outcome.ERROR},  # the collection error, reported against the file
    }
    result = grade(expected=task.test_ids, reports=run.reports)
    assert result.passed == 2  # test_pass and test_param
    assert "tests/test_broken.py::test_x" in result.failed_tests
    assert result.total == len(task.test_ids) == 10  # the parametrized test counts once


def test_exiting_before_the_tests_run_earns_nothing(tmp_path: Path) -> None:
    # A known hack: end the process with status 0 before any test runs. No report means no pass.
    task = _task(
        tmp_path, {"test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"}
    )
    workspace = _solved(task, tmp_path)
    (workspace / "calc.py").write_text("import os\n\nos._exit(0)\n")
    run = run_tests(task, workspace)
    assert run.exit_code == 0 and run.reports == ()
    assert grade(expected=task.test_ids, reports=run.reports).verdict is Verdict.FAIL


def test_timeout_kills_the_run(tmp_path: Path) -> None:
    slow = "import time\n\n\ndef test_slow():\n    time.sleep(30)\n"
    task = _task(tmp_path, {"test_slow.py": slow})
    run = run_tests(task, _solved(task, tmp_path), timeout_s=1)
    assert run.exit_code is None and run.duration_s < 10
    assert grade(expected=task.test_ids, reports=run.reports).verdict is Verdict.FAIL


def test_grade_on_host(tmp_path: Path) -> None:
    task = load_task(make_task(tmp_path / "task"))
    solved = task.copy_repo(tmp_path / "solved", solved=True)
    result, run = grade_on_host(task, solved)
    assert result.verdict is Verdict.PASS and run is not None
    unsolved, _ = grade_on_host(task, task.copy_repo(tmp_path / "unsolved"))
    assert unsolved.verdict is Verdict.PARTIAL and unsolved.failed_tests == ("tests/test_calc.py::test_add",)
    (solved / "tests" / "test_visible.py").write_text("def test_nothing():\n    assert True\n")
    tampered, run = grade_on_host(task, solved)
    assert tampered.verdict is Verdict.TAMPERED and run is None
    assert tampered.tampered_paths == ("tests/test_visible.py",)


def test_build_failure(tmp_path: Path) -> None:
    toml = TASK_TOML.format(id="b", protected="[]").replace(
        "timeout_s = 20", 'timeout_s = 20\nbuild_command = "test -f BUILD_OK"'
    )
    task = _task(tmp_path, {"test_calc.py": "def test_x():\n    pass\n"}, toml=toml)
    workspace = _solved(task, tmp_path)
    assert grade_on_host(task, workspace)[0].verdict is Verdict.BUILD_FAILED
    (workspace / "BUILD_OK").write_text("")
    assert grade_on_host(task, workspace)[0].verdict is Verdict.PASS


def test_test_modules_not_made_by_the_loader_are_signals_on_the_host(tmp_path: Path) -> None:
    # The sandbox grades them too (tests/integration/tasks/test_verify_module_swap.py); this is the host's
    # pytest, so the check does not depend on one pytest version's collection.
    task = load_task(make_task(tmp_path / "task", task_id="two-modules", tests=TWO_TEST_MODULES))
    hacks = {"hack:test-module-swap": "is not from the module", "hack:test-module-builtins": "builtins"}
    for case, evidence in sorted({**hacks, "reference": ""}.items()):
        workspace = tmp_path / case.replace(":", "-")
        BY_NAME[case].build(task, workspace)
        run = run_tests(task, workspace)
        graded = grade(expected=task.test_ids, reports=run.reports, tamper_signals=run.harness.signals)
        if case == "reference":
            assert (graded.verdict, graded.tamper_signals) == (Verdict.PASS, ()), run.output
        else:
            assert graded.verdict is Verdict.TAMPERED, run.output
            assert any(evidence in signal for signal in graded.tamper_signals), graded.tamper_signals
