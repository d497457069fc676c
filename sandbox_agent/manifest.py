"""The canonical description of a workspace tree, and the content-addressed snapshot id derived from it.

A manifest lists every folder, file and symbolic link by relative path, with permission bits, the sha256
and size of each file's content, and each link's target. Timestamps and owners are left out on purpose:
two workspaces with the same files give the same bytes, hence the same snapshot id, whatever host or
sandbox they come from and whenever they were written. Paths that are not valid UTF-8 survive the trip
as surrogate escapes (the form `os.fsdecode` gives).

A manifest read back may have been crafted (the policy controls the sandbox that lists the workspace, and
anyone with write access controls the store), so `Manifest` refuses one whose paths do not name distinct
places on disk: each path must be the one spelling `os.fsdecode` gives for its bytes (so 'é' and the
surrogate escapes of its UTF-8 bytes, which are different strings for the same file, cannot both appear),
relative, without '.', '..', empty components or NUL, unique, sorted, and not inside a file or a link.
Link targets must be non-empty and free of NUL. Where a link points is not checked: a restored link is data,
and the writers (`sandbox_agent.hosttree.write_tree`) never follow one.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from sandbox_agent.paths import PathOutsideWorkspace, ancestors, workspace_relative
from schemas.blobs import BlobRef

MANIFEST_MEDIA_TYPE = "application/vnd.trialog.workspace-manifest+json"
MANIFEST_VERSION = 1
# Read, write and execute for everyone, plus the sticky bit. Set-id bits are never carried: they are inert
# under no-new-privileges anyway, and a snapshot must not be a way to plant them elsewhere.
PERMISSION_BITS = 0o1777


class ManifestError(ValueError):
    """Bytes that are not a valid manifest, or entries that do not form a tree."""


class Kind(StrEnum):
    FILE = "f"
    DIR = "d"
    LINK = "l"


@dataclass(frozen=True, slots=True)
class Entry:
    path: str
    kind: Kind
    mode: int = 0o755  # permission bits (files and folders; links have none of their own)
    sha256: str = ""  # files only
    size: int = 0  # files only
    target: str = ""  # links only

    @classmethod
    def file(cls, path: str, mode: int, sha256: str, size: int) -> Entry:
        return cls(path, Kind.FILE, mode & PERMISSION_BITS, sha256, size)

    @classmethod
    def directory(cls, path: str, mode: int) -> Entry:
        return cls(path, Kind.DIR, mode & PERMISSION_BITS)

    @classmethod
    def link(cls, path: str, target: str) -> Entry:
        return cls(path, Kind.LINK, 0o777, target=target)

    @property
    def blob(self) -> BlobRef:
        return BlobRef(self.sha256, self.size)

    def to_json(self) -> list[object]:
        if self.kind is Kind.FILE:
            return [self.path, "f", self.mode, self.sha256, self.size]
        if self.kind is Kind.DIR:
            return [self.path, "d", self.mode]
        return [self.path, "l", self.target]

    @classmethod
    def from_json(cls, row: list[object]) -> Entry:
        match row:
            case [str(path), "f", int(mode), str(sha256), int(size)]:
                return cls.file(path, mode, sha256, size)
            case [str(path), "d", int(mode)]:
                return cls.directory(path, mode)
            case [str(path), "l", str(target)]:
                return cls.link(path, target)
        raise ManifestError(f"not a manifest entry: {row!r}")


_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True, slots=True)
class Manifest:
    entries: tuple[Entry, ...]  # sorted by path: a folder always comes before what it holds

    def __post_init__(self) -> None:
        _check_tree(self.entries)

    @classmethod
    def of(cls, entries: Iterable[Entry]) -> Manifest:
        return cls(tuple(sorted(entries, key=lambda entry: entry.path)))

    @property
    def files(self) -> tuple[Entry, ...]:
        return tuple(entry for entry in self.entries if entry.kind is Kind.FILE)

    def to_bytes(self) -> bytes:
        body = {"version": MANIFEST_VERSION, "entries": [entry.to_json() for entry in self.entries]}
        return json.dumps(body, ensure_ascii=True, separators=(",", ":")).encode("ascii")

    @classmethod
    def from_bytes(cls, data: bytes) -> Manifest:
        try:
            body = json.loads(data)
        except ValueError as exc:
            raise ManifestError(f"a manifest is JSON: {exc}") from None
        if not isinstance(body, dict) or body.get("version") != MANIFEST_VERSION:
            raise ManifestError("not a version-1 workspace manifest")
        return cls(tuple(Entry.from_json(row) for row in body["entries"]))

    def snapshot_id(self) -> SnapshotId:
        data = self.to_bytes()
        ref = BlobRef.of(data)
        return SnapshotId(ref.sha256, ref.size)


def _check_tree(entries: tuple[Entry, ...]) -> None:
    """Canonical, unique, sorted paths; nothing inside a file or a link (a link must never be a way out)."""
    kinds: dict[str, Kind] = {}
    previous = ""
    for entry in entries:
        try:
            canonical = workspace_relative(entry.path)
        except PathOutsideWorkspace as exc:
            raise ManifestError(str(exc)) from None
        if canonical != entry.path:
            raise ManifestError(f"{entry.path!r} is not in canonical form")
        if _as_on_disk(entry.path) != entry.path:
            raise ManifestError(f"{entry.path!r} is not the one spelling of its bytes on disk (an alias)")
        if entry.kind is Kind.LINK and (not entry.target or "\0" in entry.target):
            raise ManifestError(f"{entry.path!r} is a link with an empty target or a NUL in it")
        if entry.kind is Kind.LINK and _as_on_disk(entry.target) != entry.target:
            raise ManifestError(f"{entry.path!r} is a link whose target is not a file system name")
        if entry.path <= previous:
            raise ManifestError(f"{entry.path!r} is out of order or repeated")
        if any(kinds.get(folder, Kind.DIR) is not Kind.DIR for folder in ancestors(entry.path)):
            raise ManifestError(f"{entry.path!r} lies inside a file or a link")
        if entry.kind is Kind.FILE and (_SHA256.match(entry.sha256) is None or entry.size < 0):
            raise ManifestError(f"{entry.path!r} has no valid content hash")
        kinds[entry.path] = entry.kind
        previous = entry.path


def _as_on_disk(name: str) -> str | None:
    """`name` as `os.fsdecode` would give it back from the bytes it is written as (None: not writable)."""
    try:
        return os.fsdecode(os.fsencode(name))
    except UnicodeError:  # a surrogate outside the escape range: no bytes spell it
        return None


@dataclass(frozen=True, slots=True)
class SnapshotId:
    """`snap-<sha256 of the manifest>-<its size>`: enough to fetch and verify the manifest anywhere."""

    sha256: str
    size: int

    def __str__(self) -> str:
        return f"snap-{self.sha256}-{self.size}"

    @property
    def manifest_ref(self) -> BlobRef:
        return BlobRef(self.sha256, self.size, MANIFEST_MEDIA_TYPE)

    @classmethod
    def parse(cls, text: str) -> SnapshotId:
        match = re.fullmatch(r"snap-([0-9a-f]{64})-(\d+)", text)
        if match is None:
            raise ValueError(f"not a snapshot id: {text!r}")
        return cls(match.group(1), int(match.group(2)))
