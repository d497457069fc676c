"""Where an alert goes once the engine raised it: the run's `alerts` topic (the record of it), the log, the
metrics, and optionally a webhook. `AlertSinks.deliver(alert)` hands it to each in that order; one sink
failing is logged and never keeps the alert from the others.

* `KafkaAlertSink`: `<run>.alerts`, acks=all, waited for (an alert that is not in the log did not happen
  for `trialog alerts` and `run status`; a send the broker does not acknowledge raises to the caller).
* `LogAlertSink`: one line per alert, at CRITICAL for critical alerts, WARNING otherwise (INFO for info).
* `MetricsAlertSink`: the counter `trialog.alerts` by rule and severity.
* `WebhookSink`: POSTs the alert as JSON (`actors.guard.alerts.alert_json`) from a background thread, so
  the caller never waits on the receiver: each post has a short timeout and is retried with a doubling
  pause; a post given up, or an alert that finds the queue full, is logged and counted
  (`trialog.alert.webhook.failures`). Any URL a user gives is used as given.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from actors.guard.alerts import alert_json, alert_line
from schemas.alerts import Alert, Severity
from schemas.codec import default_codec
from schemas.topics import ALERTS
from streams.telemetry import metrics

log = logging.getLogger("trialog.alerts")

SEND_TIMEOUT_S = 30.0
WEBHOOK_TIMEOUT_S = 3.0
WEBHOOK_ATTEMPTS = 4
WEBHOOK_FIRST_PAUSE_S = 0.5
WEBHOOK_QUEUE = 1000


class AlertSink(Protocol):
    def deliver(self, alert: Alert) -> None: ...

    def close(self) -> None: ...


class KafkaAlertSink:
    """Appends alerts to `<run>.alerts` through `producer` (a kafka-python producer with acks=all)."""

    def __init__(self, producer: Any, run: str, own_producer: bool = False) -> None:
        self.producer = producer
        self.topic = ALERTS.of(run)
        self._own = own_producer

    @classmethod
    def connect(cls, bootstrap: str, run: str) -> KafkaAlertSink:
        from streams.kafka import clients

        return cls(clients.producer(bootstrap), run, own_producer=True)

    def deliver(self, alert: Alert) -> None:
        sent = self.producer.send(self.topic, value=default_codec().encode(alert))
        sent.get(SEND_TIMEOUT_S)

    def close(self) -> None:
        if self._own:
            self.producer.close()


class LogAlertSink:
    def __init__(self, logger: logging.Logger = log) -> None:
        self.logger = logger

    def deliver(self, alert: Alert) -> None:
        level = {Severity.CRITICAL: logging.CRITICAL, Severity.WARNING: logging.WARNING}.get(
            alert.severity, logging.INFO
        )
        self.logger.log(level, "alert %s %s", alert.alert_id, alert_line(alert))

    def close(self) -> None:
        pass


class MetricsAlertSink:
    def deliver(self, alert: Alert) -> None:
        metrics.metrics().add(metrics.ALERTS, 1, {"rule": alert.rule, "severity": alert.severity.value})

    def close(self) -> None:
        pass


Post = Callable[[str, bytes, float], int]


def http_post(url: str, body: bytes, timeout_s: float) -> int:
    """POST `body` as JSON; the HTTP status (an error status is returned, not raised)."""
    request = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": "application/json", "User-Agent": "trialog"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            status: int = answer.status
            return status
    except urllib.error.HTTPError as exc:
        return exc.code


class WebhookSink:
    """Posts each alert to `url` from a thread of its own. `deliver` only enqueues. `attempts` tries per
    alert, `first_pause_s` before the second, doubled after each; a 4xx other than 408/429 is not retried
    (the receiver refused this body; another try would be refused too)."""

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = WEBHOOK_TIMEOUT_S,
        attempts: int = WEBHOOK_ATTEMPTS,
        first_pause_s: float = WEBHOOK_FIRST_PAUSE_S,
        queue_size: int = WEBHOOK_QUEUE,
        post: Post = http_post,
    ) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.attempts = attempts
        self.first_pause_s = first_pause_s
        self._post = post
        self._queue: queue.Queue[Alert | None] = queue.Queue(maxsize=queue_size)
        self._stopping = threading.Event()
        self.delivered = 0
        self.dropped = 0
        self.retried = 0
        self._thread = threading.Thread(target=self._serve, name="alert-webhook", daemon=True)
        self._thread.start()

    def deliver(self, alert: Alert) -> None:
        try:
            self._queue.put_nowait(alert)
        except queue.Full:
            self._failed(alert, "dropped", "the webhook queue is full (the receiver is too slow or down)")

    def _serve(self) -> None:
        while True:
            alert = self._queue.get()
            try:
                if alert is None:
                    return
                self._send(alert)
            finally:
                self._queue.task_done()

    def _send(self, alert: Alert) -> None:
        body = json.dumps(alert_json(alert)).encode()
        pause = self.first_pause_s
        for attempt in range(1, self.attempts + 1):
            try:
                status = self._post(self.url, body, self.timeout_s)
                why = f"HTTP {status}"
            except (OSError, ValueError) as exc:  # refused, reset, timed out, a malformed URL
                status, why = 0, f"{type(exc).__name__}: {exc}"
            if 200 <= status < 300:
                self.delivered += 1
                return
            final = 400 <= status < 500 and status not in (408, 429)
            if attempt == self.attempts or final or self._stopping.is_set():
                self._failed(alert, "dropped", f"{why} after {attempt} attempts")
                return
            self.retried += 1
            metrics.metrics().add(metrics.WEBHOOK_FAILURES, 1, {"outcome": "retried"})
            log.info("alert webhook %s: %s; trying again in %.1f s", self.url, why, pause)
            self._stopping.wait(pause)
            pause *= 2

    def _failed(self, alert: Alert, outcome: str, why: str) -> None:
        self.dropped += 1
        metrics.metrics().add(metrics.WEBHOOK_FAILURES, 1, {"outcome": outcome})
        log.error("alert %s not posted to %s: %s", alert.alert_id, self.url, why)

    def flush(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for the queue to empty; whether it did."""
        deadline = time.monotonic() + timeout_s
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.02)
        return not self._queue.unfinished_tasks

    def close(self, timeout_s: float = 5.0) -> None:
        """Post what is queued for up to `timeout_s`, then stop (retries end at once)."""
        self.flush(timeout_s)
        self._stopping.set()
        try:
            self._queue.put(None, timeout=timeout_s)
        except queue.Full:
            return
        self._thread.join(timeout_s)


class AlertSinks:
    """Every sink in order: the topic first (the record), then the log, the metrics, the webhook."""

    def __init__(self, sinks: Sequence[AlertSink]) -> None:
        self.sinks = list(sinks)

    @classmethod
    def for_run(cls, bootstrap: str, run: str, webhook: str | None = None) -> AlertSinks:
        sinks: list[AlertSink] = [KafkaAlertSink.connect(bootstrap, run), LogAlertSink(), MetricsAlertSink()]
        if webhook:
            sinks.append(WebhookSink(webhook))
        return cls(sinks)

    def deliver(self, alert: Alert) -> None:
        """Hand `alert` to every sink; the first sink's error (the topic's) is raised after the others ran."""
        first: BaseException | None = None
        for sink in self.sinks:
            try:
                sink.deliver(alert)
            except Exception as exc:
                log.exception("alert %s: %s failed", alert.alert_id, type(sink).__name__)
                first = first or exc
        if first is not None:
            raise first

    def deliver_all(self, alerts: Sequence[Alert]) -> None:
        for alert in alerts:
            self.deliver(alert)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()
