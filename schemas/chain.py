"""The tamper-evident chain: every episode event names the sha256 of the previous event's exact bytes.

`verify_chain` is the audit view: it reads a log (many episodes interleaved, as on a partition) and reports
the first record whose link is broken. The fold checks the same link as it applies events.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from schemas.codec import Codec, DecodeError
from schemas.common import GENESIS_HASH
from schemas.events import EPISODE_EVENT_TYPES


def digest(data: bytes) -> str:
    """The chain hash of one logged record: sha256 (hex) of its bytes exactly as written."""
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True, slots=True)
class ChainBreak:
    """The first record of a log whose link does not hold."""

    index: int  # position of the record in the log
    episode_id: str
    expected: str  # what prev_hash should have been (the episode's head), or a reason for undecodable records
    found: str
    reason: str

    def __str__(self) -> str:
        return f"record #{self.index} (episode {self.episode_id}): {self.reason}"


@dataclass(frozen=True, slots=True)
class ChainReport:
    records: int
    duplicates: int  # records whose bytes repeat an earlier record of the same episode (redelivery)
    heads: dict[str, str]  # episode id -> digest of its last record
    first_break: ChainBreak | None

    @property
    def ok(self) -> bool:
        return self.first_break is None


def verify_chain(records: Iterable[bytes], codec: Codec, heads: dict[str, str] | None = None) -> ChainReport:
    """Check the prev_hash links of the episode events in `records`, in log order, and report the first break.

    `heads` gives known chain heads to continue from (e.g. from a snapshot); an episode not in it must start
    from the genesis hash. Byte-identical repeats of an earlier record are redeliveries and are skipped.
    """
    heads = dict(heads or {})
    seen: dict[str, set[str]] = {}
    count = duplicates = 0
    for index, data in enumerate(records):
        count += 1
        try:
            event = codec.decode(data)
        except DecodeError as err:
            return ChainReport(
                count, duplicates, heads, ChainBreak(index, "?", "", "", f"undecodable: {err}")
            )
        if not isinstance(event, EPISODE_EVENT_TYPES):
            return ChainReport(
                count,
                duplicates,
                heads,
                ChainBreak(index, "?", "", "", f"{type(event).__name__} is not an episode event"),
            )
        meta, own = event.meta, digest(data)
        episode_seen = seen.setdefault(meta.episode_id, set())
        if own in episode_seen:
            duplicates += 1
            continue
        head = heads.get(meta.episode_id, GENESIS_HASH)
        if meta.prev_hash != head:
            reason = f"prev_hash {meta.prev_hash[:16]}... does not match the previous event {head[:16]}..."
            return ChainReport(
                count, duplicates, heads, ChainBreak(index, meta.episode_id, head, meta.prev_hash, reason)
            )
        episode_seen.add(own)
        heads[meta.episode_id] = own
    return ChainReport(count, duplicates, heads, None)
