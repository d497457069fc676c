"""Links from the report to an episode's trace in Jaeger.

The trace id of an episode is derived from its id, so that any process (and this report) finds the same
trace without asking anyone: the first 16 bytes (32 hex characters) of sha256 over the episode id in
UTF-8. `ops.telemetry.tracing` must derive it the same way (the two are kept in agreement by a test there).
"""

from __future__ import annotations

import hashlib
from urllib.parse import quote

DEFAULT_QUERY_BASE = "http://127.0.0.1:16686"


def trace_id(episode_id: str) -> str:
    return hashlib.sha256(episode_id.encode("utf-8")).hexdigest()[:32]


def trace_url(episode_id: str, query_base: str = DEFAULT_QUERY_BASE) -> str:
    """The Jaeger UI page of the episode's trace."""
    return f"{query_base.rstrip('/')}/trace/{quote(trace_id(episode_id))}"
