"""Jaeger v2, built from its Go module into the cache, run with in-memory storage on loopback only."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from ops import process
from ops.paths import REPO_ROOT, Paths
from ops.stack import go_tools
from ops.stack.health import Health
from streams.errors import StackError

JAEGER_MODULE = "github.com/jaegertracing/jaeger/cmd/jaeger"
JAEGER_VERSION = "v1.76.0"  # the v2 binary (same commit as v2.13.0)
TOOL_MODULE_DIR = REPO_ROOT / "ops" / "jaeger"  # go.mod/go.sum pin every dependency of the build
CONFIG = TOOL_MODULE_DIR / "config.yaml"


@dataclass(frozen=True)
class JaegerPorts:
    otlp_grpc: int = 4317
    otlp_http: int = 4318
    query: int = 16686
    query_grpc: int = 16685
    health: int = 13133
    metrics: int = 8888

    @property
    def query_url(self) -> str:
        return f"http://127.0.0.1:{self.query}"

    @property
    def otlp_grpc_endpoint(self) -> str:
        return f"127.0.0.1:{self.otlp_grpc}"

    def as_env(self, max_traces: int = 100_000) -> dict[str, str]:
        return {
            "TRIALOG_JAEGER_OTLP_GRPC_PORT": str(self.otlp_grpc),
            "TRIALOG_JAEGER_OTLP_HTTP_PORT": str(self.otlp_http),
            "TRIALOG_JAEGER_QUERY_PORT": str(self.query),
            "TRIALOG_JAEGER_QUERY_GRPC_PORT": str(self.query_grpc),
            "TRIALOG_JAEGER_HEALTH_PORT": str(self.health),
            "TRIALOG_JAEGER_METRICS_PORT": str(self.metrics),
            "TRIALOG_JAEGER_MAX_TRACES": str(max_traces),
        }

    def all(self) -> tuple[int, ...]:
        return (self.otlp_grpc, self.otlp_http, self.query, self.query_grpc, self.health, self.metrics)


def binary(paths: Paths) -> Path:
    """Build the Jaeger binary once with `go build` against the pinned tool module; later calls reuse it."""
    return go_tools.build(
        paths, f"Jaeger {JAEGER_VERSION}", f"jaeger-{JAEGER_VERSION}", TOOL_MODULE_DIR, JAEGER_MODULE
    )


def start(paths: Paths, ports: JaegerPorts) -> None:
    home = paths.component("jaeger")
    pid_file, log_file = home / "jaeger.pid", home / "jaeger.log"
    if process.running_pid(pid_file) is not None:
        return
    for port in ports.all():
        if process.port_open(port):
            raise StackError(
                f"port 127.0.0.1:{port} is already taken by another program",
                "stop it, or choose other ports with the TRIALOG_JAEGER_*_PORT variables",
            )
    argv = [str(binary(paths)), "--config", f"file:{CONFIG}"]
    process.start_detached(argv, pid_file=pid_file, log_file=log_file, env={**os.environ, **ports.as_env()})
    if not process.wait_until(lambda: query_error(ports) is None, timeout_s=30):
        process.stop(pid_file)
        raise StackError(
            f"Jaeger did not answer on {ports.query_url} within 30 s; last log lines:\n"
            f"{process.log_tail(log_file)}",
            f"see {log_file}",
        )


def stop(paths: Paths) -> bool:
    return process.stop(paths.component("jaeger") / "jaeger.pid")


def query_error(ports: JaegerPorts, timeout_s: float = 2.0) -> str | None:
    """None when Jaeger's query API lists services, else why not."""
    try:
        with urllib.request.urlopen(f"{ports.query_url}/api/services", timeout=timeout_s) as response:
            json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def health(ports: JaegerPorts) -> Health:
    error = query_error(ports)
    if error is not None:
        return Health(False, f"/api/services did not answer: {error}", ports.query_url)
    return Health(True, f"Jaeger {JAEGER_VERSION} query API answers (in-memory storage)", ports.query_url)
