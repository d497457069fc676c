"""The reward recheck's comparison and bookkeeping (`ops.recheck`), with a stand-in grader and task source."""

from __future__ import annotations

from pathlib import Path

from actors.tasks.reward import Grade
from actors.tasks.reward import Verdict as GradeVerdict
from actors.tasks.spec import Task
from actors.tasks.verify import Verification
from actors.verifier.tasks import TaskUnavailable
from ops.recheck import FreshGrade, RecordedGrade, compare, final_snapshot, recheck, recorded_grades
from ops.runlog import LoggedRun
from tests.unit.ops.test_audit import healthy_run

TASK = Task(Path("/nowhere"), None, "v", ("tests/test_x.py::test_a",), ())  # type: ignore[arg-type]


class Tasks:
    def __init__(self, known: bool = True) -> None:
        self.known = known
        self.asked: list[tuple[str, str]] = []

    def get(self, task_id: str, task_version: str) -> Task:
        self.asked.append((task_id, task_version))
        if not self.known:
            raise TaskUnavailable("unknown_task", f"no {task_id}")
        return TASK


class Grader:
    """Grades every snapshot alike; records what it was asked to grade."""

    def __init__(
        self, reward: float = 1.0, verdict: GradeVerdict = GradeVerdict.PASS, passed: int = 3
    ) -> None:
        self.grade = Grade(reward, verdict, passed, 3, ())
        self.graded: list[tuple[str, str | None]] = []

    def __call__(self, task: Task, snapshot_id: str, image: str | None) -> Verification:
        self.graded.append((snapshot_id, image))
        return Verification(self.grade, 0.1)


def test_the_same_grade_everywhere_is_no_difference() -> None:
    recorded = [RecordedGrade("RewardAssigned", 1.0, "pass", 3, 3, "snap-a"), RecordedGrade("X", 1.0, "pass")]
    assert compare(recorded, FreshGrade(1.0, "pass", 3, 3, "snap-a")) == []


def test_each_differing_field_of_each_record_is_reported() -> None:
    recorded = [
        RecordedGrade("RewardAssigned", 1.0, "pass", 3, 3, "snap-b"),
        RecordedGrade("EpisodeCompleted", 0.4666666, "partial"),
    ]
    fresh = FreshGrade(0.4666666, "partial", 2, 3, "snap-a")
    found = {(d.source, d.field): (d.recorded, d.regraded) for d in compare(recorded, fresh)}
    assert found == {
        ("RewardAssigned", "reward"): (1.0, 0.4666666),
        ("RewardAssigned", "verdict"): ("pass", "partial"),
        ("RewardAssigned", "passed"): (3, 2),
        ("RewardAssigned", "snapshot_id"): ("snap-b", "snap-a"),
    }


def test_an_honest_run_rechecks_with_no_difference_grading_each_final_snapshot() -> None:
    run = LoggedRun.collect(healthy_run(3).records)
    grader = Grader()
    report = recheck(run, Tasks(), grader)
    assert report.ok and len(report.episodes) == 3 and report.to_json()["differences"] == 0
    assert sorted(grader.graded) == [(f"snap-ep-{i}-1-1", "trialog/task-hello:1") for i in range(3)]
    episode = run.episodes["ep-0"]
    assert final_snapshot(episode) == "snap-ep-0-1-1"
    assert [g.source for g in recorded_grades(episode)] == [
        "RewardAssigned", "EpisodeCompleted", "TrajectoryCompleted",
    ]  # fmt: skip


def test_a_reward_the_tests_do_not_give_is_found_in_every_record_that_states_it() -> None:
    run = LoggedRun.collect(healthy_run(2).records)
    report = recheck(run, Tasks(), Grader(-0.2, GradeVerdict.FAIL, passed=0))
    assert not report.ok and len(report.differing) == 2
    sources = {d.source for d in report.episodes[0].differences if d.field == "reward"}
    assert sources == {"RewardAssigned", "EpisodeCompleted", "TrajectoryCompleted"}
    assert "DIFFERS" in report.table() and report.to_json()["episodes_differing"] == 2


def test_an_episode_that_cannot_be_graded_again_is_an_error_not_a_pass() -> None:
    run = LoggedRun.collect(healthy_run(1).records)
    report = recheck(run, Tasks(known=False), Grader())
    assert not report.ok and report.errors[0].error.startswith("unknown_task")
    failing = recheck(run, Tasks(), Grader(0.0, GradeVerdict.ERROR, passed=0))
    assert not failing.ok and "grading failed" in failing.errors[0].error


def _recorded_as(run: LoggedRun, episode_id: str, **fields: object) -> None:
    """The episode's RewardAssigned as a verifier under some reward configuration would have written it."""
    import dataclasses

    from schemas.events import RewardAssigned

    events = run.episodes[episode_id].events
    for index, logged in enumerate(events):
        if isinstance(logged.event, RewardAssigned):
            events[index] = dataclasses.replace(logged, event=dataclasses.replace(logged.event, **fields))  # type: ignore[arg-type]


def test_each_component_is_measured_again_from_the_log_and_compared_by_name() -> None:
    from actors.tasks.reward_config import parse
    from schemas.versions import GradeVersions

    config = parse("[weights]\nefficiency = 0.2\n")
    run = LoggedRun.collect(healthy_run(2).records)
    honest = 1 - 3 / 16  # two commands and a submit of a 16-step budget
    versions = GradeVersions("v", "i", "t", config.version)
    for episode_id, efficiency in (("ep-0", honest), ("ep-1", 1.0)):  # ep-1 claims it took no step
        _recorded_as(
            run, episode_id, reward=1.0 + 0.2 * efficiency, outcome_reward=1.0,
            components=(("efficiency", efficiency),), versions=versions,
        )  # fmt: skip
    report = recheck(run, Tasks(), Grader(), reward=config)
    honest_check, forged = report.episodes
    assert honest_check.fresh is not None and dict(honest_check.fresh.components) == {"efficiency": honest}
    assert [d.field for d in honest_check.differences if d.source == "RewardAssigned"] == []
    found = {(d.source, d.field): (d.recorded, d.regraded) for d in forged.differences}
    assert found[("RewardAssigned", "components.efficiency")] == (1.0, honest)
    assert found[("RewardAssigned", "reward")][0] == 1.2
    # Rechecked under another configuration: the version says so, whatever the numbers.
    other = recheck(run, Tasks(), Grader())
    fields = {d.field for d in other.episodes[0].differences if d.source == "RewardAssigned"}
    assert "reward_config" in fields and "outcome_reward" not in fields
