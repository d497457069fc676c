from __future__ import annotations

from pathlib import Path

import pytest

from actors.tasks.hostrun import run_tests
from actors.tasks.reward import Verdict, grade
from actors.tasks.spec import Task, load_tasks, task_version
from actors.tasks.toy import import_toy

from .helpers import git_apply
from .test_cli import run


def _verdict(task: Task, tree: Path) -> Verdict:
    return grade(expected=task.test_ids, reports=run_tests(task, tree).reports).verdict


def test_the_cli_splits_train_and_heldout(tmp_path: Path) -> None:
    assert run("tasks", "import", "toy", str(tmp_path), "--count", "8", "--holdout-every", "4") == 0
    train, heldout = load_tasks([tmp_path / "train"]), load_tasks([tmp_path / "heldout"])
    assert [t.id for t in heldout] == ["toy-003", "toy-007"]
    assert [t.id for t in train] == ["toy-000", "toy-001", "toy-002", "toy-004", "toy-005", "toy-006"]


def test_each_task_fails_as_given_and_passes_with_its_patch(tmp_path: Path) -> None:
    import_toy(tmp_path / "set", count=6)
    for task in load_tasks([tmp_path / "set" / "train"]):
        assert "returns the number" in task.spec.instruction
        assert _verdict(task, task.copy_repo(tmp_path / f"{task.id}-given")) == Verdict.FAIL
        patched = task.copy_repo(tmp_path / f"{task.id}-patched")
        assert git_apply(task.patch_path, patched).returncode == 0
        assert _verdict(task, patched) == Verdict.PASS


def test_imports_are_deterministic(tmp_path: Path) -> None:
    first = import_toy(tmp_path / "a", count=5, holdout_every=2)
    second = import_toy(tmp_path / "b", count=5, holdout_every=2)
    assert [task_version(p) for p in first.train + first.heldout] == [
        task_version(p) for p in second.train + second.heldout
    ]


@pytest.mark.parametrize(("count", "every"), [(0, 4), (3, 1), (3, -2)])
def test_bad_arguments_are_refused(tmp_path: Path, count: int, every: int) -> None:
    with pytest.raises(ValueError, match="must be"):
        import_toy(tmp_path, count=count, holdout_every=every)
    assert (
        run("tasks", "import", "toy", str(tmp_path), "--count", str(count), "--holdout-every", str(every))
        == 2
    )
