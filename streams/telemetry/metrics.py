"""Metric instruments of a trialog process, behind a small `Metrics` protocol; `NoopMetrics` when off.

The instruments (OpenTelemetry names; `ops.telemetry.prometheus` serves them as `trialog_*`):

| instrument | kind | attributes | recorded by |
| --- | --- | --- | --- |
| trialog.episodes | counter | outcome (started, completed, failed) | the owner (streams) |
| trialog.steps | counter | | the owner, per executed step |
| trialog.stage.duration (s) | histogram | stage (policy.call, sandbox.exec, verify, owner.*) | span hooks |
| trialog.sandbox.pool.size | gauge | state (ready) | the sandbox worker |
| trialog.sandbox.acquire.duration (s) | histogram | | the sandbox worker |
| trialog.consumer.lag | gauge | topic | every Kafka loop (records behind the partition's end) |
| trialog.rewards | counter | verdict | the owner, per accepted RewardAssigned |
| trialog.reward.sum | up-down counter | verdict | the owner: the sum of those rewards |
| trialog.staleness | histogram | | the learner (policy versions behind, per consumed trajectory) |
| trialog.failures | counter | class | the owner, per EpisodeFailed |
| trialog.tamper.detections | counter | | the owner, per reward with verdict tampered |
| trialog.deadletters | counter | reason, source | whoever dead-letters a record |
| trialog.weights.refused | counter | reason, source | a rollout hot swap, per refused announcement or file |
| trialog.learner.trajectories | counter | outcome (trained, quarantined, held, ...) | the learner |
| trialog.alerts | counter | rule, severity | the guard, per alert raised |
| trialog.alert.webhook.failures | counter | outcome (retried, dropped) | the guard's webhook, per failure |

Episodes/s and steps/s are rates of the counters (Prometheus `rate()`). Rewards are a count and a sum
(the mean is their ratio), not a histogram: OpenTelemetry histograms refuse negative values, and a
reward can be -1.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from streams.telemetry.attributes import Attributes

EPISODES = "trialog.episodes"
STEPS = "trialog.steps"
STAGE_DURATION = "trialog.stage.duration"
POOL_SIZE = "trialog.sandbox.pool.size"
ACQUIRE_DURATION = "trialog.sandbox.acquire.duration"
CONSUMER_LAG = "trialog.consumer.lag"
REWARDS = "trialog.rewards"
REWARD_SUM = "trialog.reward.sum"
STALENESS = "trialog.staleness"
FAILURES = "trialog.failures"
TAMPER_DETECTIONS = "trialog.tamper.detections"
DEADLETTERS = "trialog.deadletters"
WEIGHTS_REFUSED = "trialog.weights.refused"
LEARNER_TRAJECTORIES = "trialog.learner.trajectories"
ALERTS = "trialog.alerts"
WEBHOOK_FAILURES = "trialog.alert.webhook.failures"

COUNTERS = {
    EPISODES: "episodes by outcome",
    STEPS: "executed steps",
    FAILURES: "failed episodes by failure class",
    TAMPER_DETECTIONS: "rewards with verdict tampered",
    DEADLETTERS: "records sent to deadletter, by reason",
    WEIGHTS_REFUSED: "policy announcements or weights files refused by a hot swap, by reason",
    REWARDS: "rewards assigned, by verdict",
    LEARNER_TRAJECTORIES: "trajectories the learner took in, by outcome (its planner's counters)",
    ALERTS: "alerts raised, by rule and severity",
    WEBHOOK_FAILURES: "alert webhook posts that failed, by outcome (retried, dropped)",
}
UP_DOWN_COUNTERS = {REWARD_SUM: "sum of the rewards assigned, by verdict"}
HISTOGRAMS: dict[str, tuple[str, str, tuple[float, ...]]] = {
    STAGE_DURATION: (
        "s",
        "time spent per stage of a step",
        (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
    ),
    ACQUIRE_DURATION: (
        "s",
        "time to get a sandbox for a step",
        (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
    ),
    STALENESS: ("1", "policy versions behind, per consumed trajectory", (0, 1, 2, 3, 4, 8, 16, 32)),
}
GAUGES = {
    POOL_SIZE: "warm sandboxes ready",
    CONSUMER_LAG: "records between a consumer's position and the end of its partitions",
}

GaugeReading = Iterable[tuple[float, Attributes]]


@dataclass(frozen=True, slots=True)
class Point:
    """One measurement: add `value` to a counter or record it in a histogram."""

    instrument: str
    value: float
    attributes: Attributes


class Metrics(Protocol):
    enabled: bool

    def add(self, instrument: str, value: float = 1, attributes: Attributes | None = None) -> None: ...

    def record(self, instrument: str, value: float, attributes: Attributes | None = None) -> None: ...

    def gauge(self, instrument: str, read: Callable[[], GaugeReading]) -> None:
        """Observe a gauge through `read` at each collection (a scrape)."""
        ...

    def shutdown(self) -> None: ...


class NoopMetrics:
    enabled = False

    def add(self, instrument: str, value: float = 1, attributes: Attributes | None = None) -> None:
        pass

    def record(self, instrument: str, value: float, attributes: Attributes | None = None) -> None:
        pass

    def gauge(self, instrument: str, read: Callable[[], GaugeReading]) -> None:
        pass

    def shutdown(self) -> None:
        pass


_installed: Metrics = NoopMetrics()


def install(metrics_: Metrics) -> Metrics:
    global _installed
    previous, _installed = _installed, metrics_
    return previous


def metrics() -> Metrics:
    return _installed


# -- helpers for the hooks -----------------------------------------------------------------------------------


def apply(points: Iterable[Point]) -> None:
    active = _installed
    if not active.enabled:
        return
    for point in points:
        if point.instrument in HISTOGRAMS:
            active.record(point.instrument, point.value, point.attributes)
        else:
            active.add(point.instrument, point.value, point.attributes)


def stage_seconds(stage: str, seconds: float) -> None:
    _installed.record(STAGE_DURATION, seconds, {"stage": stage})


def staleness(versions_behind: int) -> None:
    """The learner's hook: how many policy versions behind a consumed trajectory is."""
    _installed.record(STALENESS, max(0, versions_behind))


