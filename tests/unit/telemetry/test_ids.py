"""Trace ids derived from episode ids, and W3C traceparent headers."""

from __future__ import annotations

import hashlib

import pytest

from streams.telemetry.ids import (
    SpanRef,
    episode_root_span_id,
    episode_trace_id,
    parse_traceparent,
    traceparent_from_headers,
)


def test_ids_are_the_sha256_of_the_episode_id_so_every_process_derives_the_same() -> None:
    digest = hashlib.sha256(b"trialog-episode:ep-42").digest()
    assert episode_trace_id("ep-42") == int.from_bytes(digest[:16], "big")
    assert episode_root_span_id("ep-42") == int.from_bytes(digest[16:24], "big")
    assert episode_trace_id("ep-42") == episode_trace_id("ep-42")
    assert 0 < episode_trace_id("ep-42") < 2**128 and 0 < episode_root_span_id("ep-42") < 2**64


def test_different_episodes_get_different_traces() -> None:
    traces = {episode_trace_id(f"ep-{i}") for i in range(1000)}
    roots = {episode_root_span_id(f"ep-{i}") for i in range(1000)}
    assert len(traces) == 1000 and len(roots) == 1000


def test_a_traceparent_round_trips() -> None:
    root = SpanRef.episode_root("ep-1")
    header = root.traceparent()
    assert header == f"00-{episode_trace_id('ep-1'):032x}-{episode_root_span_id('ep-1'):016x}-01"
    assert parse_traceparent(header) == root
    assert parse_traceparent(header.encode()) == root
    assert parse_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00") == SpanRef(
        0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, sampled=False
    )


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "garbage",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",  # no flags
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",  # invalid trace id
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",  # invalid span id
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333-01",  # short span id
        "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",  # forbidden version
        "00-0af7651916cd43dd8448eb211c80319z-b7ad6b7169203331-01",  # not hex
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",  # version 00 has 4 parts
        b"\xff\xfe",
    ],
)
def test_malformed_traceparents_are_ignored(header: str | bytes | None) -> None:
    assert parse_traceparent(header) is None


def test_the_traceparent_is_found_among_kafka_headers() -> None:
    header = SpanRef.episode_root("ep-7").traceparent().encode()
    assert traceparent_from_headers([("other", b"x"), ("traceparent", header)]) == SpanRef.episode_root(
        "ep-7"
    )
    assert traceparent_from_headers({"traceparent": header}) == SpanRef.episode_root("ep-7")
    assert traceparent_from_headers([("other", b"x")]) is None
    assert traceparent_from_headers(None) is None and traceparent_from_headers([]) is None
