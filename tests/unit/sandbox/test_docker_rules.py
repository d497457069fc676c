"""The Docker backend's decisions that need no engine: stream framing, timeouts, OOM counters."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from sandbox_agent.docker_exec import ByteSink, FrameDemux, judged_timed_out, oom_kill_count


def frame(stream: int, payload: bytes) -> bytes:
    return struct.pack(">BxxxI", stream, len(payload)) + payload


@given(
    st.lists(st.tuples(st.sampled_from([1, 2]), st.binary(min_size=1, max_size=50)), max_size=10),
    st.lists(st.integers(1, 30), min_size=1, max_size=20),
)
def test_frames_split_anywhere_come_out_whole_per_stream(
    frames: list[tuple[int, bytes]], cuts: list[int]
) -> None:
    wire = b"".join(frame(stream, payload) for stream, payload in frames)
    demux, got = FrameDemux(), {1: b"", 2: b""}
    position = 0
    for size in cuts * (len(wire) // max(sum(cuts), 1) + 1):
        for stream, payload in demux.feed(wire[position : position + size]):
            got[stream] += payload
        position += size
    for stream, payload in demux.feed(wire[position:]):
        got[stream] += payload
    for stream in (1, 2):
        assert got[stream] == b"".join(payload for s, payload in frames if s == stream)


def test_a_byte_sink_keeps_up_to_its_cap_and_counts_the_rest() -> None:
    sink = ByteSink(5)
    sink.write(b"abc")
    assert not sink.overflowed
    sink.write(b"defg")
    assert (bytes(sink.data), sink.total, sink.overflowed) == (b"abcde", 7, True)


def test_a_timeout_is_a_kill_at_or_after_the_limit_or_streams_still_open() -> None:
    assert judged_timed_out(137, 2.01, 2.0)
    assert judged_timed_out(None, 7.0, 2.0)
    assert not judged_timed_out(137, 0.5, 2.0)  # killed early: the OOM killer or the command itself
    assert not judged_timed_out(0, 2.5, 2.0)  # finished, a little late


def test_oom_kills_are_read_from_cgroup_v1_and_v2_counters() -> None:
    v1 = b"oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"
    v2 = b"low 0\nhigh 0\nmax 4\noom 2\noom_kill 2\noom_group_kill 0\n"
    assert (oom_kill_count(v1), oom_kill_count(v2), oom_kill_count(b"")) == (3, 2, 0)
