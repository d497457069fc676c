"""Alerts end to end on a real broker: the engine's alerts written through the sinks (topic, log, webhook
to a loopback server) and read back by `trialog alerts --json`, `--follow` and `run status --json`; the
lag of a run's consumer group read by the metrics adapter."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.structs import OffsetAndMetadata, TopicPartition

from actors.guard.alerts import AlertEngine, AlertSettings
from actors.guard.hook import EngineHook
from actors.guard.metrics import read_metrics
from actors.guard.sinks import AlertSinks, KafkaAlertSink, LogAlertSink, MetricsAlertSink, WebhookSink
from ops.cli.main import main
from ops.paths import REPO_ROOT
from schemas.origin import Origin
from schemas.topics import DEADLETTER
from streams.kafka.topics import ensure_topics
from tests.unit.actors.test_alert_sinks import Receiver
from tests.unit.actors.test_alerts import T0, canary, dead_letter


def _run_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    assert main([*argv, "--json"]) == 0
    document: dict[str, object] = json.loads(capsys.readouterr().out)
    return document


def test_alerts_written_through_the_sinks_are_listed_followed_and_counted(
    kafka_bootstrap: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    run = f"alerts-{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka_bootstrap, run)
    receiver = Receiver()
    webhook = WebhookSink(receiver.url)
    sinks = AlertSinks(
        [KafkaAlertSink.connect(kafka_bootstrap, run), LogAlertSink(), MetricsAlertSink(), webhook]
    )
    engine = AlertEngine(run, AlertSettings(), Origin.system("guard", "it"))
    records = [dataclasses.replace(canary(False), run_id=run), dead_letter(T0 + 1)]
    raised = engine.observe_all(records)
    assert [a.rule for a in raised] == ["canary_failed", "dead_letters"]
    sinks.deliver_all(raised)
    assert webhook.flush(10.0)
    sinks.close()
    receiver.close()
    assert [body["alert_id"] for body in receiver.bodies] == [a.alert_id for a in raised]

    listed = _run_json(["alerts", run, "--bootstrap", kafka_bootstrap, "--timeout", "20"], capsys)
    assert listed["count"] == 2 and listed["by_severity"] == {"critical": 1, "warning": 1, "info": 0}
    assert [a["alert_id"] for a in listed["alerts"]] == [a.alert_id for a in raised]  # type: ignore[union-attr]
    only = _run_json(["alerts", run, "--rule", "dead_letters", "--bootstrap", kafka_bootstrap], capsys)
    assert [a["rule"] for a in only["alerts"]] == ["dead_letters"]  # type: ignore[union-attr]
    later = _run_json(["alerts", run, "--since", "1s", "--bootstrap", kafka_bootstrap], capsys)
    assert later["count"] == 0  # raised at the records' times, long ago

    status = _run_json(["run", "status", run, "--bootstrap", kafka_bootstrap], capsys)
    alerts = status["alerts"]
    assert isinstance(alerts, dict) and alerts["count"] == 2 and alerts["by_severity"]["critical"] == 1
    assert [a["rule"] for a in alerts["last"]] == ["canary_failed", "dead_letters"]

    assert (
        main(["report", run, "--out", str(tmp_path), "--bootstrap", kafka_bootstrap, "--timeout", "20"]) == 0
    )
    page = (tmp_path / "report.html").read_text()
    assert "<h2>Alerts (2)</h2>" in page and "<td>canary_failed</td>" in page

    # --follow: what is there, then an alert written while it follows; SIGINT ends it with 0.
    argv = ["alerts", run, "--follow", "--json", "--bootstrap", kafka_bootstrap]
    follow = subprocess.Popen(
        [sys.executable, "-m", "ops.cli", *argv],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TRIALOG_TRACING": "off"},
    )  # fmt: skip
    try:
        assert follow.stdout is not None
        first = [json.loads(follow.stdout.readline()) for _ in raised]
        assert [line["alert_id"] for line in first] == [a.alert_id for a in raised]
        (new,) = engine.tick(T0 + 3600 * 1_000_000) + engine.observe(dead_letter(T0 + 3601 * 1_000_000))
        sink = KafkaAlertSink.connect(kafka_bootstrap, run)
        sink.deliver(new)
        sink.close()
        assert json.loads(follow.stdout.readline())["alert_id"] == new.alert_id
        follow.send_signal(signal.SIGINT)
        assert follow.wait(timeout=20) == 0
    finally:
        follow.kill()
        follow.wait()

    # A restarted guard's engine, primed from the topic, does not raise again what the replay reaches.
    hook = EngineHook.for_run(kafka_bootstrap, run, Origin.system("guard", "it2"), sample_every_s=60)
    try:
        now = T0 + 3602 * 1_000_000
        replayed = [
            hook.observe("deadletter", value, now)
            for value in (records[1], dead_letter(T0 + 3601 * 1_000_000))
        ]
        assert replayed == [[], []]
    finally:
        hook.close()


def test_the_lag_of_a_runs_consumer_group_is_read_from_the_broker(kafka_bootstrap: str) -> None:
    run = f"lag-{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka_bootstrap, run)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    for _ in range(7):
        producer.send(DEADLETTER.of(run), b"x")
    producer.flush()
    producer.close()
    group = f"{run}.trialog-guard-test"
    consumer = KafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=group, enable_auto_commit=False)
    consumer.commit({TopicPartition(DEADLETTER.of(run), 0): OffsetAndMetadata(2, "", -1)})
    consumer.close()
    started = time.monotonic()
    metrics = read_metrics(kafka_bootstrap, run)
    assert time.monotonic() - started < 10
    assert metrics.lag == {group: 5}
    assert read_metrics(kafka_bootstrap, f"{run}-other").lag == {}
