"""Trace and span ids derived from an episode id, and the W3C `traceparent` header (pure functions).

Every process that touches an episode computes the same trace id and the same root span id from the
episode id alone (sha256), so spans from the scheduler, the owner and every worker land in one trace per
episode and can hang under one root span without anyone coordinating or storing ids. The root span itself
is emitted once, by the episode's owner when the episode ends (`tracing.Tracer.episode_span`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

TRACEPARENT = "traceparent"
_VERSION = "00"
_SAMPLED = 0x01

Headers = Iterable[tuple[str, bytes]] | Mapping[str, bytes] | None


def _digest(episode_id: str) -> bytes:
    return hashlib.sha256(f"trialog-episode:{episode_id}".encode()).digest()


def version_step_ref(run_id: str, version: int) -> SpanRef:
    """The span of the learner step that made `version` of `run_id`'s policy: a trace of its own whose
    ids anyone can derive (a report links a version to its trace without asking Jaeger)."""
    digest = hashlib.sha256(f"trialog-policy-version:{run_id}:{version}".encode()).digest()
    return SpanRef(int.from_bytes(digest[:16], "big") or 1, int.from_bytes(digest[16:24], "big") or 1)


def episode_trace_id(episode_id: str) -> int:
    """The 128-bit trace id of an episode (never 0, which W3C reserves for 'invalid')."""
    return int.from_bytes(_digest(episode_id)[:16], "big") or 1


def episode_root_span_id(episode_id: str) -> int:
    """The 64-bit span id of an episode's root span (never 0)."""
    return int.from_bytes(_digest(episode_id)[16:24], "big") or 1


@dataclass(frozen=True, slots=True)
class SpanRef:
    """Where a span sits: its trace and its own id (what a child names as its parent)."""

    trace_id: int
    span_id: int
    sampled: bool = True

    @classmethod
    def episode_root(cls, episode_id: str) -> SpanRef:
        return cls(episode_trace_id(episode_id), episode_root_span_id(episode_id))

    def traceparent(self) -> str:
        flags = _SAMPLED if self.sampled else 0
        return f"{_VERSION}-{self.trace_id:032x}-{self.span_id:016x}-{flags:02x}"


def parse_traceparent(value: str | bytes | None) -> SpanRef | None:
    """The span a W3C `traceparent` names, or None when it is absent or malformed."""
    if value is None:
        return None
    if isinstance(value, bytes):
        try:
            value = value.decode("ascii")
        except UnicodeDecodeError:
            return None
    parts = value.strip().split("-")
    if len(parts) < 4 or parts[0] == "ff" or len(parts[0]) != 2:
        return None
    version, trace, span, flags = parts[:4]
    if len(trace) != 32 or len(span) != 16 or len(flags) != 2 or (version == _VERSION and len(parts) != 4):
        return None
    try:
        trace_id, span_id, flag_bits = int(trace, 16), int(span, 16), int(flags, 16)
        int(version, 16)
    except ValueError:
        return None
    if trace_id == 0 or span_id == 0:
        return None
    return SpanRef(trace_id, span_id, bool(flag_bits & _SAMPLED))


def traceparent_from_headers(headers: Headers) -> SpanRef | None:
    """The `traceparent` among Kafka record headers ([(key, bytes)], as kafka-python and Faust give
    them; a mapping also works), or None."""
    if not headers:
        return None
    items = headers.items() if isinstance(headers, Mapping) else headers
    for key, value in items:
        if key == TRACEPARENT:
            return parse_traceparent(value)
    return None
