"""`trialog audit RUN --recheck`: grade every completed episode's final workspace again and compare.

For each episode that completed, the final snapshot is the one the fold defines (the snapshot taken after
the last executed step; the task's initial snapshot when no step ran). It is graded again with the frozen
tests of exactly the task version the episode ran against (`ops.bundled_tasks`), in a fresh sandbox
(`actors.verifier.grading.SnapshotGrader`), and the fresh grade is compared with every place the run
recorded one: `RewardAssigned` (and the snapshot it says it graded), `EpisodeCompleted` and the
`TrajectoryCompleted` the learner reads. Any field that differs is a `Difference`; an episode that could
not be graded again (its task or snapshot unavailable, a sandbox failure) is an error, never a pass.

The reward is composed again under the reward configuration the recheck is given (`--reward-config`; the
brief's rule by default): the outcome's share from the fresh grade, and each component the RewardAssigned
recorded measured again (efficiency from the log's actions and step budget, the size of the change from the
regraded workspace, lint and types from its static checks when the run measured them), each compared by
name; a grade recorded under another configuration version is a difference of its own. Components measured
while the run ran (speed, memory, processes left running) are composed as recorded: a second run would
time them differently, so they are not compared.

The comparison is pure (`compare`); grading goes through the `Grader` and `TaskSource` protocols.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from actors.tasks.reward_config import DEFAULT as DEFAULT_REWARD
from actors.tasks.reward_config import MEASURED_AT_RUN, RewardConfig, compose, efficiency
from actors.tasks.spec import Task
from actors.verifier.grading import Grader
from actors.verifier.tasks import TaskSource, TaskUnavailable
from actors.verifier.worker import workspace_components
from ops.runlog import EpisodeLog, LoggedRun
from sandbox_agent.scratch import owned_temp_dir
from schemas.blobs import ObjectStore
from schemas.trajectories import TrajectoryCompleted

STATIC = frozenset({"lint", "types"})  # components only a grader with static checks measures
REWARD_TOLERANCE = 1e-6  # rewards are doubles computed by one rule; anything above noise is a difference


@dataclass(frozen=True)
class RecordedGrade:
    """A grade as one record of the run states it."""

    source: str  # RewardAssigned | EpisodeCompleted | TrajectoryCompleted
    reward: float
    verdict: str
    passed: int | None = None
    total: int | None = None
    snapshot_id: str | None = None  # the snapshot the record says was graded (RewardAssigned only)
    # RewardAssigned only (since its v4): the outcome's share, each component, the configuration version.
    outcome_reward: float | None = None
    components: tuple[tuple[str, float], ...] = ()
    reward_config: str | None = None


@dataclass(frozen=True)
class FreshGrade:
    reward: float
    verdict: str
    passed: int
    total: int
    snapshot_id: str
    detail: str = ""
    outcome_reward: float | None = None
    components: tuple[tuple[str, float], ...] = ()
    reward_config: str | None = None


@dataclass(frozen=True)
class Difference:
    source: str
    field: str
    recorded: Any
    regraded: Any

    def __str__(self) -> str:
        return f"{self.source}.{self.field}: recorded {self.recorded!r}, regraded {self.regraded!r}"


def recorded_grades(episode: EpisodeLog) -> list[RecordedGrade]:
    """Every grade the run recorded for `episode`."""
    grades: list[RecordedGrade] = []
    if (reward := episode.reward) is not None:
        grades.append(
            RecordedGrade(
                "RewardAssigned", reward.reward, reward.verdict.value, reward.passed, reward.total,
                reward.meta.snapshot_id, reward.outcome_reward, reward.components,
                reward.versions.reward_config if reward.versions is not None else None,
            )
        )  # fmt: skip
    if (completed := episode.completed) is not None:
        grades.append(RecordedGrade("EpisodeCompleted", completed.reward, completed.verdict.value))
    trajectory = episode.trajectory
    if isinstance(trajectory, TrajectoryCompleted):
        grades.append(
            RecordedGrade(
                "TrajectoryCompleted", trajectory.reward, trajectory.verdict.value, trajectory.passed,
                trajectory.total,
            )
        )  # fmt: skip
    return grades


def final_snapshot(episode: EpisodeLog) -> str | None:
    """The workspace an episode ended with: after its last executed step, else the task's initial tree."""
    executed = episode.executions
    if executed:
        return executed[-1].meta.snapshot_id
    started = episode.started
    return started.meta.snapshot_id if started is not None else None


