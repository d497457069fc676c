"""Spans of one trace per episode, behind a small `Tracer` protocol; `NoopTracer` when tracing is off.

A process installs its tracer once at start (`ops.telemetry.setup`); the hooks in the workers call the
functions of this module, which go to the installed tracer (the no-op one by default, so code run without
setup, tests included, traces nothing and pays one function call per hook).

Parenting, with no coordination between processes (`streams.telemetry.ids`):
* a span for a consumed record hangs under the span named by the record's `traceparent` header (the span
  of the process that sent it), else under the episode's root span, whose ids every process derives from
  the episode id;
* a record sent while a span is current carries that span in its `traceparent` header (`outgoing_headers`);
* the root span "episode" is emitted once, by the episode's owner when the episode ends, with the start and
  end times taken from its events (`episode_span`).

For a consumer written later (the learner reads `trajectories.completed`, keyed by task id, so it names
the episode itself; the record's header names the owner's span that published the trajectory):

    from streams.telemetry import metrics, tracing
    with tracing.consumed_span(
        "learner.consume", trajectory.meta.episode_id, {"trialog.learner.version": version},
        headers=record.headers, topic=record.topic, partition=record.partition, offset=record.offset,
    ):
        tracing.annotate(trajectory)  # run, episode, task, task version, step, attempt, policy version
        metrics.staleness(version - trajectory.meta.policy_version)
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from schemas import topics
from streams.telemetry import metrics as _metrics
from streams.telemetry.attributes import (
    POLICY_VERSION,
    RUN,
    Attributes,
    AttributeValue,
    kafka_attributes,
    record_attributes,
)
from streams.telemetry.ids import (
    TRACEPARENT,
    Headers,
    SpanRef,
    traceparent_from_headers,
    version_step_ref,
)

# The span of handling a request, by the request topic's base name (the loops are shared by workers).
SPAN_NAMES = {
    topics.POLICY_REQUESTS.name: "policy.call",
    topics.SANDBOX_REQUESTS.name: "sandbox.exec",
    topics.VERIFY_REQUESTS.name: "verify",
}


LEARNER_STEP = "learner.step"


def span_name(requests_topic: str) -> str:
    return SPAN_NAMES.get(requests_topic, f"handle.{requests_topic}")


class Span(Protocol):
    def set_attributes(self, attributes: Attributes) -> None: ...

    def fail(self, reason: str) -> None:
        """Mark the span as failed (an error status with the reason)."""
        ...


class Tracer(Protocol):
    enabled: bool

    def span(
        self, name: str, episode_id: str | None, attributes: Attributes, parent: SpanRef | None
    ) -> contextlib.AbstractContextManager[Span]:
        """A span made current for the block: under `parent` if given, else under the episode's root
        span (a trace of its own when there is no episode)."""
        ...

    def child(self, name: str, attributes: Attributes) -> contextlib.AbstractContextManager[Span]:
        """A span under the current one; nothing when no span is current."""
        ...

    def current(self) -> SpanRef | None:
        """The current span, if any (what a record sent now names as its parent)."""
        ...

    def annotate(self, attributes: Attributes) -> None:
        """Add attributes to the current span, if any."""
        ...

    def episode_span(self, episode_id: str, start_us: int, end_us: int, attributes: Attributes) -> None:
        """Emit the episode's root span (its ids derived from the episode id) with the given times."""
        ...

    def linked(
        self, name: str, ref: SpanRef, attributes: Attributes, links: Sequence[SpanRef]
    ) -> contextlib.AbstractContextManager[Span]:
        """A span made current for the block, the root of a trace of its own with the ids of `ref`,
        linked to the spans `links` (work that joins many episodes: the learner step they trained)."""
        ...

    def shutdown(self) -> None:
        """Export what is buffered and stop."""
        ...


class _NullSpan:
    def set_attributes(self, attributes: Attributes) -> None:
        pass

    def fail(self, reason: str) -> None:
        pass


class _NullScope:
    """A reusable, stateless context manager: what every hook returns when tracing is off."""

    span = _NullSpan()

    def __enter__(self) -> Span:
        return self.span

    def __exit__(self, *exc: object) -> None:
        return None


NULL_SCOPE = _NullScope()


class NoopTracer:
    enabled = False

    def span(
        self, name: str, episode_id: str | None, attributes: Attributes, parent: SpanRef | None
    ) -> contextlib.AbstractContextManager[Span]:
        return NULL_SCOPE

    def child(self, name: str, attributes: Attributes) -> contextlib.AbstractContextManager[Span]:
        return NULL_SCOPE

    def current(self) -> SpanRef | None:
        return None

    def annotate(self, attributes: Attributes) -> None:
        pass

    def episode_span(self, episode_id: str, start_us: int, end_us: int, attributes: Attributes) -> None:
        pass

    def linked(
        self, name: str, ref: SpanRef, attributes: Attributes, links: Sequence[SpanRef]
    ) -> contextlib.AbstractContextManager[Span]:
        return NULL_SCOPE

    def shutdown(self) -> None:
        pass


