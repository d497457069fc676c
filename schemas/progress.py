"""Process grades: a verifier graded the workspace an episode had after one of its steps (topic
`progress.results`), beside the episode, never in its way.

The episode's owner asks for them (`progress.requests`, `VerifyRequest`s naming the step's snapshot) as
steps execute, when the run's step-grading policy says so, and never waits for an answer: the episode's
next step is asked for at once, and its reward still comes from the final grade alone. What a learner makes
of them is the process reward: a step's change in pass rate (`process_rewards`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from schemas.common import EventMeta, Verdict
from schemas.record import AvroDict, from_optional, optional
from schemas.versions import GradeVersions


@dataclass(frozen=True, slots=True)
class StepGraded:
    SCHEMA: ClassVar[str] = "trialog.progress.StepGraded"

    # meta.step: how many steps had executed when the graded workspace (meta.snapshot_id) was taken: 0 for
    # the task's untouched workspace, k + 1 for the workspace after step k.
    meta: EventMeta
    verdict: Verdict
    passed: int
    total: int
    versions: GradeVersions | None = None
    duration_us: int = 0

    @property
    def rate(self) -> float | None:
        """The pass rate, or None when the grade says nothing (an error, a task without tests)."""
        if self.verdict is Verdict.ERROR or self.total <= 0:
            return None
        return self.passed / self.total

    def to_record(self) -> AvroDict:
        return {
            "meta": self.meta.to_record(),
            "verdict": self.verdict.value,
            "passed": self.passed,
            "total": self.total,
            "versions": optional(self.versions),
            "duration_us": self.duration_us,
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> StepGraded:
        return cls(
            EventMeta.from_record(rec["meta"]),
            Verdict(rec["verdict"]),
            rec["passed"],
            rec["total"],
            from_optional(rec["versions"], GradeVersions.from_record),
            rec["duration_us"],
        )


def process_rewards(steps: int, grades: Sequence[StepGraded]) -> list[float | None]:
    """The process reward of each of an episode's `steps` executed steps: the pass rate after it minus the
    last rate known before it (the untouched workspace's first). A step whose workspace has no usable
    grade gets None, and the next graded step is measured against the last rate known, so the rewards of
    the graded steps add up to the change from the start to the last graded workspace. Nothing is known
    before the untouched workspace's grade: steps graded before any earlier rate get None. Duplicate
    grades of a workspace (a redelivered request) count once: the first."""
    rates: dict[int, float] = {}
    for grade in grades:
        rate, executed = grade.rate, grade.meta.step
        if rate is not None and 0 <= executed <= steps and executed not in rates:
            rates[executed] = rate
    rewards: list[float | None] = []
    last = rates.get(0)
    for executed in range(1, steps + 1):
        rate = rates.get(executed)
        if rate is None or last is None:
            rewards.append(None)
            last = rate if rate is not None else last
            continue
        rewards.append(rate - last)
        last = rate
    return rewards
