"""run.control records and graded trajectories, for the tests of the guard's readers (the control fold, the
learner, the scheduler, the CLI)."""

from __future__ import annotations

import dataclasses
import itertools

from learner import testing
from schemas.common import Producer, RecordMeta
from schemas.run_control import (
    GraderCleared,
    GuardSettings,
    PinnedTask,
    RunPaused,
    RunPinned,
    RunResumed,
    TrajectoriesQuarantined,
    VersionChanged,
)
from schemas.trajectories import TrajectoryCompleted
from schemas.versions import GradeVersions

RUN = "run-test"
GUARD = Producer("guard", "guard-0")
VERIFIER = "a1" * 32
IMAGE = "sha256:" + "b2" * 32
TESTS = "c3" * 32
REWARD = "d4" * 32
VERSIONS = GradeVersions(VERIFIER, IMAGE, TESTS, REWARD)
GRADED_AT = 1_700_000_100_000_000
_ids = itertools.count()


def meta(at_us: int = GRADED_AT) -> RecordMeta:
    return RecordMeta(f"ctl-{next(_ids)}", at_us, GUARD)


def pinned(*, hold: bool = False, run: str = RUN) -> RunPinned:
    guard = GuardSettings(1.0, 0.05, True, hold)
    return RunPinned(meta(), run, VERIFIER, IMAGE, REWARD, (PinnedTask("task-1", "v1", TESTS),), guard)


def paused(reason: str = "canary graded wrongly", run: str = RUN) -> RunPaused:
    return RunPaused(meta(), run, reason, "alert-1")


def resumed(reason: str = "fixed", run: str = RUN) -> RunResumed:
    return RunResumed(meta(), run, reason)


def rule(
    component: str,
    value: str = "",
    *,
    rule_id: str = "rule-1",
    since_us: int = 0,
    until_us: int | None = None,
    episodes: tuple[str, ...] = (),
    run: str = RUN,
) -> TrajectoriesQuarantined:
    return TrajectoriesQuarantined(
        meta(), run, rule_id, component, value, since_us, until_us, "a faulty grader", episodes
    )


def cleared(up_to_us: int, *, verifier: str = VERIFIER, image: str = IMAGE, run: str = RUN) -> GraderCleared:
    return GraderCleared(meta(), run, verifier, image, up_to_us)


def changed(component: str = "image", seen: str = "sha256:" + "ee" * 32, run: str = RUN) -> VersionChanged:
    return VersionChanged(meta(), run, component, IMAGE, seen, None, "ep-9", Producer("verifier", "v0"))


def graded(
    trajectory: TrajectoryCompleted,
    versions: GradeVersions | None = VERSIONS,
    at_us: int = GRADED_AT,
) -> TrajectoryCompleted:
    """`trajectory` as graded by `versions` at `at_us` (what the owner copies from the RewardAssigned)."""
    return dataclasses.replace(trajectory, grade_versions=versions, graded_at_us=at_us)


def graded_group(
    group_id: str, rewards: list[float], *, versions: GradeVersions | None = VERSIONS, at_us: int = GRADED_AT
) -> list[TrajectoryCompleted]:
    return [graded(t, versions, at_us) for t in testing.group(group_id, rewards)]
