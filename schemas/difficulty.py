"""A task's measured difficulty: its pass rate with one policy version (topic `tasks`, beside the task).

Written by `trialog tasks difficulty` on the tasks topic of the run that trains on the tasks, keyed
`difficulty/<task id>` (`difficulty_key`) so that compaction keeps the newest measurement of each task and
never drops a `TaskPublished` (keyed by the bare task id). The scheduler folds the newest one per task id
and version; a measurement of another version of the task does not apply.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from schemas.common import RecordMeta
from schemas.record import AvroDict

DIFFICULTY_KEY_PREFIX = "difficulty/"


def difficulty_key(task_id: str) -> bytes:
    """The record key of a task's difficulty on the tasks topic (never a task id: ids have no '/')."""
    return f"{DIFFICULTY_KEY_PREFIX}{task_id}".encode()


@dataclass(frozen=True, slots=True)
class TaskDifficulty:
    SCHEMA: ClassVar[str] = "trialog.task.TaskDifficulty"

    meta: RecordMeta
    task_id: str
    task_version: str
    policy_version: int
    samples: int
    passes: int
    pass_rate: float
    bucket: str  # actors.scheduler.difficulty.Bucket, kept as text: the schema layer knows no actor
    measured_by: str  # the run whose episodes were counted
    unfinished: int = 0  # episodes that ended without a grade, not among the samples

    def to_record(self) -> AvroDict:
        return {
            "meta": self.meta.to_record(),
            "task_id": self.task_id,
            "task_version": self.task_version,
            "policy_version": self.policy_version,
            "samples": self.samples,
            "passes": self.passes,
            "pass_rate": self.pass_rate,
            "bucket": self.bucket,
            "measured_by": self.measured_by,
            "unfinished": self.unfinished,
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> TaskDifficulty:
        return cls(
            RecordMeta.from_record(rec["meta"]),
            rec["task_id"],
            rec["task_version"],
            rec["policy_version"],
            rec["samples"],
            rec["passes"],
            rec["pass_rate"],
            rec["bucket"],
            rec["measured_by"],
            rec["unfinished"],
        )
