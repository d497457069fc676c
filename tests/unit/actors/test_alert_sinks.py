"""Alert delivery: a webhook posts to a loopback HTTP server (one that fails and then recovers, one that is
down, one that is slow), the log and the metrics counter; one failing sink never stops the others."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from actors.guard.alerts import AlertEngine, AlertSettings
from actors.guard.metrics import lags, parse_histogram, run_groups
from actors.guard.sinks import AlertSinks, LogAlertSink, MetricsAlertSink, WebhookSink
from schemas.alerts import Alert
from streams.telemetry import metrics
from tests.unit.actors.test_alerts import RUN, _origin, canary, dead_letter


def _alert(critical: bool = True) -> Alert:
    engine = AlertEngine(RUN, AlertSettings(), _origin())
    (alert,) = engine.observe(canary(False)) if critical else engine.observe(dead_letter(1))
    return alert


class Receiver:
    """A loopback webhook receiver answering `fail_first` posts with 500, the rest with 204."""

    def __init__(self, fail_first: int = 0, delay_s: float = 0.0) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.attempts = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.attempts += 1
                time.sleep(delay_s)
                if receiver.attempts <= fail_first:
                    self.send_response(500)
                else:
                    receiver.bodies.append(json.loads(body))
                    self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hook"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.close()


class Counting(metrics.NoopMetrics):
    """Counts what is added; the other instruments are the no-op ones."""

    enabled = True

    def __init__(self) -> None:
        self.added: list[tuple[str, float, dict[str, Any]]] = []

    def add(self, instrument: str, value: float = 1, attributes: Any = None) -> None:
        self.added.append((instrument, value, dict(attributes or {})))


@pytest.fixture
def counted() -> Iterator[Counting]:
    counting = Counting()
    previous = metrics.install(counting)
    yield counting
    metrics.install(previous)


def test_the_webhook_posts_the_alert_as_json(receiver: Receiver) -> None:
    sink = WebhookSink(receiver.url)
    alert = _alert()
    sink.deliver(alert)
    assert sink.flush(5.0)
    sink.close()
    (body,) = receiver.bodies
    assert body["alert_id"] == alert.alert_id and body["rule"] == "canary_failed"
    assert body["severity"] == "critical" and body["labels"] == {"case": "reference", "task": "task-1"}
    assert sink.delivered == 1 and sink.dropped == 0


def test_a_receiver_that_fails_then_recovers_gets_the_alert_after_retries(counted: Counting) -> None:
    server = Receiver(fail_first=2)
    try:
        sink = WebhookSink(server.url, first_pause_s=0.05)
        sink.deliver(_alert())
        assert sink.flush(5.0)
        sink.close()
    finally:
        server.close()
    assert server.attempts == 3 and len(server.bodies) == 1
    assert sink.retried == 2 and sink.delivered == 1 and sink.dropped == 0
    failures = [a for a in counted.added if a[0] == metrics.WEBHOOK_FAILURES]
    assert failures == [(metrics.WEBHOOK_FAILURES, 1, {"outcome": "retried"})] * 2


def test_a_receiver_that_is_down_is_given_up_logged_and_counted(
    counted: Counting, caplog: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}/hook"
    sink = WebhookSink(url, attempts=3, first_pause_s=0.01, timeout_s=0.5)
    alert = _alert()
    with caplog.at_level(logging.ERROR, "trialog.alerts"):
        sink.deliver(alert)
        assert sink.flush(5.0)
    sink.close()
    assert sink.delivered == 0 and sink.dropped == 1 and sink.retried == 2
    assert (metrics.WEBHOOK_FAILURES, 1, {"outcome": "dropped"}) in counted.added
    assert f"alert {alert.alert_id} not posted to {url}" in caplog.text and "after 3 attempts" in caplog.text


def test_a_slow_receiver_never_blocks_the_caller_and_a_full_queue_drops() -> None:
    server = Receiver(delay_s=0.5)
    try:
        sink = WebhookSink(server.url, queue_size=2)
        started = time.monotonic()
        for _ in range(5):
            sink.deliver(_alert())
        assert time.monotonic() - started < 0.2
        assert sink.dropped >= 2  # one in the post, two queued, the rest refused at once
        sink.close(timeout_s=3.0)
    finally:
        server.close()
    assert sink.delivered + sink.dropped == 5


def test_the_log_and_the_counter_and_a_failing_sink(
    counted: Counting, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken:
        def deliver(self, alert: Alert) -> None:
            raise RuntimeError("broker gone")

        def close(self) -> None:
            pass

    sinks = AlertSinks([Broken(), LogAlertSink(), MetricsAlertSink()])
    critical, warning = _alert(), _alert(critical=False)
    with caplog.at_level(logging.WARNING, "trialog.alerts"), pytest.raises(RuntimeError, match="broker gone"):
        sinks.deliver(critical)
    with caplog.at_level(logging.WARNING, "trialog.alerts"), pytest.raises(RuntimeError):
        sinks.deliver(warning)
    levels = [(r.levelname, r.getMessage()) for r in caplog.records if r.getMessage().startswith("alert ")]
    assert any(level == "CRITICAL" and f"alert {critical.alert_id}" in text for level, text in levels)
    assert any(level == "WARNING" and f"alert {warning.alert_id}" in text for level, text in levels)
    assert (metrics.ALERTS, 1, {"rule": "canary_failed", "severity": "critical"}) in counted.added
    assert (metrics.ALERTS, 1, {"rule": "dead_letters", "severity": "warning"}) in counted.added


# -- the metrics adapter's pure parts ---------------------------------------------------------------------


def test_the_runs_consumer_groups_are_its_trialog_groups() -> None:
    groups = ["r1.trialog-streams", "r1.trialog-verifier", "r10.trialog-streams", "trialog-rollout", "other"]
    assert run_groups(groups, "r1") == ["r1.trialog-streams", "r1.trialog-verifier"]
    assert run_groups(groups, "") == ["trialog-rollout"]


def test_lag_is_end_minus_committed_summed_per_group() -> None:
    class Committed:
        def __init__(self, offset: int) -> None:
            self.offset = offset

    committed = {"g": {("t", 0): Committed(5), ("t", 1): Committed(-1), ("t", 2): Committed(9)}, "h": {}}
    assert lags(committed, {("t", 0): 15, ("t", 1): 3, ("t", 2): 8}) == {"g": 10}


def test_the_acquire_histogram_is_read_from_a_prometheus_page() -> None:
    name = "trialog_sandbox_acquire_duration_seconds"
    page = "\n".join(
        [
            f"# TYPE {name} histogram",
            f'{name}_bucket{{le="0.1"}} 3',
            f'{name}_bucket{{le="1"}} 7',
            f'{name}_bucket{{le="+Inf"}} 8',
            f"{name}_sum 4.2",
            f"{name}_count 8",
            'trialog_stage_duration_seconds_bucket{stage="x",le="1"} 99',
        ]
    )
    histogram = parse_histogram(page, name)
    assert histogram is not None
    assert histogram.bounds == (0.1, 1.0, float("inf")) and histogram.counts == (3, 7, 8)
    assert parse_histogram("# nothing yet\n", name) is None
