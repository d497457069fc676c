"""Things published for the whole run: new policy weights and validated tasks."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
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
        )
