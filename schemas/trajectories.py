"""Whole trajectories assembled from ended episodes: completed ones feed the learner, failed ones analysis."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from schemas.common import EventMeta, FailureClass, Verdict
from schemas.events import StepRecord
from schemas.record import AvroDict, from_optional, optional
from schemas.versions import GradeVersions


@dataclass(frozen=True, slots=True)
class TrajectoryCompleted:
    SCHEMA: ClassVar[str] = "trialog.trajectory.TrajectoryCompleted"

    meta: EventMeta  # meta.prev_hash: digest of the episode's EpisodeCompleted event
    group_id: str
    instruction: str
    steps: tuple[StepRecord, ...]
    reward: float
    verdict: Verdict
    passed: int
    total: int
    min_policy_version: int
    max_policy_version: int
    grade_versions: GradeVersions | None = None  # since v3: what graded the reward (None: not named)
    graded_at_us: int = 0  # since v3: when the reward was graded (0: unknown)

    def to_record(self) -> AvroDict:
        return {
            "meta": self.meta.to_record(),
            "group_id": self.group_id,
            "instruction": self.instruction,
            "steps": [step.to_record() for step in self.steps],
            "reward": self.reward,
            "verdict": self.verdict.value,
            "passed": self.passed,
            "total": self.total,
            "min_policy_version": self.min_policy_version,
            "max_policy_version": self.max_policy_version,
            "grade_versions": optional(self.grade_versions),
            "graded_at_us": self.graded_at_us,
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> TrajectoryCompleted:
        return cls(
            EventMeta.from_record(rec["meta"]),
            rec["group_id"],
            rec["instruction"],
            tuple(StepRecord.from_record(step) for step in rec["steps"]),
            rec["reward"],
            Verdict(rec["verdict"]),
            rec["passed"],
            rec["total"],
            rec["min_policy_version"],
            rec["max_policy_version"],
            from_optional(rec["grade_versions"], GradeVersions.from_record),
            rec["graded_at_us"],
        )


@dataclass(frozen=True, slots=True)
class TrajectoryFailed:
    SCHEMA: ClassVar[str] = "trialog.trajectory.TrajectoryFailed"

    meta: EventMeta  # meta.prev_hash: digest of the episode's EpisodeFailed event
    failure: FailureClass
    reason: str
    steps: tuple[StepRecord, ...]

    def to_record(self) -> AvroDict:
        return {
            "meta": self.meta.to_record(),
            "failure": self.failure.value,
            "reason": self.reason,
            "steps": [step.to_record() for step in self.steps],
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> TrajectoryFailed:
        return cls(
            EventMeta.from_record(rec["meta"]),
            FailureClass(rec["failure"]),
            rec["reason"],
            tuple(StepRecord.from_record(step) for step in rec["steps"]),
        )
