"""Non-UTF-8 file names on the wire: lossless both ways, printable, and old records read as they were."""

from __future__ import annotations

import os

from hypothesis import given
from hypothesis import strategies as st

from ops.replay import build_timeline, render
from schemas.actions import Submit
from schemas.codec import default_codec
from schemas.common import Verdict
from schemas.events import RewardAssigned
from schemas.fold import fold
from schemas.fsnames import from_wire, to_wire
from schemas.state import EpisodeState
from schemas.testing import EpisodeScript

# A file name is any bytes but NUL ('/' separates the parts of a path).
NAMES = st.binary(min_size=1, max_size=40).filter(lambda raw: b"\0" not in raw)
FORGED = os.fsdecode(b"tests/\xff.py")


@given(NAMES)
def test_every_name_survives_the_wire_form_and_is_valid_unicode(raw: bytes) -> None:
    wire = to_wire(os.fsdecode(raw))
    wire.encode("utf-8")  # strict: what an Avro string and a terminal accept
    assert os.fsencode(from_wire(wire)) == raw
    assert to_wire(from_wire(wire)) == wire


def test_the_wire_form_is_the_name_itself_when_it_is_utf8_without_backslashes() -> None:
    assert to_wire("tests/test_café.py") == "tests/test_café.py"
    assert to_wire(FORGED) == "tests/\\xff.py"
    assert to_wire("a\\xff") == "a\\\\xff"  # a literal backslash cannot be mistaken for an escape


def test_names_written_before_the_wire_form_read_unchanged() -> None:
    """Old records could not hold a non-UTF-8 name; a lone backslash in one is kept as written."""
    assert from_wire("tests/test_a.py") == "tests/test_a.py"
    assert from_wire("dir\\file.py") == "dir\\file.py"


def _tampered_episode(paths: tuple[str, ...]) -> EpisodeScript:
    script = EpisodeScript(default_codec())
    script.start()
    script.act(Submit())
    script.reward(-1.0, Verdict.TAMPERED, 0, 3, (), paths)
    return script


def test_a_tampered_reward_naming_non_utf8_paths_encodes_and_decodes_exactly() -> None:
    paths = ("calc.py", FORGED, os.fsdecode(b"\xc3(\\x"))
    script = _tampered_episode(paths)  # encodes every event (the script logs bytes)
    codec = default_codec()
    (reward,) = [event for event in script.events if isinstance(event, RewardAssigned)]
    decoded = codec.decode(codec.encode(reward))
    assert decoded == reward and isinstance(decoded, RewardAssigned) and decoded.tampered_paths == paths
    assert codec.encode(decoded) == codec.encode(reward)  # byte-identical: the chain still holds


def test_the_episode_snapshot_embedding_such_a_reward_round_trips() -> None:
    codec = default_codec()
    state = fold(_tampered_episode((FORGED,)).entries)
    assert state.reward is not None and state.reward.tampered_paths == (FORGED,)
    again = codec.decode(codec.encode(state))
    assert isinstance(again, EpisodeState) and again == state


def test_replay_renders_an_episode_with_such_a_reward() -> None:
    script = _tampered_episode((FORGED,))
    render(build_timeline("ep", script.events, 200)).encode("utf-8")
