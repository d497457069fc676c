"""Cleaning the object store: delete the blobs that no record still needed names (mark, then sweep).

Content addressing never overwrites and never forgets: over a weeks-long run every step's new files, every
large output, every verifier report and every weights file stays in the store. Most of it stops mattering
once its episode is past auditing; some of it must outlive any window. This module decides which is which
from the log itself, so that the store and the topics cannot disagree.

Live (marked), on every run's topics the broker holds:
- every `BlobRef` and every snapshot id (its manifest and each file the manifest lists) named by a record
  written within the audit window (`--window-days`). An episode older than the window is past auditing:
  `audit --recheck` or `reproduce` of it reports its snapshots missing afterwards, which is what a window
  means;
- everything the `tasks` topics name, whatever its age: the task set in force (bundles, initial snapshots);
- each run's newest `PolicyPublished`, whatever its age: the weights a restarted rollout worker loads.

Young (kept): a blob written within the grace period (`--grace-hours`), named or not. A snapshot is stored
before the StepExecuted that names it is produced, and weights before their PolicyPublished: the grace
must exceed the longest such gap (the default, a day, exceeds any step's timeout by far). A blob put again
while it exists gets its modification time refreshed by the local store, so a file a new snapshot reuses
counts as young too.

Reused meanwhile (kept): a snapshot taken while the clean-up runs may reuse an old blob that no record in the
window names yet (the S3 store cannot refresh an object's date when it is reused, and the local store's
refresh can come between the listing and the deletion). Before deleting, `--delete` waits `--settle-seconds`
(longer than a snapshot takes from finding a file stored to the record naming it) and reads every topic
again from when the mark began: whatever those records name is kept.

A live hash keeps its blob under every media type it is stored with. Everything else is deleted, and so
are writers' temporary files older than the grace (a writer killed between its write and its rename).
Files whose names are not the store's are never touched.

The mark reads every topic to its end before anything is deleted, and any read that fails stops the whole
clean-up: a partial mark would delete live blobs. A manifest that cannot be read is reported (its files
stay only if something else names them): its snapshot was broken before the clean-up ran.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ops.log_defaults import DEFAULT_GC_GRACE_HOURS, DEFAULT_GC_SETTLE_S, DEFAULT_GC_WINDOW_DAYS
from sandbox_agent.manifest import SnapshotId
from sandbox_agent.snapshots import SnapshotStore
from schemas.blobs import TYPED_FOLDER, BlobIntegrityError, BlobRef, ObjectStore
from schemas.topics import POLICY_VERSIONS, TASKS, TOPICS

if TYPE_CHECKING:  # obstore is loaded only when an S3 store is cleaned
    from schemas.s3_store import S3ObjectStore

_SHA256 = re.compile(r"[0-9a-f]{64}")
_BLOB_FIELDS = frozenset({"sha256", "size", "media_type"})
TEMP_PREFIX = ".tmp-"  # LocalObjectStore's temporary names
# The second read starts this long before the mark began: a record's broker timestamp may lag the clock here.
MARK_SKEW_MS = 60_000


# -- what records name ---------------------------------------------------------------------------------


def named_in(value: object) -> Iterator[BlobRef | SnapshotId]:
    """Every blob reference and snapshot id anywhere in a decoded record (any schema, any depth).

    Walking the decoded record instead of listing fields keeps the clean-up right when a schema gains a
    reference: a new field that holds a `BlobRef` is found without a change here."""
    if isinstance(value, Mapping):
        if _is_blob_ref(value):
            yield BlobRef.from_record(value)
        for item in value.values():
            yield from named_in(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from named_in(item)
    elif isinstance(value, str) and value.startswith("snap-"):
        snapshot_id = _snapshot_id(value)
        if snapshot_id is not None:
            yield snapshot_id


def _snapshot_id(text: str) -> SnapshotId | None:
    """`text` as a snapshot id, in SnapshotId's own spelling; None for text that only starts like one."""
    try:
        return SnapshotId.parse(text)
    except ValueError:
        return None