def compare(recorded: Sequence[RecordedGrade], fresh: FreshGrade) -> list[Difference]:
    """Each field of each recorded grade that the fresh grade contradicts."""
    differences: list[Difference] = []
    for grade in recorded:
        if not _close(grade.reward, fresh.reward):
            differences.append(Difference(grade.source, "reward", grade.reward, fresh.reward))
        if grade.verdict != fresh.verdict:
            differences.append(Difference(grade.source, "verdict", grade.verdict, fresh.verdict))
        for name in ("passed", "total"):
            value = getattr(grade, name)
            if value is not None and value != getattr(fresh, name):
                differences.append(Difference(grade.source, name, value, getattr(fresh, name)))
        if grade.snapshot_id is not None and grade.snapshot_id != fresh.snapshot_id:
            differences.append(Difference(grade.source, "snapshot_id", grade.snapshot_id, fresh.snapshot_id))
        if grade.reward_config is not None and grade.reward_config != fresh.reward_config:
            differences.append(
                Difference(grade.source, "reward_config", grade.reward_config, fresh.reward_config)
            )
        if (
            grade.outcome_reward is not None
            and fresh.outcome_reward is not None
            and not _close(grade.outcome_reward, fresh.outcome_reward)
        ):
            differences.append(
                Difference(grade.source, "outcome_reward", grade.outcome_reward, fresh.outcome_reward)
            )
        measured = dict(fresh.components)
        for name, value in grade.components:
            if name in MEASURED_AT_RUN:
                continue  # taken as recorded (`run_time_components`): a second run times differently
            again = measured.get(name)
            if again is None or not _close(value, again):
                differences.append(Difference(grade.source, f"components.{name}", value, again))
    return differences


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=0.0, abs_tol=REWARD_TOLERANCE)


def run_time_components(episode: EpisodeLog) -> dict[str, float]:
    """The recorded components a recheck cannot measure again to the bit (timings, memory, processes at an
    instant): the composition uses them as recorded, and compares them with nothing."""
    reward = episode.reward
    if reward is None:
        return {}
    return {name: value for name, value in reward.components if name in MEASURED_AT_RUN}


def episode_components(episode: EpisodeLog) -> dict[str, float]:
    """The components measured again from the log: efficiency from the actions the episode took (each step
    once, whatever was redelivered) against its step budget."""
    started = episode.started
    if started is None or started.config.max_steps < 1:
        return {}
    budget = started.config.max_steps
    used = min(len({action.meta.step for action in episode.actions}), budget)
    return {"efficiency": efficiency(used, budget)}


@dataclass(frozen=True)
class EpisodeRecheck:
    episode: str
    task_id: str
    task_version: str
    recorded: tuple[RecordedGrade, ...]
    fresh: FreshGrade | None = None
    differences: tuple[Difference, ...] = ()
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "episode": self.episode,
            "task_id": self.task_id,
            "task_version": self.task_version,
            "recorded": [asdict(grade) for grade in self.recorded],
            "regraded": asdict(self.fresh) if self.fresh is not None else None,
            "differences": [asdict(difference) for difference in self.differences],
            "error": self.error,
        }


@dataclass(frozen=True)
class RecheckReport:
    episodes: tuple[EpisodeRecheck, ...] = field(default_factory=tuple)

    @property
    def differing(self) -> list[EpisodeRecheck]:
        return [episode for episode in self.episodes if episode.differences]

    @property
    def errors(self) -> list[EpisodeRecheck]:
        return [episode for episode in self.episodes if episode.error]

    @property
    def ok(self) -> bool:
        return not self.differing and not self.errors

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "rechecked": len(self.episodes),
            "differences": sum(len(episode.differences) for episode in self.episodes),
            "episodes_differing": len(self.differing),
            "errors": len(self.errors),
            "episodes": [
                episode.to_json() for episode in self.episodes if episode.differences or episode.error
            ],
        }

    def table(self) -> str:
        lines = [
            f"rechecked {len(self.episodes)} completed episodes in fresh sandboxes: "
            f"{len(self.differing)} with a different reward, {len(self.errors)} not gradable"
        ]
        for episode in self.episodes:
            for difference in episode.differences:
                lines.append(f"  {episode.episode}  DIFFERS  {difference}")
            if episode.error:
                lines.append(f"  {episode.episode}  ERROR  {episode.error}")
        return "\n".join(lines)


