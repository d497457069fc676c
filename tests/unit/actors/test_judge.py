"""The model judge (`actors.verifier.judge`) over a scripted backend, and its place in a grade."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from actors.rollout.generation import Generation
from actors.tasks.change import change_text, diff_trees
from actors.tasks.tamper import Entry
from actors.verifier.judge import NO_CHANGE, ModelJudge, is_yes
from actors.verifier.worker import VerifierWorker
from schemas.blobs import MemoryObjectStore
from tests.unit.actors.requests import SNAPSHOT, fixed_origin, request_meta, verify_request
from tests.unit.actors.test_verifier import FakeGrader, _passing

YES, NO = 1, 2


class Answers:
    """Answers yes to the seeds in `yes`, no to the others; keeps the prompts it was given."""

    def __init__(self, yes: set[int]) -> None:
        self.yes = yes
        self.prompts: list[Sequence[int]] = []

    def generate(
        self, prompts: Sequence[Sequence[int]], *, seeds: Sequence[int] | None = None, **_: Any
    ) -> list[Generation]:
        self.prompts += prompts
        assert seeds is not None
        return [Generation((YES if s in self.yes else NO,), (-0.1,), "stop") for s in seeds]


def _judge(answers: Answers, seen: list[str]) -> ModelJudge:
    def encode(chat: Sequence[dict[str, str]]) -> list[int]:
        seen.append(chat[0]["content"])
        return [7, 8]

    return ModelJudge(answers, encode, lambda ids: " Yes." if list(ids) == [YES] else "no", samples=4)


def test_the_score_is_the_share_of_yes_over_fixed_seeds_and_the_prompt_shows_the_change() -> None:
    seen: list[str] = []
    judge = _judge(Answers({0, 2, 3}), seen)
    assert judge("Fix add().", "--- a/x.py\n+++ b/x.py\n") == 0.75
    assert judge("Fix add().", "--- a/x.py\n+++ b/x.py\n") == 0.75  # the same change, the same score
    assert "Fix add()." in seen[0] and "--- a/x.py" in seen[0]
    judge("Fix add().", "")
    assert NO_CHANGE in seen[-1]
    assert [is_yes(t) for t in ("yes", " YES.", "**Yes**", "no", "yesterday?")] == [
        True,
        True,
        True,
        False,
        True,
    ]


def test_the_judge_is_a_recorded_component_and_a_failing_judge_costs_no_grade(tmp_path: Path) -> None:
    import shutil

    from actors.verifier.tasks import FolderTasks
    from tests.unit.actors.test_verifier import EXAMPLE

    shutil.copytree(EXAMPLE, tmp_path / "tasks" / EXAMPLE.name)
    tasks = FolderTasks([tmp_path / "tasks"])
    task = tasks.get(EXAMPLE.name, tasks.tasks[0].version)
    graded = dataclasses.replace(_passing(task), diff="--- a/counting.py\n")
    seen: list[str] = []
    worker = VerifierWorker(
        tasks,
        FakeGrader({SNAPSHOT: graded}),
        MemoryObjectStore(),
        fixed_origin(),
        judge=_judge(Answers({1}), seen),
    )
    request = verify_request(request_meta(task_id=task.id, task_version=task.version, snapshot_id=SNAPSHOT))
    answer = worker.handle(request)
    assert dict(answer.components)["judge"] == 0.25 and answer.reward == 1.0  # weighed 0 by default
    assert task.spec.instruction in seen[0] and "--- a/counting.py" in seen[0]

    def broken(instruction: str, diff: str) -> float:
        raise RuntimeError("out of memory")

    worker.judge = broken
    again = worker.handle_canary(request)  # afresh; a canary is never judged anyway
    judged = worker.handle(dataclasses.replace(request, meta=dataclasses.replace(request.meta, step=3)))
    assert "judge" not in dict(judged.components) and judged.reward == 1.0 and again.reward == 1.0


def test_the_diff_a_judge_reads_is_bounded_and_names_what_it_cannot_show() -> None:
    before = {"a.py": Entry.file("x = 1\n"), "bin": Entry.file(b"\xff\xfe")}
    after = {"a.py": Entry.file("x = 2\n"), "bin": Entry.file(b"\xff\x00"), "new.py": Entry.file("y = 3\n")}
    text = change_text(before, after)
    assert "-x = 1" in text and "+x = 2" in text and "+y = 3" in text
    assert "--- a/bin" in text and "not shown" in text
    big = {f"f{i}.py": Entry.file("line\n" * 200) for i in range(50)}
    cut = change_text({}, big, limit=500)
    assert len(cut) < 600 and cut.endswith("[... diff cut ...]\n")
    assert diff_trees({}, big).files == 50


def test_a_judge_model_folder_that_is_not_there_is_refused_with_the_fix(tmp_path: Path) -> None:
    import pytest

    from ops.cli.workers.verifier import _judge
    from streams.errors import StackError

    with pytest.raises(StackError, match="no model folder"):
        _judge(tmp_path / "absent")


def test_the_process_grades_grader_measures_what_the_episodes_grader_does() -> None:
    """They share the grade cache: an entry a process grade made may answer a final grade."""
    from ops.cli.workers.verifier import graders

    for static in (False, True):
        for diff in (False, True):
            episodes, progress = graders(None, MemoryObjectStore(), static=static, diff=diff)  # type: ignore[arg-type]
            assert (episodes.static, episodes.diff, episodes.background) == (static, diff, False)
            assert (progress.static, progress.diff, progress.background) == (static, diff, True)