def dead_letter(reason: str, source: str) -> None:
    _installed.add(DEADLETTERS, 1, {"reason": reason, "source": source})


def weights_refused(reason: str, source: str) -> None:
    """A policy announcement or its weights refused (the model kept the weights it had)."""
    _installed.add(WEIGHTS_REFUSED, 1, {"reason": reason, "source": source})


def learner_outcomes(counts: dict[str, int]) -> None:
    """What the learner's planner just counted (`learner.state.Counters` increments, by counter name)."""
    for outcome, count in counts.items():
        if count:
            _installed.add(LEARNER_TRAJECTORIES, count, {"outcome": outcome})


class ConsumerLag:
    """The lag of each partition a process consumes, summed per topic when the gauge is read."""

    def __init__(self) -> None:
        self._lags: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()

    def set(self, topic: str, partition: int, lag: int) -> None:
        with self._lock:
            self._lags[(topic, partition)] = max(0, lag)

    def read(self) -> list[tuple[float, Attributes]]:
        with self._lock:
            totals: dict[str, int] = {}
            for (topic, _partition), lag in self._lags.items():
                totals[topic] = totals.get(topic, 0) + lag
        return [(float(total), {"topic": topic}) for topic, total in sorted(totals.items())]


LAG = ConsumerLag()


def consumer_lag(topic: str, partition: int, lag: int) -> None:
    if _installed.enabled:
        LAG.set(topic, partition, lag)


def kafka_python_lag(consumer: Any) -> None:
    """Note the lag of every partition a kafka-python consumer fetched from (after a poll): the
    partition's high watermark minus the consumer's position. Partitions not fetched yet are skipped
    (their position is unknown, and asking for it would block)."""
    if not _installed.enabled:
        return
    for tp in consumer.assignment():
        end = consumer.highwater(tp)
        if end is not None:
            LAG.set(tp.topic, tp.partition, int(end) - int(consumer.position(tp)))
