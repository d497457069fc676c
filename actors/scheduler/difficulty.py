"""Task difficulty, pure: a pass rate's bucket, the scheduler's weights over buckets, and the tally of a
measuring run's trajectories into pass rates.

Buckets (pass rate p = passes / samples with the measured policy version):

    never      p == 0            the policy never solves it: no learning signal (retired)
    hard       0 < p <= 1/3
    medium     1/3 < p <= 2/3
    easy       2/3 < p < 1
    always     p == 1            the policy always solves it: no learning signal (retired)
    unmeasured no measurement of this task version

Why these edges: a group of G episodes on one task teaches something only when its rewards differ
(group-relative advantages); a task the policy always or never solves gives every member the same reward.
Thirds split the rest evenly, so that a weight per bucket says how much of the run goes to tasks the
policy mostly fails, sometimes solves, or mostly solves. A retired task is drawn only on retest groups
(`Target.retest_every`), because the policy changes while it trains.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from enum import StrEnum

from actors.tasks.reward import PASS_REWARD
from schemas.trajectories import TrajectoryCompleted, TrajectoryFailed

HARD_MAX = 1 / 3  # the highest pass rate that is still hard
MEDIUM_MAX = 2 / 3  # the highest pass rate that is still medium


class Bucket(StrEnum):
    NEVER = "never"
    HARD = "hard"
    MEDIUM = "medium"
    EASY = "easy"
    ALWAYS = "always"
    UNMEASURED = "unmeasured"


RETIRED: frozenset[Bucket] = frozenset({Bucket.NEVER, Bucket.ALWAYS})
"""Buckets whose tasks are drawn only on retest groups: every episode of a group would get the same reward."""


def bucket_of(pass_rate: float) -> Bucket:
    """The bucket of a measured pass rate (0 <= pass_rate <= 1)."""
    if not 0.0 <= pass_rate <= 1.0:
        raise ValueError(f"a pass rate is between 0 and 1, not {pass_rate}")
    if pass_rate == 0.0:
        return Bucket.NEVER
    if pass_rate == 1.0:
        return Bucket.ALWAYS
    if pass_rate <= HARD_MAX:
        return Bucket.HARD
    if pass_rate <= MEDIUM_MAX:
        return Bucket.MEDIUM
    return Bucket.EASY


@dataclass(frozen=True, slots=True)
class BucketWeights:
    """How often each drawable bucket is drawn, relative to the others (0: never, unless nothing else is
    left). The default favours the tasks the policy sometimes solves, whose groups have mixed rewards."""

    hard: float = 2.0
    medium: float = 2.0
    easy: float = 1.0
    unmeasured: float = 1.0

    def __post_init__(self) -> None:
        for name, value in self.items():
            if not value >= 0.0 or value == float("inf"):  # also refuses NaN
                raise ValueError(f"the weight of {name} must be a finite number >= 0, not {value}")

    def items(self) -> list[tuple[str, float]]:
        return [(f.name, float(getattr(self, f.name))) for f in fields(self)]

    def of(self, bucket: Bucket) -> float:
        """The weight of a drawable bucket (a retired one has none: it is drawn on retests only)."""
        if bucket in RETIRED:
            raise ValueError(f"{bucket} is retired: it is drawn on retest groups only")
        return float(getattr(self, bucket.value))

    def text(self) -> str:
        """`hard=2,medium=2,easy=1,unmeasured=1`: what `parse` reads."""
        return ",".join(f"{name}={value:g}" for name, value in self.items())

    @classmethod
    def parse(cls, text: str) -> BucketWeights:
        """`hard=2,easy=0.5`: the buckets named get these weights, the others keep their defaults."""
        known = [f.name for f in fields(cls)]
        given: dict[str, float] = {}
        for part in (p.strip() for p in text.split(",")):
            name, sep, value = part.partition("=")
            name = name.strip()
            if not sep:
                raise ValueError(f"{part!r} is not BUCKET=WEIGHT (e.g. hard=2,medium=1,easy=0.5)")
            if name in (Bucket.NEVER, Bucket.ALWAYS):
                raise ValueError(f"{name} tasks are retired, not weighted: they come back on --retest-every")
            if name not in known:
                raise ValueError(f"unknown bucket {name!r} (known: {', '.join(known)})")
            if name in given:
                raise ValueError(f"bucket {name} is given twice")
            try:
                given[name] = float(value)
            except ValueError:
                raise ValueError(f"the weight of {name} is not a number: {value!r}") from None
        return cls(**given)


@dataclass(frozen=True, slots=True)
class Tally:
    """What a measuring run's trajectories say about one task version."""

    task_id: str
    task_version: str
    samples: int = 0  # graded episodes
    passes: int = 0  # graded with the pass reward
    unfinished: int = 0  # ended without a grade: not samples

    @property
    def pass_rate(self) -> float:
        return self.passes / self.samples if self.samples else 0.0

    @property
    def bucket(self) -> Bucket:
        """The bucket of the pass rate; unmeasured when no episode was graded."""
        return bucket_of(self.pass_rate) if self.samples else Bucket.UNMEASURED


def tally(
    trajectories: Iterable[TrajectoryCompleted | TrajectoryFailed], run_id: str
) -> Mapping[tuple[str, str], Tally]:
    """Each task version's samples and passes among `run_id`'s trajectories (each episode once)."""
    seen: set[str] = set()
    counts: dict[tuple[str, str], Tally] = {}
    for trajectory in trajectories:
        meta = trajectory.meta
        if meta.run_id != run_id or meta.episode_id in seen:
            continue
        seen.add(meta.episode_id)
        key = (meta.task_id, meta.task_version)
        was = counts.get(key, Tally(*key))
        if isinstance(trajectory, TrajectoryCompleted):
            passed = int(trajectory.reward == PASS_REWARD)
            counts[key] = Tally(*key, was.samples + 1, was.passes + passed, was.unfinished)
        else:
            counts[key] = Tally(*key, was.samples, was.passes, was.unfinished + 1)
    return counts