def _is_blob_ref(value: Mapping[str, Any]) -> bool:
    sha256, size = value.get("sha256"), value.get("size")
    return (
        value.keys() >= _BLOB_FIELDS
        and isinstance(sha256, str)
        and _SHA256.fullmatch(sha256) is not None
        and isinstance(size, int)
    )


@dataclass
class Marker:
    """Collects what the records name, applying the window and the always-live rules (pure: the caller
    reads the topics and passes each decoded record with its topic's base name, run and timestamp)."""

    window_start_ms: int
    blobs: set[BlobRef] = field(default_factory=set)
    snapshots: set[SnapshotId] = field(default_factory=set)
    records: int = 0
    _newest_policy: dict[str, tuple[int, tuple[BlobRef | SnapshotId, ...]]] = field(default_factory=dict)

    def add(self, base: str, run: str, timestamp_ms: int, record: Mapping[str, Any]) -> None:
        self.records += 1
        named = tuple(named_in(record))
        if base == POLICY_VERSIONS.name:
            newest = self._newest_policy.get(run)
            if newest is None or timestamp_ms >= newest[0]:
                self._newest_policy[run] = (timestamp_ms, named)
        if base == TASKS.name or timestamp_ms >= self.window_start_ms:
            self._mark(named)

    @classmethod
    def whole_log(cls) -> Marker:
        """A marker without a window: every record's references count (a run bundle's copy)."""
        return cls(window_start_ms=-(2**63))

    def _mark(self, named: Iterable[BlobRef | SnapshotId]) -> None:
        for item in named:
            if isinstance(item, SnapshotId):
                self.snapshots.add(item)
            else:
                self.blobs.add(item)

    def live(self, snapshots: SnapshotStore) -> tuple[set[str], list[str]]:
        """The live blob hashes (snapshots expanded through their manifests) and the snapshot ids whose
        manifest could not be read."""
        refs, broken = self.live_refs(snapshots)
        return {ref.sha256 for ref in refs}, broken

    def live_refs(self, snapshots: SnapshotStore) -> tuple[set[BlobRef], list[str]]:
        """`live` with each blob's media type (what a copy of the store needs): every marked reference,
        each snapshot's manifest and each file it lists; and the snapshot ids whose manifest could not be
        read."""
        for _, named in self._newest_policy.values():
            self._mark(named)
        live = set(self.blobs)
        broken = []
        for snapshot_id in sorted(self.snapshots, key=str):
            live.add(snapshot_id.manifest_ref)
            try:
                manifest = snapshots.load(snapshot_id)
            except (BlobIntegrityError, ValueError):
                broken.append(str(snapshot_id))
                continue
            live.update(entry.blob for entry in manifest.files)
        return live, broken


# -- what the store holds, and what goes -----------------------------------------------------------------


@dataclass(frozen=True)
class StoredBlob:
    name: str  # the sha256, or a temporary file's name
    location: str  # the file's path, or the object's key under the store's prefix
    size: int
    mtime_s: float

    @property
    def temporary(self) -> bool:
        return self.name.startswith(TEMP_PREFIX)


@dataclass(frozen=True)
class SweepPlan:
    delete: tuple[StoredBlob, ...]
    live: int  # stored blobs that a record names
    young: int  # stored, unnamed, within the grace period

    @property
    def bytes_freed(self) -> int:
        return sum(blob.size for blob in self.delete)


def plan_sweep(stored: Iterable[StoredBlob], live: set[str], now_s: float, grace_s: float) -> SweepPlan:
    """Which stored blobs to delete: not named by a live record and older than the grace period."""
    delete, named, young = [], 0, 0
    for blob in stored:
        if not blob.temporary and blob.name in live:
            named += 1
        elif now_s - blob.mtime_s < grace_s:
            young += 1
        else:
            delete.append(blob)
    return SweepPlan(tuple(sorted(delete, key=lambda b: b.name)), named, young)