def completed_episodes(run: LoggedRun) -> list[EpisodeLog]:
    return [run.episodes[e] for e in sorted(run.episodes) if run.episodes[e].completed is not None]


def recheck_episode(
    episode: EpisodeLog, tasks: TaskSource, grader: Grader, reward: RewardConfig = DEFAULT_REWARD
) -> EpisodeRecheck:
    task_id, task_version = episode.task or ("", "")
    recorded = tuple(recorded_grades(episode))
    base = EpisodeRecheck(episode.episode_id, task_id, task_version, recorded)
    snapshot = final_snapshot(episode)
    started = episode.started
    if snapshot is None or started is None:
        return _with_error(base, "the log holds no EpisodeStarted or no final snapshot to grade")
    try:
        task: Task = tasks.get(task_id, task_version)
    except TaskUnavailable as exc:
        return _with_error(base, f"{exc.reason}: {exc.detail}")
    try:
        verification = grader(task, snapshot, started.image or None)
        grade = verification.grade
    except Exception as exc:  # an infrastructure failure is reported per episode, the recheck goes on
        return _with_error(base, f"grading failed: {type(exc).__name__}: {exc}")
    if not grade.trainable:
        return _with_error(base, f"grading failed: {grade.detail}")
    try:
        components = {
            **run_time_components(episode), **episode_components(episode),
            **workspace_components(verification.resources),
        }  # fmt: skip
        composed = compose(reward, grade.verdict, grade.passed, grade.total, components)
    except ValueError as exc:
        return _with_error(base, f"reward_config: {exc}")
    fresh = FreshGrade(
        composed.reward, grade.verdict.value, grade.passed, grade.total, snapshot, grade.detail,
        composed.outcome, tuple(sorted(composed.components.items())), reward.version,
    )  # fmt: skip
    return EpisodeRecheck(
        episode.episode_id, task_id, task_version, recorded, fresh, tuple(compare(recorded, fresh))
    )


def _with_error(base: EpisodeRecheck, error: str) -> EpisodeRecheck:
    return EpisodeRecheck(base.episode, base.task_id, base.task_version, base.recorded, error=error)


def recheck(
    run: LoggedRun,
    tasks: TaskSource,
    grader: Grader,
    *,
    on_done: Callable[[EpisodeRecheck], None] | None = None,
    reward: RewardConfig = DEFAULT_REWARD,
) -> RecheckReport:
    results = []
    for episode in completed_episodes(run):
        result = recheck_episode(episode, tasks, grader, reward)
        results.append(result)
        if on_done is not None:
            on_done(result)
    return RecheckReport(tuple(results))


def recheck_in_sandboxes(
    run: LoggedRun,
    objects: ObjectStore,
    *,
    fallback: TaskSource | None = None,
    quiet: bool = False,
    reward: RewardConfig = DEFAULT_REWARD,
) -> RecheckReport:
    """`recheck` with the run's published tasks and fresh Docker sandboxes on the local stack's engine,
    reading `objects` and writing nothing to it; a progress bar on a terminal unless `quiet`."""
    from actors.verifier.grading import SnapshotGrader
    from ops.audit_sandboxes import OverlayStore, audit_backend, default_image
    from ops.bundled_tasks import BundledTasks
    from ops.progress import ProgressBar

    store = OverlayStore(objects)
    todo = len(completed_episodes(run))
    with (
        owned_temp_dir(prefix="trialog-recheck-") as scratch,
        audit_backend(store) as backend,
        ProgressBar(todo, "recheck", quiet=quiet) as bar,
    ):
        tasks = BundledTasks(run.tasks, objects, Path(scratch), fallback)
        # The static checkers run only where the run's grades recorded what they measure.
        static = any(
            name in STATIC for episode in run.episodes.values() if episode.reward is not None
            for name, _ in episode.reward.components
        )  # fmt: skip
        grader = SnapshotGrader(backend, store, default_image(), static=static)

        def done(result: EpisodeRecheck) -> None:
            bar.advance(f"{result.episode}: {'differs' if result.differences else result.error or 'same'}")

        return recheck(run, tasks, grader, on_done=done, reward=reward)
