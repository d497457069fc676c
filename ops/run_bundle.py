"""A run bundle: everything needed to audit and reproduce a run on a machine that never ran it, in one folder.

```
DIR/manifest.json         what is in the bundle, with the sha256 of every file (written last)
DIR/topics/<base>.avro    each of the run's topics: an Avro object container file of the records as logged
DIR/objects/              a LocalObjectStore of every blob the log names (unless written with hashes only)
DIR/images/<name>-<tag>/  the recipes of the images (the tag is the recipe's content hash)
DIR/software/             the dependency lock of the trialog that wrote the bundle
```

A topic file's records are `RECORD_SCHEMA`: partition, offset, timestamp, key, value and headers, with the
key and value bytes exactly as Kafka held them. The value stays in single-object encoding, undecoded: the
audit's hash chain is over those exact bytes, and a reader resolves old writer schemas by fingerprint as it
does on Kafka. Re-encoding would lose both.

The blobs are those `ops.objects_gc` marks live, without its window (every snapshot with each file its
manifest lists, the task bundles and initial snapshots, verifier reports, every weights file): one
definition of "what the log names" for the clean-up and the bundle, so that a schema that gains a
reference is bundled as it is kept. With `blobs="hashes"` they are listed with their hashes and not
copied: the audit needs none of them, a recheck or reproduction then needs a store that holds them.

`Bundle.open` checks every file against the manifest's sha256 before anything is read from it, and that
every blob the manifest says was copied is there with its size; the blobs themselves are verified against
their hash whenever they are read (`LocalObjectStore.get`). `Bundle.verify` hashes them all as well.

Writing is `write_bundle` (records and a source store in, files out); reading Kafka and Docker is the CLI's
(`ops.cli.bundle`).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

import fastavro

from actors.tasks.reward_config import DEFAULT as DEFAULT_REWARD
from actors.verifier.versions import verifier_version
from actors.verifier.worker import VERIFIER_ID
from ops.audit import LogRecord
from ops.objects_gc import Marker
from sandbox_agent.snapshots import SnapshotStore
from schemas.blobs import BlobIntegrityError, BlobRef, LocalObjectStore, ObjectStore
from schemas.codec import Codec, DecodeError, default_codec
from schemas.publications import TaskPublished
from schemas.run_control import RunPinned
from schemas.topics import RUN_CONTROL, TASKS

FORMAT = "trialog.run-bundle"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
TOPICS_DIR = "topics"
OBJECTS_DIR = "objects"
IMAGES_DIR = "images"
SOFTWARE_DIR = "software"
CONTROL_TOPIC = RUN_CONTROL.name  # where a run pins its versions (RunPinned), when it has that topic

BlobMode = Literal["copy", "hashes"]

RECORD_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "LoggedRecord",
    "namespace": "trialog.bundle",
    "doc": "One Kafka record of a run's topic, as it was logged (value: Avro single-object encoding).",
    "fields": [
        {"name": "partition", "type": "int"},
        {"name": "offset", "type": "long"},
        {"name": "timestamp_ms", "type": "long"},
        {"name": "key", "type": ["null", "bytes"]},
        {"name": "value", "type": ["null", "bytes"]},
        {
            "name": "headers",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "Header",
                    "fields": [
                        {"name": "key", "type": "string"},
                        {"name": "value", "type": ["null", "bytes"]},
                    ],
                },
            },
        },
    ],
}
_PARSED_SCHEMA = fastavro.parse_schema(RECORD_SCHEMA)
_CODEC = "deflate"  # in the Avro standard (zlib): every Avro reader can open the files
_HASH_CHUNK = 1 << 20


class BundleError(Exception):
    """A folder that is not a readable run bundle: no manifest, another format, or a file that does not
    match the manifest (changed or damaged since it was written)."""


# -- topic files -----------------------------------------------------------------------------------------


def topic_file(base: str) -> str:
    return f"{TOPICS_DIR}/{base}.avro"


def write_topic(path: Path, run: str, base: str, records: Iterable[LogRecord]) -> int:
    """Write `records` (all of one topic) as an Avro object container file; the number written."""
    count = 0

    def rows() -> Iterator[dict[str, Any]]:
        nonlocal count
        for record in records:
            count += 1
            yield {
                "partition": record.partition,
                "offset": record.offset,
                "timestamp_ms": record.timestamp_ms,
                "key": record.key,
                "value": record.value,
                "headers": [{"key": key, "value": value} for key, value in record.headers],
            }

    with path.open("wb") as out:
        metadata = {"trialog.run": run, "trialog.topic": base}
        fastavro.writer(out, _PARSED_SCHEMA, rows(), codec=_CODEC, metadata=metadata)
    return count


def read_topic(path: Path, base: str) -> Iterator[LogRecord]:
    """The records of a topic file, in the order written, as `LogRecord`s of topic `base`."""
    with path.open("rb") as file:
        try:
            for row in fastavro.reader(file):
                yield _record(base, row)
        except (ValueError, EOFError, KeyError, TypeError) as exc:  # fastavro's errors on a damaged file
            raise BundleError(f"{path}: not a readable topic file: {exc!r}") from None


def _record(base: str, row: Any) -> LogRecord:
    headers = tuple((header["key"], header["value"]) for header in row["headers"])
    return LogRecord(
        base, row["partition"], row["offset"], row["key"], row["value"], row["timestamp_ms"], headers
    )


def from_time(records: Iterable[LogRecord], since_ms: int) -> Iterator[LogRecord]:
    """Each partition's records from its first one at or after `since_ms` on (later ones whatever their
    timestamp: a producer's clock is not the log's order)."""
    reached: set[tuple[str, int]] = set()
    for record in records:
        where = (record.topic, record.partition)
        if where in reached or record.timestamp_ms >= since_ms:
            reached.add(where)
            yield record


# -- what the records name, beside blobs --------------------------------------------------------------------


@dataclass
class LogContents:
    """What a pass over the run's records finds (pure): the blobs and snapshots they name (through
    `ops.objects_gc.Marker`), the images they name, the tasks published and any versions the run pinned."""

    marker: Marker = field(default_factory=Marker.whole_log)
    images: set[str] = field(default_factory=set)
    tasks: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    pinned: list[dict[str, Any]] = field(default_factory=list)
    undecodable: Counter[str] = field(default_factory=Counter)

    def add(self, run: str, record: LogRecord, codec: Codec) -> None:
        if record.value is None:
            return  # a compaction tombstone names nothing
        try:
            name, decoded = codec.decode_record(record.value)
        except DecodeError:
            self.undecodable[record.topic] += 1  # kept in the topic file as it is; the audit reports it
            return
        self.marker.add(record.topic, run, record.timestamp_ms, decoded)
        image = decoded.get("image")
        if isinstance(image, str) and image:
            self.images.add(image)
        # The tasks topic also holds difficulties and reviews: only publications name files.
        if record.topic == TASKS.name and name == TaskPublished.SCHEMA:
            self.tasks[(decoded["task_id"], decoded["task_version"])] = {
                "task_id": decoded["task_id"],
                "task_version": decoded["task_version"],
                "image": decoded.get("image"),
                "bundle": (decoded.get("bundle") or {}).get("sha256"),
                "initial_snapshot_id": decoded.get("initial_snapshot_id"),
            }
        if record.topic == CONTROL_TOPIC and name == RunPinned.SCHEMA:
            self.pinned.append({"schema": name, "record": _jsonable(decoded)})


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, Mapping):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    return value


# -- images ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImageRecipe:
    """An image as trialog builds it: `name:tag` (the tag hashes the recipe), the recipe's files, and the
    Docker image id where an engine that holds it was asked (None otherwise)."""

    name: str
    tag: str
    files: Mapping[str, bytes]  # relative path in the recipe folder -> content
    image_id: str | None = None

    @property
    def ref(self) -> str:
        return f"{self.name}:{self.tag}"


# -- writing ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BundleSummary:
    out: Path
    run: str
    records: Mapping[str, int]  # per topic
    blobs: int
    blobs_copied: int
    blob_bytes: int  # of the blobs the log names (copied or not)
    missing: tuple[BlobRef, ...]  # named by the log, not in the source store
    broken_snapshots: tuple[str, ...]
    bytes_written: int
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {
            "bundle": str(self.out),
            "run": self.run,
            "records": dict(self.records),
            "records_total": sum(self.records.values()),
            "blobs": self.blobs,
            "blobs_copied": self.blobs_copied,
            "blob_bytes": self.blob_bytes,
            "missing_blobs": [ref.to_record() for ref in self.missing],
            "broken_snapshots": list(self.broken_snapshots),
            "bytes_written": self.bytes_written,
            "seconds": round(self.seconds, 3),
        }


def write_bundle(
    run: str,
    topics: Mapping[str, Iterable[LogRecord]],
    source: ObjectStore,
    out: Path,
    *,
    blobs: BlobMode = "copy",
    images: Sequence[ImageRecipe] = (),
    software: Mapping[str, Any] | None = None,
    lock: bytes | None = None,
    progress: Callable[[str], None] = lambda line: None,
    now_s: Callable[[], float] = time.time,
) -> BundleSummary:
    """Write the bundle of `run` into the empty folder `out`: each topic's records (base name -> records,
    read lazily, one topic after the other), the blobs they name from `source` (or only their hashes),
    the image recipes, the dependency lock; the manifest last, so that a folder without one is a bundle
    whose writing did not finish."""
    if blobs not in ("copy", "hashes"):
        raise ValueError(f"blobs is 'copy' or 'hashes', not {blobs!r}")
    if out.exists() and any(out.iterdir()):
        raise BundleError(f"{out} is not empty: a bundle is written into a new or empty folder")
    started = time.monotonic()
    (out / TOPICS_DIR).mkdir(parents=True, exist_ok=True)
    codec = default_codec()
    contents = LogContents()
    files: dict[str, str] = {}
    counts: dict[str, int] = {}

    def seen(records: Iterable[LogRecord]) -> Iterator[LogRecord]:
        for record in records:
            contents.add(run, record, codec)
            yield record

    for base, records in topics.items():
        name = topic_file(base)
        counts[base] = write_topic(out / name, run, base, seen(records))
        files[name] = file_sha256(out / name)
        progress(f"{base}: {counts[base]} records")

    refs, broken = contents.marker.live_refs(SnapshotStore(source))
    listed, missing, copied = _blobs(sorted(refs, key=_ref_key), source, out, blobs, progress)
    recipes = [_write_recipe(out, recipe, files, contents.images) for recipe in images]
    # A tag hashes its recipe: an image the log names that no recipe here builds came from another recipe.
    unmatched = sorted(contents.images - {recipe.ref for recipe in images})
    software_entry = dict(software or {})
    if lock is not None:
        name = f"{SOFTWARE_DIR}/requirements.lock"
        (out / SOFTWARE_DIR).mkdir(exist_ok=True)
        (out / name).write_bytes(lock)
        files[name] = file_sha256(out / name)
        software_entry["requirements_lock"] = name
    manifest = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "run": run,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now_s())),
        "software": software_entry,
        "blobs_mode": blobs,
        "topics": {
            base: {"file": topic_file(base), "records": counts[base], "sha256": files[topic_file(base)]}
            for base in counts
        },
        "undecodable": dict(contents.undecodable),
        "blobs": listed,
        "broken_snapshots": broken,
        "tasks": [contents.tasks[key] for key in sorted(contents.tasks)],
        "images": {"named_by_log": sorted(contents.images), "without_recipe": unmatched, "recipes": recipes},
        "reward": reward_rule(),
        "pinned": contents.pinned,
        "files": files,
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=False) + "\n")
    return BundleSummary(
        out, run, counts, len(listed), copied, sum(ref.size for ref in refs), tuple(missing), tuple(broken),
        _folder_bytes(out), time.monotonic() - started,
    )  # fmt: skip


def _ref_key(ref: BlobRef) -> tuple[str, str]:
    return ref.sha256, ref.media_type


def _blobs(
    refs: Sequence[BlobRef], source: ObjectStore, out: Path, mode: BlobMode, progress: Callable[[str], None]
) -> tuple[list[dict[str, Any]], list[BlobRef], int]:
    """Each blob's manifest entry, the ones the source lacks, and how many were copied."""
    store = LocalObjectStore(out / OBJECTS_DIR)
    listed, missing, copied = [], [], 0
    total = sum(ref.size for ref in refs)
    progress(f"{'copying' if mode == 'copy' else 'listing'} {len(refs)} blobs ({total} bytes)")
    for ref in refs:
        entry: dict[str, Any] = {**ref.to_record(), "copied": False}
        if mode == "hashes":
            if not _present(source, ref):
                entry["missing"] = True
                missing.append(ref)
        else:
            try:
                store.put(source.get(ref), ref.media_type)
            except BlobIntegrityError:  # missing, or stored but not what its hash says
                entry["missing"] = True
                missing.append(ref)
            else:
                entry["copied"] = True
                copied += 1
        listed.append(entry)
    return listed, missing, copied


