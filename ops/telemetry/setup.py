"""Install a process's tracer and metrics from its `TelemetryConfig`, and undo it at exit."""

from __future__ import annotations

import atexit
import threading
from dataclasses import dataclass, field

from ops.console import say
from ops.telemetry.config import TelemetryConfig
from ops.telemetry.prometheus import MetricsServer
from streams.telemetry import metrics, tracing


@dataclass
class Telemetry:
    config: TelemetryConfig
    tracer: tracing.Tracer
    metrics: metrics.Metrics
    server: MetricsServer | None = None
    _closed: threading.Event = field(default_factory=threading.Event)

    @property
    def metrics_port(self) -> int | None:
        return None if self.server is None else self.server.port

    def close(self) -> None:
        """Export the spans still buffered, stop serving metrics; the no-op ones are installed again."""
        if self._closed.is_set():
            return
        self._closed.set()
        tracing.install(tracing.NoopTracer())
        metrics.install(metrics.NoopMetrics())
        self.tracer.shutdown()
        if self.server is not None:
            self.server.close()
        self.metrics.shutdown()


def start(config: TelemetryConfig) -> Telemetry:
    """Install the tracer and metrics `config` asks for (none: the no-op ones) until `close` or exit."""
    tracer: tracing.Tracer = tracing.NoopTracer()
    if config.otlp_endpoint is not None:
        from ops.telemetry.otel import OtelTracer

        tracer = OtelTracer.exporting(config.service, config.otlp_endpoint)
    meter: metrics.Metrics = metrics.NoopMetrics()
    server = None
    if config.metrics_port is not None:
        from ops.telemetry.otel_metrics import OtelMetrics
        from ops.telemetry.prometheus import render

        otel_metrics = OtelMetrics(config.service)
        meter = otel_metrics
        server = MetricsServer(lambda: render(otel_metrics.collect()), config.metrics_port).start()
    tracing.install(tracer)
    metrics.install(meter)
    telemetry = Telemetry(config, tracer, meter, server)
    atexit.register(telemetry.close)
    traced = f"traces to {config.otlp_endpoint}" if config.tracing else "tracing off"
    served = f"metrics on http://127.0.0.1:{server.port}/metrics" if server else "metrics off"
    say(f"telemetry of {config.service}: {traced}, {served}")  # stderr: every worker's log shows it
    return telemetry
