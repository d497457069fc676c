"""Large payloads by content hash: `BlobRef` records and the object store they point into.

A payload under the inline cap travels inside the record; a larger one is put in the object store and the
record carries its sha256 and size. The store is an interface; a local folder is the default, and an
S3-compatible store only has to implement the same three methods.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from schemas.record import AvroDict

OCTET_STREAM = "application/octet-stream"
TEXT_PLAIN = "text/plain; charset=utf-8"
DEFAULT_INLINE_CAP = 64 * 1024


class BlobIntegrityError(Exception):
    """A stored blob does not hash to its key (corruption or tampering), or it is missing."""


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
        """The payload, verified against its hash; BlobIntegrityError if missing or corrupt."""
        ...

    def contains(self, sha256: str) -> bool: ...


def _verified(ref: BlobRef, data: bytes) -> bytes:
    if hashlib.sha256(data).hexdigest() != ref.sha256 or len(data) != ref.size:
        raise BlobIntegrityError(f"blob {ref.sha256} does not match its content")
    return data


class LocalObjectStore:
    """Blobs as files `<root>/<sha[:2]>/<sha>`, written atomically, verified on read."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._made: set[str] = set()  # fan-out folders known to exist: a snapshot puts thousands of blobs

    def _path(self, sha256: str) -> Path:
        return self.root / sha256[:2] / sha256

    def put(self, data: bytes, media_type: str = OCTET_STREAM) -> BlobRef:
        ref = BlobRef.of(data, media_type)
        folder = os.path.join(self.root, ref.sha256[:2])
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
            data = self._path(ref.sha256).read_bytes()
        except FileNotFoundError:
            raise BlobIntegrityError(f"blob {ref.sha256} is missing from {self.root}") from None
        return _verified(ref, data)

    def contains(self, sha256: str) -> bool:
        """Whether the blob is stored; a stored one counts as just written (see `_refresh`)."""
        return _refresh(str(self._path(sha256)))


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
    """An object store in a dict, for tests and tools."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}

    def put(self, data: bytes, media_type: str = OCTET_STREAM) -> BlobRef:
        ref = BlobRef.of(data, media_type)
        self.blobs[ref.sha256] = data
        return ref

    def get(self, ref: BlobRef) -> bytes:
        if ref.sha256 not in self.blobs:
            raise BlobIntegrityError(f"blob {ref.sha256} is missing")
        return _verified(ref, self.blobs[ref.sha256])

    def contains(self, sha256: str) -> bool:
        return sha256 in self.blobs


def inline_or_ref(data: bytes, store: ObjectStore, cap: int = DEFAULT_INLINE_CAP) -> bytes | BlobRef:
    """`data` itself when it fits under `cap`, otherwise a reference to it in `store`."""
    return data if len(data) <= cap else store.put(data, OCTET_STREAM)


def text_or_ref(text: str, store: ObjectStore, cap: int = DEFAULT_INLINE_CAP) -> str | BlobRef:
    encoded = text.encode("utf-8")
    return text if len(encoded) <= cap else store.put(encoded, TEXT_PLAIN)
