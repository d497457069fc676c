"""Large payloads by content hash: `BlobRef` records and the object store they point into.

A payload under the inline cap travels inside the record; a larger one is put in the object store and the
record carries its sha256 and size. The store is an interface; a local folder is the default, and an
S3-compatible bucket (`schemas.s3_store`) implements the same three methods; `schemas.object_stores`
opens either from a path or an `s3://` URL.

Blobs are typed: a blob is stored under its media type as well as its hash, and a reference finds only a
blob put with the reference's type. Content addressing alone would let any bytes serve as anything: a file
an agent wrote in its workspace (stored as `application/octet-stream` by the step's snapshot) could be
read as a snapshot manifest or a task bundle by a reference that names its hash. With types, a manifest
reference reads only what trialog stored as a manifest. The same bytes put under two types are two blobs.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from schemas.record import AvroDict

OCTET_STREAM = "application/octet-stream"
TEXT_PLAIN = "text/plain; charset=utf-8"
DEFAULT_INLINE_CAP = 64 * 1024


class BlobIntegrityError(Exception):
    """A stored blob does not hash to its key (corruption or tampering), or it is missing."""


class ObjectStoreUnavailable(OSError):
    """The store itself cannot be used (a remote endpoint that does not answer, a bucket that does not
    exist, credentials refused): not a statement about any blob. An `OSError`, as a failing disk under the
    local store raises, so callers that survive an unreadable disk survive this too. `hint` says what to
    do."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} (hint: {self.hint})" if self.hint else self.message


@dataclass(frozen=True, slots=True)
class BlobRef:
    SCHEMA: ClassVar[str] = "trialog.common.BlobRef"

    sha256: str
    size: int
    media_type: str = OCTET_STREAM

    def to_record(self) -> AvroDict:
        return {"sha256": self.sha256, "size": self.size, "media_type": self.media_type}

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> BlobRef:
        return cls(rec["sha256"], rec["size"], rec["media_type"])

    @classmethod
    def of(cls, data: bytes, media_type: str = OCTET_STREAM) -> BlobRef:
        return cls(hashlib.sha256(data).hexdigest(), len(data), media_type)


class ObjectStore(Protocol):
    def put(self, data: bytes, media_type: str = OCTET_STREAM) -> BlobRef: ...

    def get(self, ref: BlobRef) -> bytes:
        """The payload put with `ref`'s media type, verified against its hash; BlobIntegrityError if
        missing (under that type) or corrupt."""
        ...

    def contains(self, sha256: str, media_type: str = OCTET_STREAM) -> bool: ...


@runtime_checkable
class Locating(Protocol):
    """A store that can say where a blob lives as a URI (a `file://` path, an `s3://` key): for records
    that name a blob for people and other tools (`PolicyPublished.weights_uri`)."""

    def uri_of(self, ref: BlobRef) -> str: ...


def verified(ref: BlobRef, data: bytes) -> bytes:
    """`data` if it is what `ref` names (sha256 and size), else BlobIntegrityError."""
    if hashlib.sha256(data).hexdigest() != ref.sha256 or len(data) != ref.size:
        raise BlobIntegrityError(f"blob {ref.sha256} does not match its content")
    return data


TYPED_FOLDER = "typed"  # under a local store's root: one folder per media type other than octet-stream


def type_folder(media_type: str) -> str:
    """A media type as a folder name: readable, and distinct for distinct types (a hash of the exact type)."""
    readable = re.sub(r"[^A-Za-z0-9.+-]+", "_", media_type)[:48]
    return f"{readable}-{hashlib.sha256(media_type.encode()).hexdigest()[:8]}"


