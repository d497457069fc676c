"""What the owner's appended events mean for telemetry: metric points (pure) and the root span.

`points(event)` is a pure function of one event; `appended(episode, events)` is the owner's hook after
its events were acknowledged: it applies the points and, when an episode ended, emits the episode's root
span from the EpisodeStarted time to the end event's time.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from schemas.common import Verdict
from schemas.events import EpisodeCompleted, EpisodeFailed, EpisodeStarted, RewardAssigned, StepExecuted
from schemas.state import EpisodeState
from streams.telemetry import metrics, tracing
from streams.telemetry.attributes import record_attributes
from streams.telemetry.metrics import Point


def points(event: object) -> list[Point]:
    if isinstance(event, EpisodeStarted):
        return [Point(metrics.EPISODES, 1, {"outcome": "started"})]
    if isinstance(event, StepExecuted):
        return [Point(metrics.STEPS, 1, {})]
    if isinstance(event, RewardAssigned):
        verdict = {"verdict": event.verdict.value}
        reward = [Point(metrics.REWARDS, 1, verdict), Point(metrics.REWARD_SUM, event.reward, verdict)]
        if event.verdict == Verdict.TAMPERED:
            reward.append(Point(metrics.TAMPER_DETECTIONS, 1, {}))
        return reward
    if isinstance(event, EpisodeCompleted):
        return [Point(metrics.EPISODES, 1, {"outcome": "completed"})]
    if isinstance(event, EpisodeFailed):
        return [
            Point(metrics.EPISODES, 1, {"outcome": "failed"}),
            Point(metrics.FAILURES, 1, {"class": event.failure.value}),
        ]
    return []


def root_span_times(episode: EpisodeState, end: EpisodeCompleted | EpisodeFailed) -> tuple[int, int]:
    """(start, end) of an episode's root span in µs: from its EpisodeStarted to its end event."""
    end_us = end.meta.occurred_at_us
    start_us = episode.started.meta.occurred_at_us if episode.started is not None else end_us
    return min(start_us, end_us), end_us


def appended(episode: EpisodeState, events: Iterable[Any]) -> None:
    """The owner's hook: `events` are what it just appended (objects with an `.event`), `episode` the
    state they led to."""
    if not metrics.metrics().enabled and not tracing.tracer().enabled:
        return
    for each in events:
        event = each.event
        metrics.apply(points(event))
        if isinstance(event, (EpisodeCompleted, EpisodeFailed)):
            start_us, end_us = root_span_times(episode, event)
            attributes = dict(record_attributes(event))
            attributes["trialog.outcome"] = "completed" if isinstance(event, EpisodeCompleted) else "failed"
            tracing.episode_span(event.meta.episode_id, start_us, end_us, attributes)
