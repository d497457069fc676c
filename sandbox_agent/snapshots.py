"""Workspace snapshots in the object store: each file's content as a blob, then the manifest as a blob.

Content addressing makes a snapshot cheap: a file already stored (by any earlier step, episode or host) is
not written again, and an unchanged workspace gives the same manifest, hence the same id, and writes
nothing. The id is all another host needs to restore the tree from the same store.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from sandbox_agent.manifest import MANIFEST_MEDIA_TYPE, Entry, Manifest, SnapshotId
from schemas.blobs import ObjectStore

_PARALLEL_FROM = 16
_PUT_THREADS = 4


class MissingContent(LookupError):
    """A manifest names a file whose content is neither given nor already in the store."""


class SnapshotStore:
    def __init__(self, objects: ObjectStore) -> None:
        self.objects = objects

    def save(self, manifest: Manifest, contents: Mapping[str, bytes]) -> SnapshotId:
        """Store what is new (`contents` maps sha256 to bytes for files the store may lack); return the id."""
        new: dict[str, bytes] = {}
        for entry in manifest.files:
            if entry.sha256 in new or self.objects.contains(entry.sha256):
                continue
            if entry.sha256 not in contents:
                raise MissingContent(f"no content for {entry.path!r} ({entry.sha256})")
            new[entry.sha256] = contents[entry.sha256]
        self._put_all(list(new.values()))
        data = manifest.to_bytes()
        snapshot_id = manifest.snapshot_id()
        if not self.objects.contains(snapshot_id.sha256):
            self.objects.put(data, MANIFEST_MEDIA_TYPE)
        return snapshot_id

    def _put_all(self, blobs: list[bytes]) -> None:
        # Each put is a small file write (or a request to a remote store): a few in parallel hide latency.
        if len(blobs) < _PARALLEL_FROM:
            for blob in blobs:
                self.objects.put(blob)
            return
        with ThreadPoolExecutor(_PUT_THREADS, thread_name_prefix="snapshot-put") as pool:
            for _ in pool.map(self.objects.put, blobs):
                pass

    def load(self, snapshot_id: SnapshotId) -> Manifest:
        return Manifest.from_bytes(self.objects.get(snapshot_id.manifest_ref))

    def content(self, entry: Entry) -> bytes:
        return self.objects.get(entry.blob)