class LocalObjectStore:
    """Blobs as files, written atomically, verified on read: `<root>/<sha[:2]>/<sha>` for octet-stream
    (workspace files, most blobs), `<root>/typed/<type>/<sha[:2]>/<sha>` for every other media type."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._made: set[str] = set()  # fan-out folders known to exist: a snapshot puts thousands of blobs

    def _folder(self, sha256: str, media_type: str) -> str:
        if media_type == OCTET_STREAM:
            return os.path.join(self.root, sha256[:2])
        return os.path.join(self.root, TYPED_FOLDER, type_folder(media_type), sha256[:2])

    def path_of(self, sha256: str, media_type: str = OCTET_STREAM) -> Path:
        """Where the blob is (or would be) stored: for tools that look after the folder."""
        return Path(self._folder(sha256, media_type), sha256)

    def uri_of(self, ref: BlobRef) -> str:
        return self.path_of(ref.sha256, ref.media_type).absolute().as_uri()

    def __repr__(self) -> str:
        return f"LocalObjectStore({str(self.root)!r})"

    def put(self, data: bytes, media_type: str = OCTET_STREAM) -> BlobRef:
        ref = BlobRef.of(data, media_type)
        folder = self._folder(ref.sha256, media_type)
        final = os.path.join(folder, ref.sha256)
        if _refresh(final):  # content-addressed: an existing file already holds these bytes
            return ref
        if folder not in self._made:
            os.makedirs(folder, exist_ok=True)
            self._made.add(folder)
        # A temporary name unique to this process and thread (no random retries as with mkstemp), renamed
        # into place so that readers never see a half-written blob.
        tmp = os.path.join(folder, f".tmp-{ref.sha256[:16]}-{os.getpid()}-{threading.get_ident()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(tmp, final)
        return ref

    def get(self, ref: BlobRef) -> bytes:
        try:
            data = self.path_of(ref.sha256, ref.media_type).read_bytes()
        except FileNotFoundError:
            raise BlobIntegrityError(
                f"blob {ref.sha256} ({ref.media_type}) is missing from {self.root}"
            ) from None
        return verified(ref, data)

    def contains(self, sha256: str, media_type: str = OCTET_STREAM) -> bool:
        """Whether the blob is stored; a stored one counts as just written (see `_refresh`)."""
        return _refresh(str(self.path_of(sha256, media_type)))


def _refresh(path: str) -> bool:
    """Touch a stored blob, True if it exists. Its modification time is when it was last written or asked
    for: a writer that finds a blob already there (a snapshot reusing a file) relies on it staying, and the
    store's clean-up (`ops.objects_gc`) keeps every blob touched within its grace period."""
    try:
        os.utime(path)
    except FileNotFoundError:
        return False
    return True


class MemoryObjectStore:
    """An object store in a dict, for tests and tools: keyed by `memory_key` (the hash, and the media type
    unless it is octet-stream)."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}

    def put(self, data: bytes, media_type: str = OCTET_STREAM) -> BlobRef:
        ref = BlobRef.of(data, media_type)
        self.blobs[memory_key(ref.sha256, media_type)] = data
        return ref

    def get(self, ref: BlobRef) -> bytes:
        key = memory_key(ref.sha256, ref.media_type)
        if key not in self.blobs:
            raise BlobIntegrityError(f"blob {ref.sha256} ({ref.media_type}) is missing")
        return verified(ref, self.blobs[key])

    def contains(self, sha256: str, media_type: str = OCTET_STREAM) -> bool:
        return memory_key(sha256, media_type) in self.blobs


def memory_key(sha256: str, media_type: str) -> str:
    return sha256 if media_type == OCTET_STREAM else f"{sha256} {media_type}"


def inline_or_ref(data: bytes, store: ObjectStore, cap: int = DEFAULT_INLINE_CAP) -> bytes | BlobRef:
    """`data` itself when it fits under `cap`, otherwise a reference to it in `store`."""
    return data if len(data) <= cap else store.put(data, OCTET_STREAM)


def text_or_ref(text: str, store: ObjectStore, cap: int = DEFAULT_INLINE_CAP) -> str | BlobRef:
    encoded = text.encode("utf-8")
    return text if len(encoded) <= cap else store.put(encoded, TEXT_PLAIN)
