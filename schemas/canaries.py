"""A canary grade: a verifier graded a known workspace of a run's task (topic `canary.grades`).

Canaries are the run's check on its grader while it runs (`actors.guard`): the reference solution must
pass, the untouched repo and known reward hacks must not. A canary is never an episode and never reaches
the learner; its grade is a record of its own, with the versions that made it and whether it was right.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from schemas.common import Producer, RecordMeta, Verdict
from schemas.record import AvroDict, from_optional, optional
from schemas.versions import GradeVersions


@dataclass(frozen=True, slots=True)
class CanaryGraded:
    SCHEMA: ClassVar[str] = "trialog.run.CanaryGraded"

    meta: RecordMeta
    run_id: str
    canary_id: str
    round: int
    task_id: str
    task_version: str
    case: str  # reference, untouched, hack:<name>
    expect_pass: bool
    ok: bool
    reward: float
    verdict: Verdict
    passed: int
    total: int
    versions: GradeVersions | None
    grader: Producer
    requested_at_us: int
    graded_at_us: int
    duration_us: int

    def to_record(self) -> AvroDict:
        return {
            "meta": self.meta.to_record(),
            "run_id": self.run_id,
            "canary_id": self.canary_id,
            "round": self.round,
            "task_id": self.task_id,
            "task_version": self.task_version,
            "case": self.case,
            "expect_pass": self.expect_pass,
            "ok": self.ok,
            "reward": self.reward,
            "verdict": self.verdict.value,
            "passed": self.passed,
            "total": self.total,
            "versions": optional(self.versions),
            "grader": self.grader.to_record(),
            "requested_at_us": self.requested_at_us,
            "graded_at_us": self.graded_at_us,
            "duration_us": self.duration_us,
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> CanaryGraded:
        return cls(
            RecordMeta.from_record(rec["meta"]),
            rec["run_id"],
            rec["canary_id"],
            rec["round"],
            rec["task_id"],
            rec["task_version"],
            rec["case"],
            rec["expect_pass"],
            rec["ok"],
            rec["reward"],
            Verdict(rec["verdict"]),
            rec["passed"],
            rec["total"],
            from_optional(rec["versions"], GradeVersions.from_record),
            Producer.from_record(rec["grader"]),
            rec["requested_at_us"],
            rec["graded_at_us"],
            rec["duration_us"],
        )