def _present(source: ObjectStore, ref: BlobRef) -> bool:
    """Whether `source` holds the blob, without `LocalObjectStore.contains`'s touch: bundling a run must
    not make its blobs look freshly written to the store's clean-up."""
    if isinstance(source, LocalObjectStore):
        return source.path_of(ref.sha256, ref.media_type).is_file()
    return source.contains(ref.sha256, ref.media_type)


def _write_recipe(out: Path, recipe: ImageRecipe, files: dict[str, str], named: set[str]) -> dict[str, Any]:
    folder = f"{IMAGES_DIR}/{recipe.name}-{recipe.tag}"
    written = []
    for relative, data in sorted(recipe.files.items()):
        name = f"{folder}/{_safe_relative(relative)}"
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(data)
        files[name] = file_sha256(out / name)
        written.append(name)
    return {
        "image": recipe.ref,
        "image_id": recipe.image_id,
        "named_by_log": recipe.ref in named,
        "folder": folder,
        "files": written,
    }


def reward_rule() -> dict[str, Any]:
    """The default reward configuration of the trialog that writes the bundle (the outcome rule's constants
    and the components' weights, `actors.tasks.reward_config`), its version as grades name it
    (`reward_config`; a run started with `--reward-config` names its own file's version in its pin), and the
    verifier version it grades with (no fault injected)."""
    return {
        **DEFAULT_REWARD.canonical(),
        "version": DEFAULT_REWARD.version,
        "verifier_version": verifier_version(VERIFIER_ID),
    }