class StoredBlobs(Protocol):
    """What a store holds, as the clean-up lists and deletes it: a folder's files or a bucket's objects."""

    @property
    def where(self) -> str: ...

    def stored(self) -> Iterator[StoredBlob]: ...

    def delete(self, blob: StoredBlob) -> bool: ...


class BlobFolder:
    """The files of a `LocalObjectStore` (`<root>/<sha[:2]>/<sha>`, and the same under each folder of
    `<root>/typed/`): listing and deleting them."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @property
    def where(self) -> str:
        return str(self.root)

    def stored(self) -> Iterator[StoredBlob]:
        typed = self.root / TYPED_FOLDER
        kinds = sorted(typed.iterdir()) if typed.is_dir() and not typed.is_symlink() else []
        for folder in (self.root, *(kind for kind in kinds if kind.is_dir() and not kind.is_symlink())):
            yield from self._fanned(folder)

    @staticmethod
    def _fanned(folder: Path) -> Iterator[StoredBlob]:
        if not folder.is_dir():
            return
        for fan in sorted(folder.iterdir()):
            if not (fan.is_dir() and not fan.is_symlink() and re.fullmatch(r"[0-9a-f]{2}", fan.name)):
                continue
            for path in sorted(fan.iterdir()):
                ours = path.name.startswith(TEMP_PREFIX) or (
                    _SHA256.fullmatch(path.name) is not None and path.name.startswith(fan.name)
                )
                info = path.lstat()
                if ours and path.is_file() and not path.is_symlink():
                    yield StoredBlob(path.name, str(path), info.st_size, info.st_mtime)

    def delete(self, blob: StoredBlob) -> bool:
        try:
            os.unlink(blob.location)
        except FileNotFoundError:
            return False
        return True


# The keys of an S3 store, as `S3ObjectStore.key_of` makes them.
_KEY = re.compile(r"(?:typed/[^/]+/)?([0-9a-f]{2})/([0-9a-f]{64})")


class BucketBlobs:
    """The objects of an `S3ObjectStore` under its prefix: listing (the store's own keys only) and
    deleting them. An object's date is its last PUT (S3 writes have no temporary names)."""

    def __init__(self, store: S3ObjectStore) -> None:
        self.store = store

    @property
    def where(self) -> str:
        return self.store.settings.url

    def stored(self) -> Iterator[StoredBlob]:
        for key, size, modified_s in self.store.listing():
            found = _KEY.fullmatch(key)
            if found is not None and found.group(2).startswith(found.group(1)):
                yield StoredBlob(found.group(2), key, size, modified_s)

    def delete(self, blob: StoredBlob) -> bool:
        self.store.delete_key(blob.location)
        return True


# -- reading the log -------------------------------------------------------------------------------------


def run_topics(names: Iterable[str]) -> list[tuple[str, str, str]]:
    """(topic, run, base name) for each of `names` that is a trialog topic of some run."""
    bases = {topic.name for topic in TOPICS}
    found = []
    for name in sorted(names):
        for base in bases:
            if name == base:
                found.append((name, "", base))
            elif name.endswith(f".{base}"):
                found.append((name, name[: -len(base) - 1], base))
    return found


@dataclass(frozen=True)
class CleanupReport:
    topics: int
    records: int
    undecodable: int
    live: int
    young: int
    deleted: int
    bytes_freed: int
    broken_snapshots: tuple[str, ...]
    applied: bool  # False: a preview (nothing deleted)
    seconds: float
    reused: int = 0  # old and unnamed at the mark, named by a record written since: kept

    def to_json(self) -> dict[str, Any]:
        return {
            "applied": self.applied,
            "topics": self.topics,
            "records": self.records,
            "undecodable": self.undecodable,
            "live": self.live,
            "young": self.young,
            "deleted": self.deleted,
            "reused": self.reused,
            "bytes_freed": self.bytes_freed,
            "broken_snapshots": list(self.broken_snapshots),
            "seconds": round(self.seconds, 3),
        }


RecordSource = Callable[[Sequence[str], int | None], Iterator[tuple[str, int, bytes | None]]]
"""Reads topics to their end: (topic, timestamp ms, value) for each record, from the first record at or
after the given time (None: from the beginning)."""


def collect_garbage(
    topic_names: Iterable[str],
    read: RecordSource,
    store: ObjectStore,
    blobs: StoredBlobs,
    *,
    window_s: float = DEFAULT_GC_WINDOW_DAYS * 86400,
    grace_s: float = DEFAULT_GC_GRACE_HOURS * 3600,
    settle_s: float = DEFAULT_GC_SETTLE_S,
    apply: bool = False,
    now_s: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> CleanupReport:
    """Mark from every trialog topic among `topic_names`, then delete (when `apply`) what is not live:
    after `settle_s`, minus whatever the records written since the mark began name (see the module doc)."""
    started = time.monotonic()
    now = now_s()
    marker = Marker(window_start_ms=int((now - window_s) * 1000))
    topics = run_topics(topic_names)
    # The always-live topics from their beginning; the others only within the window.
    whole = [topic for topic, _, base in topics if base in (TASKS.name, POLICY_VERSIONS.name)]
    windowed = [topic for topic, _, base in topics if topic not in whole]
    undecodable = _mark(marker, topics, read, [(whole, None), (windowed, marker.window_start_ms)])
    live, broken = marker.live(SnapshotStore(store))
    # Listed after the mark: a blob written during the mark is young, never deleted for being unseen.
    plan = plan_sweep(blobs.stored(), live, now_s(), grace_s)
    reused = 0
    if apply and plan.delete:
        sleep(settle_s)
        # Records written since the mark began (their broker timestamps, less a margin for clock skew).
        since_ms = int(now * 1000) - MARK_SKEW_MS
        undecodable += _mark(marker, topics, read, [([topic for topic, _, _ in topics], since_ms)])
        live, broken = marker.live(SnapshotStore(store))
        still = tuple(blob for blob in plan.delete if blob.temporary or blob.name not in live)
        reused = len(plan.delete) - len(still)
        plan = replace(plan, delete=still)
    deleted = sum(blobs.delete(blob) for blob in plan.delete) if apply else len(plan.delete)
    return CleanupReport(
        len(topics), marker.records, undecodable, plan.live, plan.young, deleted, plan.bytes_freed,
        tuple(broken), apply, time.monotonic() - started, reused,
    )  # fmt: skip


def _mark(
    marker: Marker,
    topics: Sequence[tuple[str, str, str]],
    read: RecordSource,
    passes: Sequence[tuple[Sequence[str], int | None]],
) -> int:
    """Mark what the records of each pass (topics, from a time or the beginning) name; the count of
    records that could not be decoded."""
    from schemas.codec import DecodeError, default_codec

    codec = default_codec()
    runs = {topic: (run, base) for topic, run, base in topics}
    undecodable = 0
    for names, since_ms in passes:
        if not names:
            continue
        for topic, timestamp_ms, value in read(names, since_ms):
            if value is None:
                continue  # a compaction tombstone names nothing
            try:
                _, record = codec.decode_record(value)
            except DecodeError:
                undecodable += 1  # the streams worker dead-lettered it: nothing it names was ever used
                continue
            run, base = runs[topic]
            marker.add(base, run, timestamp_ms, record)
    return undecodable


def kafka_source(bootstrap: str, timeout_s: float) -> tuple[list[str], RecordSource]:
    """The broker's topic names and a reader of them (kafka-python, no consumer group)."""
    from streams.kafka import clients
    from streams.kafka.reader import LogReader

    consumer = clients.consumer(bootstrap, group_id=None)
    try:
        names = sorted(consumer.topics())
    finally:
        consumer.close()

    def read(topics: Sequence[str], since_ms: int | None) -> Iterator[tuple[str, int, bytes | None]]:
        with LogReader(bootstrap, topics, since_ms=since_ms, client_id="trialog-objects-gc") as reader:
            for record in reader.to_end(timeout_s=timeout_s):
                yield record.topic, int(record.timestamp), record.value

    return names, read
