"""The alert engine as the guard process drives it (`actors.guard.worker.AlertHook`: `observe(topic, value,
now_us)` and `tick(now_us)`, each returning the alerts for the guard to write to `alerts`).

`EngineHook.for_run(...)` primes the engine with the run's `alerts` topic first (so that the guard's replay
of the other topics from their beginning raises nothing the log already holds), samples the run's metrics
on a thread of its own (a slow broker or metrics endpoint never holds the guard's loop), and hands every
alert it returns to the side sinks: the log, the `trialog.alerts` counter and the webhook. The guard
writes them to the topic itself, acks=all, as it writes its own.

Ticks count only once the engine is live: it has seen a record from the last `LIVE_WITHIN_S`, or
`mark_live()` was called. Before that the guard is still replaying old records, and a tick at the wall
clock's time would judge them by it (the learner "idle" for the hours the replay has not reached yet).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from actors.guard.alerts import FOLLOWED, AlertEngine, AlertSettings, Rule, RunMetrics
from actors.guard.sinks import AlertSink, LogAlertSink, MetricsAlertSink, WebhookSink
from schemas.alerts import Alert
from schemas.origin import Origin
from schemas.topics import ALERTS, DEADLETTER, POLICY_VERSIONS, TRAJECTORIES_FAILED, Topic

log = logging.getLogger(__name__)

LIVE_WITHIN_S = 60.0
SAMPLE_EVERY_S = 30.0
ENGINE_TOPICS = frozenset(topic.name for topic in FOLLOWED if topic is not ALERTS)
GUARD_RAISES = frozenset({Rule.CANARY_FAILED, Rule.VERSION_CHANGED})
"""Rules the guard's core raises itself (with its canary and pin context): off in the engine it hosts."""


class MetricsSampler:
    """Calls `read()` every `every_s` on a daemon thread; `take()` returns the newest reading once."""

    def __init__(self, read: Callable[[], RunMetrics], every_s: float = SAMPLE_EVERY_S) -> None:
        self._read = read
        self._every_s = every_s
        self._latest: RunMetrics | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="alert-metrics", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                reading = self._read()
            except Exception as exc:  # a broker or endpoint away: the next reading may work
                log.warning("reading the run's metrics failed: %s", exc)
            else:
                with self._lock:
                    self._latest = reading
            self._stopping.wait(self._every_s)

    def take(self) -> RunMetrics | None:
        with self._lock:
            reading, self._latest = self._latest, None
        return reading

    def close(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=5)


class EngineHook:
    def __init__(
        self,
        engine: AlertEngine,
        sinks: Sequence[AlertSink] = (),
        sampler: MetricsSampler | None = None,
        live_within_s: float = LIVE_WITHIN_S,
    ) -> None:
        self.engine = engine
        self.sinks = list(sinks)
        self.sampler = sampler
        self.live_within_us = int(live_within_s * 1_000_000)
        self.live = False

    @classmethod
    def for_run(
        cls,
        bootstrap: str,
        run: str,
        origin: Origin,
        settings: AlertSettings | None = None,
        *,
        webhook: str | None = None,
        sandbox_metrics: Sequence[str] = (),
        sample_every_s: float = SAMPLE_EVERY_S,
    ) -> EngineHook:
        from actors.guard.metrics import read_metrics
        from streams.kafka.reader import read_to_end

        base = settings or AlertSettings()
        engine = AlertEngine(run, _without_guard_rules(base), origin)
        for _topic, value in read_to_end(bootstrap, [ALERTS.of(run)]):
            engine.observe(value)  # what was raised before: not raised again by the replay
        sinks: list[AlertSink] = [LogAlertSink(), MetricsAlertSink()]
        if webhook:
            sinks.append(WebhookSink(webhook))
        urls = list(sandbox_metrics)
        sampler = MetricsSampler(lambda: read_metrics(bootstrap, run, urls), sample_every_s)
        return cls(engine, sinks, sampler)

    def mark_live(self) -> None:
        self.live = True

    def observe(self, topic: str, value: object, now_us: int) -> list[Alert]:
        if topic not in ENGINE_TOPICS:
            return []
        alerts = self.engine.observe(value)
        if not self.live and now_us - self.engine.now_us <= self.live_within_us:
            self.live = True
        return self.deliver(alerts)

    def tick(self, now_us: int) -> list[Alert]:
        if not self.live:
            return []
        alerts = self.engine.tick(now_us)
        reading = self.sampler.take() if self.sampler is not None else None
        if reading is not None:
            alerts += self.engine.sample(reading, now_us)
        return self.deliver(alerts)

    def deliver(self, alerts: list[Alert]) -> list[Alert]:
        """Hand `alerts` to the side sinks (log, counter, webhook): the engine's, and the guard's own."""
        for alert in alerts:
            for sink in self.sinks:
                try:
                    sink.deliver(alert)
                except Exception:
                    log.exception("alert %s: %s failed", alert.alert_id, type(sink).__name__)
        return alerts

    def close(self) -> None:
        if self.sampler is not None:
            self.sampler.close()
        for sink in self.sinks:
            sink.close()


def _without_guard_rules(settings: AlertSettings) -> AlertSettings:
    import dataclasses

    return dataclasses.replace(settings, disabled=settings.disabled | GUARD_RAISES)


def extra_topics() -> tuple[Topic, ...]:
    """The topics the engine reads beyond those the guard follows (`GuardProcessSettings.extra_topics`);
    the alerts topic is not among them: `for_run` reads it first, and the engine ignores its own echoes."""
    return (TRAJECTORIES_FAILED, DEADLETTER, POLICY_VERSIONS)
