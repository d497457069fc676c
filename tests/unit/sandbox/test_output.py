from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sandbox_agent.output import BoundedOutput, drop_marker


def test_output_under_the_cap_is_kept_whole() -> None:
    out = BoundedOutput(10)
    out.write(b"abc")
    out.write(b"defg")
    assert (out.text(), out.dropped, out.total) == ("abcdefg", 0, 7)


def test_output_over_the_cap_keeps_head_and_tail_and_says_how_much_was_dropped() -> None:
    out = BoundedOutput(10)
    for chunk in (b"HEAD-", b"middle" * 100, b"-TAIL"):
        out.write(chunk)
    assert out.dropped == 610 - 10
    assert out.text() == "HEAD-" + drop_marker(600) + "-TAIL"


def test_a_character_split_by_chunks_is_not_mangled_when_nothing_is_dropped() -> None:
    out = BoundedOutput(10)
    data = "é€".encode()
    out.write(data[:5])
    out.write(data[5:])
    assert out.text() == "é€"


def test_a_zero_cap_keeps_nothing_but_the_marker() -> None:
    out = BoundedOutput(0)
    out.write(b"abc")
    assert out.text() == drop_marker(3)


@given(st.integers(0, 64), st.lists(st.binary(max_size=40), max_size=20))
def test_kept_plus_dropped_is_everything_and_the_ends_survive(limit: int, chunks: list[bytes]) -> None:
    out = BoundedOutput(limit)
    for chunk in chunks:
        out.write(chunk)
    data = b"".join(chunks)
    assert out.total == len(data)
    assert out.dropped == max(0, len(data) - limit)
    if out.dropped == 0:
        assert out.text() == data.decode("utf-8", "replace")
    else:
        head, tail = limit - limit // 2, limit // 2
        expected_tail = data[len(data) - tail :] if tail else b""
        assert out.text() == (
            data[:head].decode("utf-8", "replace")
            + drop_marker(out.dropped)
            + expected_tail.decode("utf-8", "replace")
        )
