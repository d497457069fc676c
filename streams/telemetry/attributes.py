"""Span attributes of what a process handles (pure): the episode's identity and the Kafka record's place.

Names are `trialog.*` (run, episode, task, task version, step, attempt, policy version) and OpenTelemetry's
messaging conventions for the record (`messaging.destination.name`, `messaging.kafka.*`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

AttributeValue = str | bool | int | float
Attributes = Mapping[str, AttributeValue]

RUN, EPISODE, TASK, TASK_VERSION = "trialog.run", "trialog.episode", "trialog.task", "trialog.task_version"
STEP, ATTEMPT, POLICY_VERSION = "trialog.step", "trialog.attempt", "trialog.policy_version"
TOPIC, PARTITION, OFFSET = (
    "messaging.destination.name",
    "messaging.destination.partition.id",
    "messaging.kafka.offset",
)


def kafka_attributes(topic: str, partition: int, offset: int) -> dict[str, AttributeValue]:
    """Where the handled record sits in the log (topic as written, run prefix included)."""
    return {TOPIC: topic, PARTITION: str(partition), OFFSET: offset}


def record_attributes(value: Any) -> dict[str, AttributeValue]:
    """The episode identity carried by a decoded record: an `EventMeta` header (events, requests,
    answers, trajectories) or the fields of a `StartEpisode` / `AbortEpisode`. {} for anything else."""
    meta = getattr(value, "meta", None)
    if meta is not None and hasattr(meta, "episode_id") and hasattr(meta, "step"):
        return {
            RUN: meta.run_id,
            EPISODE: meta.episode_id,
            TASK: meta.task_id,
            TASK_VERSION: meta.task_version,
            STEP: meta.step,
            ATTEMPT: meta.attempt,
            POLICY_VERSION: meta.policy_version,
        }
    found: dict[str, AttributeValue] = {}
    for field, name in (
        ("run_id", RUN),
        ("episode_id", EPISODE),
        ("task_id", TASK),
        ("task_version", TASK_VERSION),
        ("policy_version", POLICY_VERSION),
    ):
        attribute = getattr(value, field, None)
        if isinstance(attribute, (str, int)) and not isinstance(attribute, bool):
            found[name] = attribute
    return found
