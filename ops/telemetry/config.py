"""Where a process sends its traces and serves its metrics, from its options and the environment.

* Tracing is on unless `TRIALOG_TRACING=off` (or `0`, `false`, `no`). Its OTLP gRPC endpoint is, first
  found: `--otlp-endpoint`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_EXPORTER_OTLP_ENDPOINT`, else the
  local stack's Jaeger when its OTLP port answers (`ops/stack/jaeger.py` knows the port). With none of
  these there is nowhere to send spans and tracing is off: no exporter, no span, no header.
* Metrics are served in Prometheus' text format on 127.0.0.1 when a port is given: `--metrics-port` or
  `TRIALOG_METRICS_PORT` (0 picks a free port, logged at start). Without one, no metric is kept.

The options themselves are the CLI's (`ops.cli.kit.add_telemetry`), which passes their values to `resolve`;
`worker_options` turns a config back into them for a process that starts workers (`trialog run start
--spawn`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

TRACING_ENV = "TRIALOG_TRACING"
METRICS_PORT_ENV = "TRIALOG_METRICS_PORT"
ENDPOINT_ENVS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_OFF = {"off", "0", "false", "no"}


@dataclass(frozen=True, slots=True)
class TelemetryConfig:
    service: str  # the OpenTelemetry service name, e.g. trialog-streams
    otlp_endpoint: str | None = None  # None: tracing off
    metrics_port: int | None = None  # None: metrics off

    @property
    def tracing(self) -> bool:
        return self.otlp_endpoint is not None

    @property
    def metrics(self) -> bool:
        return self.metrics_port is not None


def tracing_enabled(env: Mapping[str, str] = os.environ) -> bool:
    return env.get(TRACING_ENV, "on").strip().lower() not in _OFF


def resolve(
    service: str,
    otlp_endpoint: str | None = None,
    metrics_port: int | None = None,
    env: Mapping[str, str] = os.environ,
) -> TelemetryConfig:
    endpoint = None
    if tracing_enabled(env):
        endpoint = otlp_endpoint or next((env[name] for name in ENDPOINT_ENVS if env.get(name)), None)
        endpoint = endpoint or _local_jaeger()
    port = metrics_port
    if port is None and env.get(METRICS_PORT_ENV, "").strip():
        port = int(env[METRICS_PORT_ENV])
    return TelemetryConfig(service, endpoint, port)


def _local_jaeger() -> str | None:
    """The local stack's Jaeger OTLP endpoint, when something answers there."""
    from ops import process
    from ops.stack.stack import StackConfig

    try:
        ports = StackConfig.load().jaeger
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return ports.otlp_grpc_endpoint if process.port_open(ports.otlp_grpc) else None


def worker_options(config: TelemetryConfig, offset: int) -> list[str]:
    """The options that make a spawned worker trace to the same endpoint and serve metrics on the
    `offset`-th port after this process's own (so that the workers of one run never share a port)."""
    options = ["--otlp-endpoint", config.otlp_endpoint] if config.otlp_endpoint else []
    if config.metrics_port:
        options += ["--metrics-port", str(config.metrics_port + offset)]
    return options