def software_versions(trialog_version: str) -> dict[str, str]:
    return {"trialog": trialog_version, "python": platform.python_version(), "fastavro": fastavro.__version__}


def file_sha256(path: Path) -> str:
    hasher = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(_HASH_CHUNK):
            hasher.update(chunk)
    return hasher.hexdigest()


def _folder_bytes(folder: Path) -> int:
    return sum((Path(root) / name).stat().st_size for root, _, names in os.walk(folder) for name in names)


def _safe_relative(text: str) -> str:
    """`text` as a relative path inside the bundle, or a `BundleError` (no absolute path, no '..')."""
    path = PurePosixPath(text)
    if path.is_absolute() or not path.parts or any(part in ("", ".", "..") for part in path.parts):
        raise BundleError(f"{text!r} is not a relative path inside the bundle")
    return path.as_posix()


# -- reading ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bundle:
    """A run bundle opened and checked (`Bundle.open`)."""

    root: Path
    manifest: Mapping[str, Any]

    @classmethod
    def open(cls, root: Path) -> Bundle:
        """Read the manifest and check every file it lists against its sha256, and that each blob it says
        was copied is in `objects/` with its size; a `BundleError` that names the first mismatch."""
        path = root / MANIFEST
        if not root.is_dir():
            raise BundleError(f"{root} is not a folder")
        if not path.is_file():
            raise BundleError(f"{root} has no {MANIFEST}: not a run bundle, or its writing did not finish")
        try:
            manifest = json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError) as exc:
            raise BundleError(f"{path} is not JSON: {exc}") from None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise BundleError(f"{path} is not a trialog run bundle's manifest")
        if manifest.get("version") != FORMAT_VERSION:
            raise BundleError(
                f"{path} is bundle format version {manifest.get('version')!r}; this trialog reads version "
                f"{FORMAT_VERSION}"
            )
        bundle = cls(root, manifest)
        bundle._check_files()
        bundle._check_copied()
        return bundle

    def _check_files(self) -> None:
        for name, expected in self.manifest["files"].items():
            path = self.root / _safe_relative(name)
            if not path.is_file():
                raise BundleError(f"{path} is listed in the bundle's manifest but missing")
            actual = file_sha256(path)
            if actual != expected:
                raise BundleError(
                    f"{path} does not match the bundle's manifest (sha256 {actual[:16]}…, the manifest says "
                    f"{expected[:16]}…): it was changed or damaged after the bundle was written"
                )
        for base, entry in self.manifest["topics"].items():
            listed = self.manifest["files"].get(entry["file"])
            if entry["file"] != topic_file(base) or listed != entry["sha256"]:
                raise BundleError(f"the manifest's entry for topic {base} does not match its file list")

    def _check_copied(self) -> None:
        for ref in self.copied_blobs:
            path = self.objects.path_of(ref.sha256, ref.media_type)
            if not path.is_file() or path.stat().st_size != ref.size:
                raise BundleError(
                    f"blob {ref.sha256} ({ref.media_type}) is listed as copied but {path} is missing or of "
                    "another size: the bundle's objects were changed after it was written"
                )

    @property
    def run(self) -> str:
        run: str = self.manifest["run"]
        return run

    @property
    def hashes_only(self) -> bool:
        return bool(self.manifest["blobs_mode"] == "hashes")

    @property
    def objects(self) -> LocalObjectStore:
        return LocalObjectStore(self.root / OBJECTS_DIR)

    @property
    def topics(self) -> dict[str, int]:
        """Record counts by topic base name."""
        return {base: int(entry["records"]) for base, entry in self.manifest["topics"].items()}

    def _blob_refs(self, copied: bool) -> list[BlobRef]:
        return [
            BlobRef(entry["sha256"], entry["size"], entry["media_type"])
            for entry in self.manifest["blobs"]
            if bool(entry.get("copied")) is copied
        ]

    @property
    def copied_blobs(self) -> list[BlobRef]:
        return self._blob_refs(copied=True)

    @property
    def absent_blobs(self) -> list[BlobRef]:
        """Blobs the log names that the bundle holds only the hash of (hashes only, or missing when it was
        written)."""
        return self._blob_refs(copied=False)

    def records(
        self, bases: Sequence[str], *, since_ms: int | None = None, require: bool = True
    ) -> Iterator[LogRecord]:
        """The records of topics `bases`, one topic after the other, each in the order it was read from
        Kafka (per partition, offset order); with `since_ms`, each partition from its first record at or
        after that time, as Kafka's `offsets_for_times` seeks. A topic the bundle lacks is a
        `BundleError` when `require`, else it has no records."""
        missing = [base for base in bases if base not in self.manifest["topics"]]
        if missing and require:
            raise BundleError(f"the bundle of run {self.run!r} has no topic {', '.join(missing)}")
        for base in bases:
            if base in self.manifest["topics"]:
                records = read_topic(self.root / topic_file(base), base)
                yield from records if since_ms is None else from_time(records, since_ms)

    def count(self, bases: Sequence[str]) -> int:
        return sum(self.topics.get(base, 0) for base in bases)

    def verify(self) -> list[str]:
        """Problems found by reading everything back (empty: none): each topic's record count, and each
        copied blob's hash."""
        problems = []
        for base, expected in self.topics.items():
            got = sum(1 for _ in read_topic(self.root / topic_file(base), base))
            if got != expected:
                problems.append(f"topic {base}: {got} records read back, {expected} written")
        store = self.objects
        for ref in self.copied_blobs:
            try:
                store.get(ref)
            except BlobIntegrityError as exc:
                problems.append(str(exc))
        return problems
