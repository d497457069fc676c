"""`trialog audit` against real Kafka: a small run written with kafka-python, read back and audited."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from kafka import KafkaProducer

from ops.audit import EVENTS
from ops.cli.main import main as trialog
from schemas.topics import topic_name
from streams.kafka.topics import ensure_topics
from tests.unit.ops.test_audit import RunLog, healthy_run


def _new_run(bootstrap: str) -> str:
    run = f"audit{uuid.uuid4().hex[:6]}"
    ensure_topics(bootstrap, run)
    return run


def _write(bootstrap: str, run: str, log: RunLog) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        for record in log.records:
            producer.send(topic_name(run, record.topic), value=record.value, key=record.key)
        producer.flush(timeout=30)
    finally:
        producer.close()


def _audit(bootstrap: str, run: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code = trialog(["audit", run, "--json", "--bootstrap", bootstrap, "--timeout", "30"])
    captured = capsys.readouterr()
    assert "audit: read" in captured.err  # progress on stderr, the report alone on stdout
    return code, json.loads(captured.out)


def test_a_healthy_run_read_back_from_kafka(kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]) -> None:
    run = _new_run(kafka_bootstrap)
    log = healthy_run(4)
    _write(kafka_bootstrap, run, log)
    code, report = _audit(kafka_bootstrap, run, capsys)
    assert code == 0
    assert report["run"] == run and report["healthy"] is True
    assert report["records"] == len(log.records)
    assert (report["started"], report["completed"], report["in_flight"], report["lost"]) == (4, 4, 0, 0)
    assert report["failed"] == {} and report["undecodable"] == {}
    assert report["duplicate_steps"] == 0 and report["broken_chains"] == 0 and report["fold_errors"] == 0
    assert report["trajectories"] == {"completed": 4, "failed": 0, "repeated": 0}
    assert report["redone"] == {"policy": 0, "sandbox": 0, "verify": 0}
    assert report["episodes_with_errors"] == []


def test_a_redelivered_event_makes_the_run_unhealthy(
    kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _new_run(kafka_bootstrap)
    log = healthy_run(2)
    last = [record for record in log.records if record.topic == EVENTS][-1]
    log.records.append(last)  # the owner appended its last event twice
    _write(kafka_bootstrap, run, log)
    code, report = _audit(kafka_bootstrap, run, capsys)
    assert code == 1 and report["healthy"] is False
    assert report["duplicate_steps"] == 1 and report["broken_chains"] == 0
    (error,) = report["episodes_with_errors"]
    assert error["episode"] == "ep-1" and error["kind"] == "duplicate_step"


def test_a_run_without_topics_is_an_error(kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = trialog(["audit", f"nosuch{uuid.uuid4().hex[:6]}", "--bootstrap", kafka_bootstrap])
    assert code == 2
    assert "none of its topics exist" in capsys.readouterr().err
