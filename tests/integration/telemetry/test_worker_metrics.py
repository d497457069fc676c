"""A real rollout worker serves Prometheus metrics on 127.0.0.1, and with tracing off adds no header."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

from kafka import KafkaProducer

from ops.paths import REPO_ROOT
from ops.process import free_port
from schemas.topics import POLICY_REQUESTS, POLICY_RESULTS
from tests.integration.actors.kafka_helpers import CODEC, new_run, next_records, reading
from tests.unit.actors.requests import policy_request, request_meta


def _scrape(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            return str(response.read().decode())
    except (urllib.error.URLError, OSError):
        return ""


def test_a_worker_serves_its_metrics_and_tracing_off_sends_no_traceparent(kafka_bootstrap: str) -> None:
    run = new_run(kafka_bootstrap, "met")
    port = free_port()
    command = [
        sys.executable, "-m", "ops.cli", "worker", "rollout", "--policy", "random",
        "--bootstrap", kafka_bootstrap, "--run", run, "--group", f"{run}-rollout", "--instance", "m1",
        "--metrics-port", str(port),
    ]  # fmt: skip
    env = {**os.environ, "TRIALOG_TRACING": "off"}
    worker = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stderr=subprocess.PIPE, text=True)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    try:
        with reading(kafka_bootstrap, run, "policy.results", "deadletter") as answers:
            requests = POLICY_REQUESTS.of(run)
            meta = dataclasses.replace(request_meta(episode="ep-m"), traceparent=None)
            producer.send(requests, key=b"ep-m", value=CODEC.encode(policy_request(meta=meta))).get(30)
            producer.send(requests, key=b"ep-m", value=b"garbage").get(30)
            records = next_records(answers, 2, timeout_s=90)
        (answer,) = [r for r in records if r.topic == POLICY_RESULTS.of(run)]
        assert [key for key, _value in answer.headers or []] == []  # tracing off: no traceparent

        expected = (
            'trialog_stage_duration_seconds_count{stage="policy.call"} 2',  # the garbage is timed too
            'trialog_deadletters_total{reason="too_short",source="rollout"} 1',
            f'trialog_consumer_lag{{topic="{requests}"}} 0',
        )
        give_up = time.monotonic() + 60
        page = _scrape(port)
        while not all(line in page for line in expected) and time.monotonic() < give_up:
            time.sleep(0.5)
            page = _scrape(port)
        for line in expected:
            assert line in page, page
        assert "# TYPE trialog_stage_duration_seconds histogram" in page
    finally:
        producer.close()
        os.kill(worker.pid, signal.SIGTERM)
        _, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
