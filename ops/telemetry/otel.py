"""The `Tracer` of `streams.telemetry.tracing` on the OpenTelemetry SDK: batched OTLP gRPC export.

Imported only when tracing is on, so that a process with tracing off never loads the SDK.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from streams.telemetry.attributes import EPISODE, Attributes
from streams.telemetry.ids import SpanRef

EXPORT_DELAY_MS = 1000  # spans reach Jaeger within about a second; the SDK's default is 5 s
ROOT_SPAN = "episode"


class _EpisodeIds(RandomIdGenerator):
    """Random ids, except while the owner emits an episode's root span: then its derived ids."""

    def __init__(self) -> None:
        self._fixed = threading.local()

    @contextlib.contextmanager
    def fixed(self, ref: SpanRef) -> Iterator[None]:
        self._fixed.ref = ref
        try:
            yield
        finally:
            self._fixed.ref = None

    def generate_trace_id(self) -> int:
        ref: SpanRef | None = getattr(self._fixed, "ref", None)
        return ref.trace_id if ref is not None else super().generate_trace_id()

    def generate_span_id(self) -> int:
        ref: SpanRef | None = getattr(self._fixed, "ref", None)
        return ref.span_id if ref is not None else super().generate_span_id()


class _SpanHandle:
    def __init__(self, span: trace.Span) -> None:
        self._span = span

    def set_attributes(self, attributes: Attributes) -> None:
        self._span.set_attributes(dict(attributes))

    def fail(self, reason: str) -> None:
        self._span.set_status(Status(StatusCode.ERROR, reason))


class OtelTracer:
    enabled = True

    def __init__(self, service: str, processor: SpanProcessor) -> None:
        self._ids = _EpisodeIds()
        self.provider = TracerProvider(
            resource=Resource.create({"service.name": service}), id_generator=self._ids
        )
        self.provider.add_span_processor(processor)
        self._tracer = self.provider.get_tracer("trialog")

    @classmethod
    def exporting(cls, service: str, endpoint: str) -> OtelTracer:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        target, insecure = _grpc_target(endpoint)
        exporter = OTLPSpanExporter(endpoint=target, insecure=insecure)
        return cls(service, BatchSpanProcessor(exporter, schedule_delay_millis=EXPORT_DELAY_MS))

    @contextlib.contextmanager
    def span(
        self, name: str, episode_id: str | None, attributes: Attributes, parent: SpanRef | None
    ) -> Iterator[_SpanHandle]:
        if parent is None and episode_id:
            parent = SpanRef.episode_root(episode_id)
        context = otel_context.Context() if parent is None else _context_of(parent)
        merged = dict(attributes)
        if episode_id:
            merged.setdefault(EPISODE, episode_id)
        with self._tracer.start_as_current_span(
            name, context=context, kind=SpanKind.CONSUMER, attributes=merged
        ) as span:
            yield _SpanHandle(span)

    @contextlib.contextmanager
    def child(self, name: str, attributes: Attributes) -> Iterator[_SpanHandle]:
        if not trace.get_current_span().get_span_context().is_valid:
            yield _SpanHandle(trace.INVALID_SPAN)
            return
        with self._tracer.start_as_current_span(name, attributes=dict(attributes)) as span:
            yield _SpanHandle(span)

    def current(self) -> SpanRef | None:
        context = trace.get_current_span().get_span_context()
        if not context.is_valid:
            return None
        return SpanRef(context.trace_id, context.span_id, context.trace_flags.sampled)

    def annotate(self, attributes: Attributes) -> None:
        trace.get_current_span().set_attributes(dict(attributes))

    def episode_span(self, episode_id: str, start_us: int, end_us: int, attributes: Attributes) -> None:
        with self._ids.fixed(SpanRef.episode_root(episode_id)):
            span = self._tracer.start_span(
                ROOT_SPAN,
                context=otel_context.Context(),  # no parent: the ids come from the generator
                attributes={**attributes, EPISODE: episode_id},
                start_time=start_us * 1000,
            )
        span.end(end_time=max(start_us, end_us) * 1000)

    @contextlib.contextmanager
    def linked(
        self, name: str, ref: SpanRef, attributes: Attributes, links: Sequence[SpanRef]
    ) -> Iterator[_SpanHandle]:
        with self._ids.fixed(ref):
            span = self._tracer.start_span(
                name,
                context=otel_context.Context(),  # no parent: the ids come from the generator
                kind=SpanKind.INTERNAL,
                attributes=dict(attributes),
                links=[trace.Link(_span_context(link)) for link in links],
            )
        with trace.use_span(span, end_on_exit=True, record_exception=True, set_status_on_exception=True):
            yield _SpanHandle(span)

    def flush(self, timeout_ms: int = 10_000) -> bool:
        return self.provider.force_flush(timeout_ms)

    def shutdown(self) -> None:
        self.provider.shutdown()


def _span_context(ref: SpanRef) -> SpanContext:
    flags = TraceFlags(TraceFlags.SAMPLED if ref.sampled else TraceFlags.DEFAULT)
    return SpanContext(ref.trace_id, ref.span_id, is_remote=True, trace_flags=flags)


def _context_of(parent: SpanRef) -> otel_context.Context:
    return trace.set_span_in_context(NonRecordingSpan(_span_context(parent)), otel_context.Context())


def _grpc_target(endpoint: str) -> tuple[str, bool]:
    """host:port and whether the channel is plain text (http:// or no scheme) or TLS (https://)."""
    for scheme, insecure in (("http://", True), ("https://", False)):
        if endpoint.startswith(scheme):
            return endpoint[len(scheme) :].rstrip("/"), insecure
    return endpoint, True