_installed: Tracer = NoopTracer()
_lock = threading.Lock()


def install(tracer: Tracer) -> Tracer:
    """Make `tracer` the process's tracer; returns the one it replaces."""
    global _installed
    with _lock:
        previous, _installed = _installed, tracer
    return previous


def tracer() -> Tracer:
    return _installed


# -- hooks called by the workers ---------------------------------------------------------------------------


def consumed_span(
    name: str,
    episode_id: str | bytes | None,
    attributes: Attributes | None = None,
    *,
    headers: Headers = None,
    topic: str | None = None,
    partition: int = -1,
    offset: int = -1,
) -> contextlib.AbstractContextManager[Span]:
    """The span of handling one consumed record (current for the block), under the sender's span named by
    the record's `traceparent` header or else the episode's root; with `topic` the record's topic,
    partition and offset are attributes. The block's duration also goes to the stage-latency metric
    under `name`. Costs one check when both tracing and metrics are off."""
    active = _installed
    timed = _metrics.metrics().enabled
    if not active.enabled and not timed:
        return NULL_SCOPE
    if isinstance(episode_id, bytes):
        episode_id = episode_id.decode("utf-8", "replace")
    if not active.enabled:
        return _Timed(name, NULL_SCOPE)
    merged: dict[str, AttributeValue] = dict(attributes or {})
    if topic is not None:
        merged.update(kafka_attributes(topic, partition, offset))
    scope = active.span(name, episode_id, merged, traceparent_from_headers(headers))
    return _Timed(name, scope) if timed else scope


def span(
    name: str, episode_id: str | None, attributes: Attributes | None = None
) -> contextlib.AbstractContextManager[Span]:
    """A span for work on an episode that no record started (the scheduler starting it, a timer)."""
    return consumed_span(name, episode_id, attributes)


def child_span(name: str, attributes: Attributes | None = None) -> contextlib.AbstractContextManager[Span]:
    """A span under the current one (e.g. `sandbox.snapshot` inside `sandbox.exec`), timed like
    `consumed_span`; nothing when no span is current."""
    active = _installed
    timed = _metrics.metrics().enabled
    if not active.enabled and not timed:
        return NULL_SCOPE
    scope = active.child(name, attributes or {}) if active.enabled else NULL_SCOPE
    return _Timed(name, scope) if timed else scope


def annotate(value: object) -> None:
    """Add the episode identity a decoded record carries (run, episode, task, step...) to the current span."""
    active = _installed
    if active.enabled:
        active.annotate(record_attributes(value))


def outgoing_headers(forward: Headers = None) -> list[tuple[str, bytes]]:
    """Headers for a record sent now: the current span as `traceparent`; with no current span, the
    `traceparent` among `forward` (the consumed record's), so a chain is never cut; else none."""
    current = _installed.current()
    if current is not None:
        return [(TRACEPARENT, current.traceparent().encode())]
    found = traceparent_from_headers(forward)
    return [] if found is None else [(TRACEPARENT, found.traceparent().encode())]


def episode_span(episode_id: str, start_us: int, end_us: int, attributes: Attributes | None = None) -> None:
    active = _installed
    if active.enabled:
        active.episode_span(episode_id, start_us, end_us, attributes or {})


def learner_step_span(
    run_id: str, version: int, episode_ids: Sequence[str], attributes: Attributes | None = None
) -> contextlib.AbstractContextManager[Span]:
    """The span of the training step that makes `version`: a trace of its own (ids from the run and the
    version, `ids.version_step_ref`) linked to the root span of every episode it trains on, so one click
    goes from a policy version to the episodes behind it. Timed like `consumed_span`."""
    active = _installed
    timed = _metrics.metrics().enabled
    if not active.enabled and not timed:
        return NULL_SCOPE
    scope: contextlib.AbstractContextManager[Span] = NULL_SCOPE
    if active.enabled:
        merged: dict[str, AttributeValue] = {RUN: run_id, POLICY_VERSION: version, **(attributes or {})}
        links = [SpanRef.episode_root(episode) for episode in episode_ids]
        scope = active.linked(LEARNER_STEP, version_step_ref(run_id, version), merged, links)
    return _Timed(LEARNER_STEP, scope) if timed else scope


class _Timed:
    """Wraps a scope and records its duration in the stage-latency histogram."""

    __slots__ = ("name", "scope", "started")

    def __init__(self, name: str, scope: contextlib.AbstractContextManager[Span]) -> None:
        self.name = name
        self.scope = scope
        self.started = 0.0

    def __enter__(self) -> Span:
        self.started = time.perf_counter()
        return self.scope.__enter__()

    def __exit__(self, *exc: Any) -> None:
        try:
            self.scope.__exit__(*exc)
        finally:
            _metrics.stage_seconds(self.name, time.perf_counter() - self.started)


@contextlib.contextmanager
def installed(tracer_: Tracer) -> Iterator[Tracer]:
    """`tracer_` installed for the block (tests)."""
    previous = install(tracer_)
    try:
        yield tracer_
    finally:
        install(previous)
