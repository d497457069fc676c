"""Replaying a logged episode: decode, fold and check every record, and say exactly where a log goes wrong.

Replay is stricter than the live fold in one respect: a duplicate in the log of record must repeat an
accepted record byte for byte (the owner re-appends what it already wrote), so an altered copy of an
earlier event is reported, not silently ignored.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from schemas.chain import digest
from schemas.codec import Codec, DecodeError
from schemas.common import GENESIS_HASH
from schemas.events import EPISODE_EVENT_TYPES, EpisodeEvent
from schemas.fold import FoldError, apply
from schemas.logfile import LogFormatError, iter_log
from schemas.state import EpisodeState


class ReplayError(Exception):
    """Replay stopped at record `index`; `code` says why (a DecodeReason, a FoldError code, or one below)."""

    def __init__(self, index: int, code: str, message: str) -> None:
        super().__init__(f"record #{index}: {code}: {message}")
        self.index = index
        self.code = code


def accepted_digests(state: EpisodeState) -> set[str]:
    """Digests of every event folded into `state`: each event's digest is its successor's prev_hash, and the
    last one's is the head. Lets a replay that starts from a snapshot still check duplicates."""
    events: list[EpisodeEvent | None] = [state.started, state.pending_action, state.reward, state.outcome]
    events += [r.action for r in state.history] + [r.result for r in state.history]
    known = {e.meta.prev_hash for e in events if e is not None and e.meta.prev_hash != GENESIS_HASH}
    if state.events_applied:
        known.add(state.head_hash)
    return known


def replay(
    records: Iterable[bytes],
    codec: Codec,
    state: EpisodeState | None = None,
    expected_head: str | None = None,
) -> EpisodeState:
    """Fold the logged bytes of one episode from `state` (or the start) and return the final state.

    With `expected_head` (the chain head recorded elsewhere, e.g. in a golden file or the owner's table),
    a change to the last event is caught too, not only changes that break a later link.
    """
    current = EpisodeState() if state is None else state
    known = accepted_digests(current)
    last_accepted = -1
    for index, data in enumerate(records):
        own = digest(data)
        try:
            event = codec.decode(data)
        except DecodeError as err:
            raise ReplayError(index, err.reason.value, err.detail) from err
        if not isinstance(event, EPISODE_EVENT_TYPES):
            raise ReplayError(index, "not_an_episode_event", type(event).__name__)
        try:
            following = apply(current, event, own)
        except FoldError as err:
            raise ReplayError(index, err.code, err.message) from err
        if following is current:
            if own not in known:
                raise ReplayError(
                    index, "altered_duplicate", "a duplicate that differs from the recorded event"
                )
            continue
        current, last_accepted = following, index
        known.add(own)
    if expected_head is not None and current.head_hash != expected_head:
        raise ReplayError(
            last_accepted,
            "head_mismatch",
            f"the log ends at {current.head_hash[:16]}..., expected {expected_head[:16]}...",
        )
    return current


def _framed(data: bytes) -> Iterator[bytes]:
    try:
        yield from iter_log(data)
    except LogFormatError as err:
        raise ReplayError(err.index, "bad_framing", str(err)) from err


def replay_file(path: Path, codec: Codec, expected_head: str | None = None) -> EpisodeState:
    """`replay` over a length-prefixed log file, record by record, so the first problem in log order is
    the one reported, whether it is broken framing or a bad record."""
    return replay(_framed(path.read_bytes()), codec, expected_head=expected_head)
