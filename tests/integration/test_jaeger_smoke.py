"""One span exported over OTLP to the locally built Jaeger comes back through Jaeger's query API."""

from __future__ import annotations

import json
import urllib.request
import uuid

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from ops.process import wait_until
from ops.testing import JaegerProcess


def test_a_span_exported_by_otlp_is_readable_from_the_query_api(jaeger_process: JaegerProcess) -> None:
    service = f"trialog-smoke-{uuid.uuid4().hex[:8]}"
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    exporter = OTLPSpanExporter(endpoint=jaeger_process.ports.otlp_grpc_endpoint, insecure=True)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    with provider.get_tracer("smoke").start_as_current_span("episode") as span:
        span.set_attribute("trialog.episode", "e-1")
        trace_id = format(span.get_span_context().trace_id, "032x")
    provider.force_flush()
    provider.shutdown()

    url = f"{jaeger_process.ports.query_url}/api/traces?service={service}"
    found: list[dict[str, object]] = []

    def trace_arrived() -> bool:
        with urllib.request.urlopen(url, timeout=5) as response:
            found[:] = json.loads(response.read())["data"] or []
        return bool(found)

    assert wait_until(trace_arrived, timeout_s=30, interval_s=0.5)
    assert found[0]["traceID"] == trace_id
    spans = found[0]["spans"]
    assert isinstance(spans, list)
    assert [s["operationName"] for s in spans] == ["episode"]
    tags = {t["key"]: t["value"] for t in spans[0]["tags"]}
    assert tags["trialog.episode"] == "e-1"
