"""Alerts: a rule over a run's events and metrics fired (topic `alerts`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from schemas.common import RecordMeta
from schemas.record import AvroDict


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


@dataclass(frozen=True, slots=True)
class Alert:
    SCHEMA: ClassVar[str] = "trialog.ops.Alert"

    meta: RecordMeta
    run_id: str
    alert_id: str
    rule: str  # the rule's name, e.g. canary_failed, version_changed, reward_collapse
    severity: Severity
    summary: str
    value: float | None = None
    threshold: float | None = None
    labels: Mapping[str, str] = field(default_factory=dict)

    def to_record(self) -> AvroDict:
        return {
            "meta": self.meta.to_record(),
            "run_id": self.run_id,
            "alert_id": self.alert_id,
            "rule": self.rule,
            "severity": self.severity.value,
            "summary": self.summary,
            "value": self.value,
            "threshold": self.threshold,
            "labels": dict(self.labels),
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> Alert:
        return cls(
            RecordMeta.from_record(rec["meta"]),
            rec["run_id"],
            rec["alert_id"],
            rec["rule"],
            Severity(rec["severity"]),
            rec["summary"],
            rec["value"],
            rec["threshold"],
            dict(rec["labels"]),
        )
