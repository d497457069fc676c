"""The run's control log (topic `run.control`): what the run pinned, and what its guard and operators
decided about it since: a version changed, the run paused or resumed, trajectories quarantined, a grader
vouched for by canaries. Every reader (the scheduler, the learner, `run status`, the audit) folds the same
records (`actors.guard.control.ControlState`), so a decision is taken once, by one writer, and obeyed by all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from schemas.common import Producer, RecordMeta
from schemas.record import AvroDict


@dataclass(frozen=True, slots=True)
class PinnedTask:
    SCHEMA: ClassVar[str] = "trialog.run.PinnedTask"

    task_id: str
    task_version: str
    tests: str  # sha256 of the hidden tests

    def to_record(self) -> AvroDict:
        return {"task_id": self.task_id, "task_version": self.task_version, "tests": self.tests}

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> PinnedTask:
        return cls(rec["task_id"], rec["task_version"], rec["tests"])


@dataclass(frozen=True, slots=True)
class GuardSettings:
    SCHEMA: ClassVar[str] = "trialog.run.GuardSettings"

    canaries_per_minute: float
    max_canary_share: float
    pause_on_canary_failure: bool
    hold_for_clearance: bool

    def to_record(self) -> AvroDict:
        return {
            "canaries_per_minute": self.canaries_per_minute,
            "max_canary_share": self.max_canary_share,
            "pause_on_canary_failure": self.pause_on_canary_failure,
            "hold_for_clearance": self.hold_for_clearance,
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> GuardSettings:
        return cls(
            rec["canaries_per_minute"],
            rec["max_canary_share"],
            rec["pause_on_canary_failure"],
            rec["hold_for_clearance"],
        )


@dataclass(frozen=True, slots=True)
class RunPinned:
    SCHEMA: ClassVar[str] = "trialog.run.RunPinned"

    meta: RecordMeta
    run_id: str
    verifier: str
    image: str
    reward_config: str
    tasks: tuple[PinnedTask, ...]
    guard: GuardSettings

    def task(self, task_id: str) -> PinnedTask | None:
        return next((task for task in self.tasks if task.task_id == task_id), None)

    def to_record(self) -> AvroDict:
        return {
            "meta": self.meta.to_record(),
            "run_id": self.run_id,
            "verifier": self.verifier,
            "image": self.image,
            "reward_config": self.reward_config,
            "tasks": [task.to_record() for task in self.tasks],
            "guard": self.guard.to_record(),
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> RunPinned:
        return cls(
            RecordMeta.from_record(rec["meta"]),
            rec["run_id"],
            rec["verifier"],
            rec["image"],
            rec["reward_config"],
            tuple(PinnedTask.from_record(task) for task in rec["tasks"]),
            GuardSettings.from_record(rec["guard"]),
        )


@dataclass(frozen=True, slots=True)
class VersionChanged:
    SCHEMA: ClassVar[str] = "trialog.run.VersionChanged"

    meta: RecordMeta
    run_id: str
    component: str  # a schemas.versions.Component value
    pinned: str
    seen: str
    task_id: str | None
    source: str  # the episode or canary id of the grade that named it
    grader: Producer

    def to_record(self) -> AvroDict:
        return {
            "meta": self.meta.to_record(),
            "run_id": self.run_id,
            "component": self.component,
            "pinned": self.pinned,
            "seen": self.seen,
            "task_id": self.task_id,
            "source": self.source,
            "grader": self.grader.to_record(),
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> VersionChanged:
        return cls(
            RecordMeta.from_record(rec["meta"]),
            rec["run_id"],
            rec["component"],
            rec["pinned"],
            rec["seen"],
            rec["task_id"],
            rec["source"],
            Producer.from_record(rec["grader"]),
        )


@dataclass(frozen=True, slots=True)
class RunPaused:
    SCHEMA: ClassVar[str] = "trialog.run.RunPaused"

    meta: RecordMeta
    run_id: str
    reason: str
    alert_id: str | None = None

    def to_record(self) -> AvroDict:
        return {
            "meta": self.meta.to_record(),
            "run_id": self.run_id,
            "reason": self.reason,
            "alert_id": self.alert_id,
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> RunPaused:
        return cls(RecordMeta.from_record(rec["meta"]), rec["run_id"], rec["reason"], rec["alert_id"])


@dataclass(frozen=True, slots=True)
class RunResumed:
    SCHEMA: ClassVar[str] = "trialog.run.RunResumed"

    meta: RecordMeta
    run_id: str
    reason: str

    def to_record(self) -> AvroDict:
        return {"meta": self.meta.to_record(), "run_id": self.run_id, "reason": self.reason}

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> RunResumed:
        return cls(RecordMeta.from_record(rec["meta"]), rec["run_id"], rec["reason"])


ANY = "any"
"""A quarantine rule's component that matches every trajectory graded in its time window."""


@dataclass(frozen=True, slots=True)
class TrajectoriesQuarantined:
    SCHEMA: ClassVar[str] = "trialog.run.TrajectoriesQuarantined"

    meta: RecordMeta
    run_id: str
    rule_id: str
    component: str  # a schemas.versions.Component value, or ANY
    value: str  # the version matched ("" for ANY)
    since_us: int  # grades at or after this time (0: from the start)
    until_us: int | None  # grades before this time (None: no end)
    reason: str
    episode_ids: tuple[str, ...]  # the trajectories it matched when it was written

    def to_record(self) -> AvroDict:
        return {
            "meta": self.meta.to_record(),
            "run_id": self.run_id,
            "rule_id": self.rule_id,
            "component": self.component,
            "value": self.value,
            "since_us": self.since_us,
            "until_us": self.until_us,
            "reason": self.reason,
            "episode_ids": list(self.episode_ids),
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> TrajectoriesQuarantined:
        return cls(
            RecordMeta.from_record(rec["meta"]),
            rec["run_id"],
            rec["rule_id"],
            rec["component"],
            rec["value"],
            rec["since_us"],
            rec["until_us"],
            rec["reason"],
            tuple(rec["episode_ids"]),
        )


@dataclass(frozen=True, slots=True)
class GraderCleared:
    SCHEMA: ClassVar[str] = "trialog.run.GraderCleared"

    meta: RecordMeta
    run_id: str
    verifier: str
    image: str
    up_to_us: int

    def to_record(self) -> AvroDict:
        return {
            "meta": self.meta.to_record(),
            "run_id": self.run_id,
            "verifier": self.verifier,
            "image": self.image,
            "up_to_us": self.up_to_us,
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> GraderCleared:
        return cls(RecordMeta.from_record(rec["meta"]), rec["run_id"], rec["verifier"], rec["image"],
                   rec["up_to_us"])  # fmt: skip


ControlRecord = RunPinned | VersionChanged | RunPaused | RunResumed | TrajectoriesQuarantined | GraderCleared
CONTROL_TYPES: tuple[type[ControlRecord], ...] = (
    RunPinned,
    VersionChanged,
    RunPaused,
    RunResumed,
    TrajectoriesQuarantined,
    GraderCleared,
)
