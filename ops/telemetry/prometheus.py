"""Prometheus' text exposition format (0.0.4) over the SDK's collected metrics, served on 127.0.0.1.

`opentelemetry-exporter-prometheus` is not among trialog's pinned dependencies, and the format is small:
counters become `<name>_total`, gauges `<name>`, histograms `<name>_bucket{le=...}`, `_sum` and `_count`
(cumulative buckets); dots become underscores and a unit of seconds adds `_seconds`.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_INVALID = re.compile(r"[^a-zA-Z0-9_:]")


def metric_name(name: str, unit: str = "") -> str:
    base = _INVALID.sub("_", name)
    if base[:1].isdigit():
        base = f"_{base}"
    return f"{base}_seconds" if unit == "s" and not base.endswith("_seconds") else base


def _label_name(key: str) -> str:
    label = _INVALID.sub("_", key).replace(":", "_")
    return f"_{label}" if label[:1].isdigit() else label


def _escape(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(attributes: Mapping[str, Any], extra: Mapping[str, str] | None = None) -> str:
    pairs = [(_label_name(k), _escape(v)) for k, v in sorted(attributes.items())]
    pairs += list((extra or {}).items())
    return "{" + ",".join(f'{k}="{v}"' for k, v in pairs) + "}" if pairs else ""


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if isinstance(value, int) or float(value).is_integer():
        return str(int(value))
    return repr(float(value))


def render(data: Any) -> str:
    """The text format of an SDK `MetricsData` (None or empty: an empty page)."""
    from opentelemetry.sdk.metrics.export import Gauge, Histogram, Sum

    lines: list[str] = []
    for resource in getattr(data, "resource_metrics", None) or ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points = metric.data
                name = metric_name(metric.name, metric.unit or "")
                if isinstance(points, Sum):
                    kind = "counter" if points.is_monotonic else "gauge"
                    sample = f"{name}_total" if points.is_monotonic else name
                    lines += _header(name, metric.description, kind)
                    lines += (
                        f"{sample}{_labels(p.attributes or {})} {_number(p.value)}"
                        for p in points.data_points
                    )
                elif isinstance(points, Gauge):
                    lines += _header(name, metric.description, "gauge")
                    lines += (
                        f"{name}{_labels(p.attributes or {})} {_number(p.value)}" for p in points.data_points
                    )
                elif isinstance(points, Histogram):
                    lines += _header(name, metric.description, "histogram")
                    for p in points.data_points:
                        lines += _histogram(name, p)
    return "\n".join(lines) + "\n" if lines else ""


def _header(name: str, description: str, kind: str) -> list[str]:
    text = (description or "").replace("\\", "\\\\").replace("\n", "\\n")
    return [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]


def _histogram(name: str, point: Any) -> Iterator[str]:
    attributes = point.attributes or {}
    running = 0
    for bound, count in zip((*point.explicit_bounds, math.inf), point.bucket_counts, strict=False):
        running += count
        yield f"{name}_bucket{_labels(attributes, {'le': _number(bound)})} {running}"
    yield f"{name}_sum{_labels(attributes)} {_number(point.sum)}"
    yield f"{name}_count{_labels(attributes)} {point.count}"


class MetricsServer:
    """GET /metrics on 127.0.0.1:`port` (0: a free port, see `.port`), answered by `page()`."""

    def __init__(self, page: Callable[[], str], port: int) -> None:
        handler = _handler(page)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.httpd.daemon_threads = True
        self.port: int = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="metrics-http", daemon=True)

    def start(self) -> MetricsServer:
        self.thread.start()
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _handler(page: Callable[[], str]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] not in ("/metrics", "/"):
                self.send_error(404, "metrics are at /metrics")
                return
            try:
                body = page().encode()
            except Exception as exc:  # a broken gauge must not take the endpoint down
                log.exception("collecting metrics failed")
                self.send_error(500, f"{type(exc).__name__}")
                return
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # a scrape every few seconds would flood the worker's log

    return Handler
