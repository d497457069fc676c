"""Things published for the whole run: new policy weights, validated tasks and people's reviews of them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from schemas.blobs import BlobRef
from schemas.common import RecordMeta
from schemas.record import AvroDict, from_optional, optional
from schemas.requests import ResourceLimits


@dataclass(frozen=True, slots=True)
class PolicyPublished:
    SCHEMA: ClassVar[str] = "trialog.policy.PolicyPublished"

    meta: RecordMeta
    run_id: str
    version: int
    base_version: int
    weights_uri: str
    weights: BlobRef
    trajectories: int

    def to_record(self) -> AvroDict:
        return {
            "meta": self.meta.to_record(),
            "run_id": self.run_id,
            "version": self.version,
            "base_version": self.base_version,
            "weights_uri": self.weights_uri,
            "weights": self.weights.to_record(),
            "trajectories": self.trajectories,
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> PolicyPublished:
        return cls(
            RecordMeta.from_record(rec["meta"]),
            rec["run_id"],
            rec["version"],
            rec["base_version"],
            rec["weights_uri"],
            BlobRef.from_record(rec["weights"]),
            rec["trajectories"],
        )


class ReviewDecision(StrEnum):
    ACCEPTED = "accepted"
    REJECTED = "rejected"


class ReviewStatus(StrEnum):
    """A published task's review; there is no `rejected`: a rejected task version is never published."""

    UNREVIEWED = "unreviewed"
    ACCEPTED = "accepted"


@dataclass(frozen=True, slots=True)
class TaskReviewed:
    """A person's decision about one task version (`trialog tasks review`), on the run's `tasks` topic
    under the key `review_key(task_id, task_version)`, so that compaction keeps it beside the task's
    publication."""

    SCHEMA: ClassVar[str] = "trialog.task.TaskReviewed"

    meta: RecordMeta
    task_id: str
    task_version: str
    decision: ReviewDecision
    reviewer: str
    note: str = ""

    def to_record(self) -> AvroDict:
        return {
            "meta": self.meta.to_record(),
            "task_id": self.task_id,
            "task_version": self.task_version,
            "decision": self.decision.value,
            "reviewer": self.reviewer,
            "note": self.note,
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> TaskReviewed:
        return cls(
            RecordMeta.from_record(rec["meta"]),
            rec["task_id"],
            rec["task_version"],
            ReviewDecision(rec["decision"]),
            rec["reviewer"],
            rec["note"],
        )


REVIEW_KEY_PREFIX = "review/"


def review_key(task_id: str, task_version: str) -> bytes:
    """The `tasks` topic key of the reviews of one task version, `review/<id>/<version>`. Not the task id,
    which keys its publication: a compacted topic keeps only the last record of each key, so one key for
    both would drop one of them; and one key per version, so that the rejection of a version is kept
    after a later version is reviewed (re-publishing the rejected version is still refused)."""
    return f"{REVIEW_KEY_PREFIX}{task_id}/{task_version}".encode()


@dataclass(frozen=True, slots=True)
class TaskPublished:
    SCHEMA: ClassVar[str] = "trialog.task.TaskPublished"

    meta: RecordMeta
    task_id: str
    task_version: str
    instruction: str
    image: str
    timeout_s: float
    test_command: str
    build_command: str | None
    protected: tuple[str, ...]
    bundle: BlobRef
    labels: Mapping[str, str] = field(default_factory=dict)
    difficulty: float | None = None
    initial_snapshot_id: str | None = None  # v2: the snapshot of repo/ an episode's first step restores
    limits: ResourceLimits | None = None  # v2: the task's sandbox quotas; None: the defaults
    review: ReviewStatus = ReviewStatus.UNREVIEWED  # v3: the version's review when it was published
    reviewer: str | None = None  # v3: who accepted it

    def to_record(self) -> AvroDict:
        return {
            "meta": self.meta.to_record(),
            "task_id": self.task_id,
            "task_version": self.task_version,
            "instruction": self.instruction,
            "image": self.image,
            "timeout_s": self.timeout_s,
            "test_command": self.test_command,
            "build_command": self.build_command,
            "protected": self.protected,
            "bundle": self.bundle.to_record(),
            "labels": dict(self.labels),
            "difficulty": self.difficulty,
            "initial_snapshot_id": self.initial_snapshot_id,
            "limits": optional(self.limits),
            "review": self.review.value,
            "reviewer": self.reviewer,
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> TaskPublished:
        return cls(
            RecordMeta.from_record(rec["meta"]),
            rec["task_id"],
            rec["task_version"],
            rec["instruction"],
            rec["image"],
            rec["timeout_s"],
            rec["test_command"],
            rec["build_command"],
            tuple(rec["protected"]),
            BlobRef.from_record(rec["bundle"]),
            dict(rec["labels"]),
            rec["difficulty"],
            rec["initial_snapshot_id"],
            from_optional(rec["limits"], ResourceLimits.from_record),
            ReviewStatus(rec["review"]),
            rec["reviewer"],
        )
