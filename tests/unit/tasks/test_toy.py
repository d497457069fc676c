from __future__ import annotations

from pathlib import Path

import pytest

from actors.rollout.markdown_actions import only_python_file
from actors.tasks.hostrun import run_tests
from actors.tasks.reward import Verdict, grade
from actors.tasks.spec import Task, load_tasks, task_version
from actors.tasks.toy import ToyTask, Variant, import_toy, task_files

from .helpers import git_apply
from .test_cli import run


def _verdict(task: Task, tree: Path) -> Verdict:
    return grade(expected=task.test_ids, reports=run_tests(task, tree).reports).verdict


def test_the_cli_splits_train_and_heldout(tmp_path: Path) -> None:
    assert run("tasks", "import", "toy", "--out", str(tmp_path), "--count", "8", "--holdout-every", "4") == 0
    train, heldout = load_tasks([tmp_path / "train"]), load_tasks([tmp_path / "heldout"])
    assert [t.id for t in heldout] == ["toy-003", "toy-007"]
    assert [t.id for t in train] == ["toy-000", "toy-001", "toy-002", "toy-004", "toy-005", "toy-006"]


@pytest.mark.parametrize("variant", list(Variant))
def test_each_task_fails_as_given_and_passes_with_its_patch(tmp_path: Path, variant: Variant) -> None:
    import_toy(tmp_path / "set", count=6, variant=variant)
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
    argv = ["tasks", "import", "toy", "--out", str(tmp_path), "--count", str(count)]
    with pytest.raises(SystemExit) as exited:  # refused by the parser, before anything is written
        run(*argv, "--holdout-every", str(every))
    assert exited.value.code == 2


def test_the_shown_variant_differs_only_in_its_instruction_which_shows_the_file_as_given() -> None:
    blind, shown = task_files(ToyTask(4)), task_files(ToyTask(4, Variant.SHOWN))
    # The same repo, solution and frozen test (whose docstring names its task).
    assert {k: v for k, v in blind.items() if k != "task.toml"} == {
        k: v.replace("toys-004", "toy-004") for k, v in shown.items() if k != "task.toml"
    }
    assert 'id = "toy-004"' in blind["task.toml"] and 'id = "toys-004"' in shown["task.toml"]
    assert "def count():" not in blind["task.toml"]
    assert "`count.py` is:" in shown["task.toml"] and "returns the number 31." in shown["task.toml"]


def test_the_shown_instruction_names_one_python_file_so_an_unnamed_block_writes_it(tmp_path: Path) -> None:
    import_toy(tmp_path, count=3, variant=Variant.SHOWN)
    for task in load_tasks([tmp_path / "train"]):
        module = task.spec.instruction.split("`")[1]
        assert only_python_file(task.spec.instruction) == module
        given = (task.repo_dir / module).read_text()
        assert f"```python\n{given}```\n" in task.spec.instruction


def test_the_cli_writes_the_variant_it_is_asked_for(tmp_path: Path) -> None:
    assert run("tasks", "import", "toy", "--out", str(tmp_path), "--count", "4", "--variant", "shown") == 0
    assert [t.id for t in load_tasks([tmp_path / "train"])] == ["toys-000", "toys-001", "toys-002"]
    assert [t.id for t in load_tasks([tmp_path / "heldout"])] == ["toys-003"]
