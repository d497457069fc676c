"""Metric instruments rendered in Prometheus' text format, served on 127.0.0.1; the owner's points."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from ops.telemetry.otel_metrics import OtelMetrics
from ops.telemetry.prometheus import CONTENT_TYPE, MetricsServer, metric_name, render
from schemas.common import FailureClass, Verdict
from schemas.events import EpisodeFailed, RewardAssigned
from schemas.state import EpisodeState
from streams.telemetry import episodes, metrics, tracing
from tests.unit.actors.requests import request_meta


@pytest.fixture
def meter() -> Iterator[OtelMetrics]:
    installed = OtelMetrics("trialog-test")
    previous = metrics.install(installed)
    yield installed
    metrics.install(previous)
    installed.shutdown()


def _samples(page: str) -> dict[str, float]:
    found = {}
    for line in page.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            found[name] = float(value)
    return found


def _reward(verdict: Verdict, reward: float) -> RewardAssigned:
    return RewardAssigned(request_meta(), reward, verdict, 0, 1, (), ("tests/x.py",), "v")


def test_the_owners_events_become_counts_rewards_and_failures(meter: OtelMetrics) -> None:
    failed = EpisodeFailed(request_meta(), FailureClass.SANDBOX_TIMEOUT, "hung")
    assert episodes.points(failed) == [
        metrics.Point(metrics.EPISODES, 1, {"outcome": "failed"}),
        metrics.Point(metrics.FAILURES, 1, {"class": "sandbox_timeout"}),
    ]
    events = [_reward(Verdict.TAMPERED, -1.0), _reward(Verdict.PASS, 1.0), failed]
    episodes.appended(EpisodeState.new("ep-1"), [SimpleNamespace(event=e) for e in events])
    samples = _samples(render(meter.collect()))
    assert samples['trialog_episodes_total{outcome="failed"}'] == 1
    assert samples['trialog_failures_total{class="sandbox_timeout"}'] == 1
    assert samples["trialog_tamper_detections_total"] == 1
    assert samples['trialog_rewards_total{verdict="tampered"}'] == 1
    assert samples['trialog_reward_sum{verdict="tampered"}'] == -1.0  # a sum may go down
    assert samples['trialog_reward_sum{verdict="pass"}'] == 1.0


def test_stage_latency_lag_pool_and_dead_letters_are_exposed(meter: OtelMetrics) -> None:
    with tracing.consumed_span("policy.call", "ep-1"):  # tracing off, metrics on: timed only
        pass
    metrics.consumer_lag("r.policy.requests", 0, 5)
    metrics.consumer_lag("r.policy.requests", 1, 2)
    metrics.consumer_lag("r.policy.requests", 1, 3)  # the latest reading of a partition counts
    metrics.dead_letter("wrong_magic", "rollout")
    metrics.staleness(2)  # the learner's hook
    meter.gauge(metrics.POOL_SIZE, lambda: [(2, {"state": "ready"})])
    page = render(meter.collect())
    samples = _samples(page)
    assert samples['trialog_stage_duration_seconds_count{stage="policy.call"}'] == 1
    buckets = [
        v for k, v in samples.items() if k.startswith('trialog_stage_duration_seconds_bucket{stage="p')
    ]
    assert buckets == sorted(buckets) and buckets[-1] == 1  # cumulative, up to le="+Inf"
    assert samples['trialog_consumer_lag{topic="r.policy.requests"}'] == 8
    assert samples['trialog_deadletters_total{reason="wrong_magic",source="rollout"}'] == 1
    assert samples['trialog_sandbox_pool_size{state="ready"}'] == 2
    assert samples["trialog_staleness_count"] == 1 and samples['trialog_staleness_bucket{le="1"}'] == 0
    assert "# TYPE trialog_stage_duration_seconds histogram" in page
    assert "# TYPE trialog_episodes counter" not in page  # nothing counted yet: no sample, no header
    for line in page.splitlines():  # the exposition grammar: name{labels} value
        assert line.startswith("#") or re.fullmatch(r"[a-zA-Z_:][\w:]*(\{[^}]*\})? \S+", line), line


def test_names_and_labels_follow_prometheus_rules() -> None:
    assert metric_name("trialog.stage.duration", "s") == "trialog_stage_duration_seconds"
    assert metric_name("trialog.episodes") == "trialog_episodes"
    assert metric_name("9x-y") == "_9x_y"


def test_the_endpoint_serves_the_page_on_loopback() -> None:
    server = MetricsServer(lambda: 'trialog_steps_total 3\nlabel_test{a="b\\"c"} 1\n', 0).start()
    try:
        assert server.httpd.server_address[0] == "127.0.0.1"
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as response:
            assert response.headers["Content-Type"] == CONTENT_TYPE
            assert response.read().decode().startswith("trialog_steps_total 3\n")
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/other", timeout=5)
    finally:
        server.close()


def test_metrics_off_keeps_nothing() -> None:
    assert not metrics.metrics().enabled
    metrics.consumer_lag("off-topic", 0, 10)
    assert all(labels["topic"] != "off-topic" for _value, labels in metrics.LAG.read())
