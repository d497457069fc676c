"""Links from the report to an episode's trace in Jaeger.

The trace id of an episode is derived from its id alone (`streams.telemetry.ids.episode_trace_id`, the one
derivation every traced process uses), so the report finds the episode's trace without asking anyone.
"""

from __future__ import annotations

from urllib.parse import quote

from streams.telemetry.ids import episode_trace_id

DEFAULT_QUERY_BASE = "http://127.0.0.1:16686"


def trace_id(episode_id: str) -> str:
    """The episode's trace id as Jaeger shows it: 32 lowercase hex characters."""
    return f"{episode_trace_id(episode_id):032x}"


def trace_url(episode_id: str, query_base: str = DEFAULT_QUERY_BASE) -> str:
    """The Jaeger UI page of the episode's trace."""
    return f"{query_base.rstrip('/')}/trace/{quote(trace_id(episode_id))}"
