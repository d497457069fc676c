"""The `Metrics` of `streams.telemetry.metrics` on the OpenTelemetry SDK, read by a Prometheus scrape.

Instruments are made once, from the catalog in `streams.telemetry.metrics`; histograms get the catalog's
bucket boundaries through views. An in-memory reader holds cumulative values; each scrape collects them
(gauge callbacks run then) and `ops.telemetry.prometheus` renders them. Imported only when metrics are on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricsData
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource

from streams.telemetry import metrics as catalog
from streams.telemetry.attributes import Attributes


class OtelMetrics:
    enabled = True

    def __init__(self, service: str) -> None:
        self.reader = InMemoryMetricReader()
        views = [
            View(instrument_name=name, aggregation=ExplicitBucketHistogramAggregation(list(bounds)))
            for name, (_unit, _text, bounds) in catalog.HISTOGRAMS.items()
        ]
        self.provider = MeterProvider(
            metric_readers=[self.reader],
            resource=Resource.create({"service.name": service}),
            views=views,
        )
        meter = self.provider.get_meter("trialog")
        self._counters: dict[str, Any] = {
            name: meter.create_counter(name, "1", text) for name, text in catalog.COUNTERS.items()
        }
        for name, text in catalog.UP_DOWN_COUNTERS.items():
            self._counters[name] = meter.create_up_down_counter(name, "1", text)
        self._histograms = {
            name: meter.create_histogram(name, unit, text)
            for name, (unit, text, _bounds) in catalog.HISTOGRAMS.items()
        }
        self._meter = meter
        self._gauges: dict[str, list[Callable[[], catalog.GaugeReading]]] = {}
        self.gauge(catalog.CONSUMER_LAG, catalog.LAG.read)

    def add(self, instrument: str, value: float = 1, attributes: Attributes | None = None) -> None:
        self._counters[instrument].add(value, dict(attributes or {}))

    def record(self, instrument: str, value: float, attributes: Attributes | None = None) -> None:
        self._histograms[instrument].record(value, dict(attributes or {}))

    def gauge(self, instrument: str, read: Callable[[], catalog.GaugeReading]) -> None:
        readers = self._gauges.get(instrument)
        if readers is not None:
            readers.append(read)
            return
        readers = self._gauges[instrument] = [read]

        def observe(options: CallbackOptions) -> Iterable[Observation]:
            for each in list(readers):
                for value, attributes in each():
                    yield Observation(value, dict(attributes))

        self._meter.create_observable_gauge(instrument, [observe], "1", catalog.GAUGES.get(instrument, ""))

    def collect(self) -> MetricsData | None:
        data: Any = self.reader.get_metrics_data()
        return data  # type: ignore[no-any-return]

    def shutdown(self) -> None:
        self.provider.shutdown()
