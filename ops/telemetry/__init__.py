"""Tracing and metrics of trialog's processes (OpenTelemetry), one trace per episode.

* `ids`: trace and root span ids derived from an episode id; W3C `traceparent` (pure);
* `tracing`: the `Tracer` protocol, its no-op implementation and the hooks the workers call
  (`consumed_span`, `child_span`, `annotate`, `outgoing_headers`, `episode_span`);
* `metrics`: the instrument catalog, the `Metrics` protocol and its no-op implementation;
* `episodes`: metric points of the owner's events and the episode's root span;
* `otel`, `otel_metrics`, `prometheus`: the SDK-backed implementations and the /metrics endpoint;
* `setup`: `start(config)` installs both for a process, from its options (`config`).
"""
