"""Spans of one episode across processes: parents from headers or the derived root, and tracing off."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ops.paths import REPO_ROOT
from ops.telemetry import config
from ops.telemetry.otel import OtelTracer
from streams.telemetry import tracing
from streams.telemetry.ids import SpanRef, episode_root_span_id, episode_trace_id, parse_traceparent
from tests.unit.actors.requests import policy_request, request_meta


class Process:
    """One traced process (its own tracer and service name), spans kept in memory."""

    def __init__(self, service: str) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer = OtelTracer(service, SimpleSpanProcessor(self.exporter))

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())


@pytest.fixture
def streams() -> Iterator[Process]:
    process = Process("trialog-streams")
    with tracing.installed(process.tracer):
        yield process
    process.tracer.shutdown()


def _ids(span: ReadableSpan) -> tuple[int, int, int | None]:
    context = span.get_span_context()
    assert context is not None
    return context.trace_id, context.span_id, span.parent.span_id if span.parent else None


def test_a_span_without_a_header_hangs_under_the_episodes_derived_root(streams: Process) -> None:
    with tracing.consumed_span(
        "owner.episode.commands", b"ep-1", {"k": 1}, topic="r.episode.commands", offset=9
    ):
        pass
    (span,) = streams.spans()
    assert _ids(span)[0] == episode_trace_id("ep-1")
    assert _ids(span)[2] == episode_root_span_id("ep-1")
    attributes = dict(span.attributes or {})
    assert attributes["trialog.episode"] == "ep-1" and attributes["k"] == 1
    assert attributes["messaging.destination.name"] == "r.episode.commands"
    assert attributes["messaging.kafka.offset"] == 9


def test_a_record_sent_inside_a_span_makes_the_receivers_span_its_child(streams: Process) -> None:
    with tracing.consumed_span("owner.policy.results", "ep-2"):
        headers = tracing.outgoing_headers()
    (owner_span,) = streams.spans()
    assert headers == [("traceparent", SpanRef(*_ids(owner_span)[:2]).traceparent().encode())]

    rollout = Process("trialog-rollout")  # another process receives the request
    with (
        tracing.installed(rollout.tracer),
        tracing.consumed_span("policy.call", "ep-2", headers=headers, topic="r.policy.requests") as span,
    ):
        tracing.annotate(policy_request(meta=request_meta(episode="ep-2", step=3, attempt=2)))
        span.set_attributes({"extra": "yes"})
        answer_headers = tracing.outgoing_headers(headers)
    (call,) = rollout.spans()
    assert _ids(call)[0] == episode_trace_id("ep-2") and _ids(call)[2] == _ids(owner_span)[1]
    attributes = dict(call.attributes or {})
    assert (attributes["trialog.step"], attributes["trialog.attempt"]) == (3, 2)
    assert attributes["trialog.policy_version"] == 3 and attributes["trialog.task"] == "task-1"
    assert attributes["trialog.run"] == "run-test" and attributes["extra"] == "yes"
    assert parse_traceparent(answer_headers[0][1]) == SpanRef(*_ids(call)[:2])


def test_child_spans_nest_under_the_current_span_and_need_one(streams: Process) -> None:
    with tracing.child_span("sandbox.snapshot"):
        pass
    assert streams.spans() == []  # no current span: nothing to hang it under
    with tracing.consumed_span("sandbox.exec", "ep-3"):
        with tracing.child_span("sandbox.acquire", {"trialog.restore": True}):
            pass
        with tracing.child_span("sandbox.snapshot"):
            pass
    acquire, snapshot, exec_ = streams.spans()
    assert [s.name for s in (acquire, snapshot, exec_)] == [
        "sandbox.acquire",
        "sandbox.snapshot",
        "sandbox.exec",
    ]
    assert _ids(acquire)[2] == _ids(exec_)[1] and _ids(snapshot)[2] == _ids(exec_)[1]
    assert {_ids(s)[0] for s in (acquire, snapshot, exec_)} == {episode_trace_id("ep-3")}


def test_the_root_span_has_the_derived_ids_and_the_events_times(streams: Process) -> None:
    with tracing.consumed_span("owner.verify.results", "ep-4"):
        tracing.episode_span("ep-4", 1_700_000_000_000_000, 1_700_000_002_500_000, {"trialog.run": "r"})
    root, owner = sorted(streams.spans(), key=lambda s: s.name)
    assert root.name == "episode" and root.parent is None
    assert _ids(root)[:2] == (episode_trace_id("ep-4"), episode_root_span_id("ep-4"))
    assert (root.start_time, root.end_time) == (1_700_000_000_000_000_000, 1_700_000_002_500_000_000)
    assert _ids(owner)[2] == _ids(root)[1]  # the owner's span hangs under it, though emitted first
    with tracing.consumed_span("after", "ep-5"):
        pass
    assert _ids(streams.spans()[-1])[1] != episode_root_span_id("ep-4")  # ids are random again


def test_an_error_inside_a_span_marks_it_and_still_propagates(streams: Process) -> None:
    with pytest.raises(ValueError), tracing.consumed_span("verify", "ep-6"):
        raise ValueError("boom")
    (span,) = streams.spans()
    assert not span.status.is_ok and span.events[0].name == "exception"


def test_tracing_off_makes_no_span_and_no_header() -> None:
    assert not tracing.tracer().enabled  # nothing installed: the no-op tracer
    with tracing.consumed_span("policy.call", "ep-1", headers=[("traceparent", b"x")]) as span:
        span.set_attributes({"a": 1})
        tracing.annotate(policy_request())
        assert tracing.outgoing_headers() == []
    assert tracing.consumed_span("policy.call", "ep-1") is tracing.NULL_SCOPE
    tracing.episode_span("ep-1", 1, 2)  # nothing to emit it with, no error


def test_trialog_tracing_off_wins_over_every_endpoint() -> None:
    env = {"TRIALOG_TRACING": "off", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}
    resolved = config.resolve("trialog-x", "127.0.0.1:4317", None, env)
    assert resolved.otlp_endpoint is None and not resolved.tracing
    on = config.resolve("trialog-x", None, None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"})
    assert on.otlp_endpoint == "http://127.0.0.1:1"
    assert config.resolve("s", "127.0.0.1:9", None, {}).otlp_endpoint == "127.0.0.1:9"  # the option first
    assert config.resolve("s", None, None, {"TRIALOG_METRICS_PORT": "9464"}).metrics_port == 9464


def test_a_process_with_tracing_off_never_loads_the_sdk() -> None:
    code = (
        "import sys\n"
        "from ops.telemetry import config, setup\nfrom streams.telemetry import tracing\n"
        "t = setup.start(config.resolve('trialog-x', '127.0.0.1:4317', None, {'TRIALOG_TRACING': 'off'}))\n"
        "with tracing.consumed_span('policy.call', 'ep-1'):\n"
        "    assert tracing.outgoing_headers() == []\n"
        "t.close()\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout


def test_spawned_workers_get_the_same_endpoint_and_their_own_metrics_ports() -> None:
    telemetry = config.TelemetryConfig("trialog-scheduler", "127.0.0.1:4317", 9500)
    assert config.worker_options(telemetry, 2) == [
        "--otlp-endpoint",
        "127.0.0.1:4317",
        "--metrics-port",
        "9502",
    ]
    assert config.worker_options(config.TelemetryConfig("s"), 1) == []
