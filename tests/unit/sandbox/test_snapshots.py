from __future__ import annotations

import hashlib

import pytest

from sandbox_agent.manifest import Entry, Manifest
from sandbox_agent.snapshots import MissingContent, SnapshotStore
from schemas.blobs import OCTET_STREAM, BlobRef, MemoryObjectStore


class CountingStore(MemoryObjectStore):
    def __init__(self) -> None:
        super().__init__()
        self.puts = 0

    def put(self, data: bytes, media_type: str = OCTET_STREAM) -> BlobRef:
        self.puts += 1
        return super().put(data, media_type)


def file_entry(path: str, body: bytes) -> Entry:
    return Entry.file(path, 0o644, hashlib.sha256(body).hexdigest(), len(body))


def test_a_saved_snapshot_loads_back_with_its_contents() -> None:
    snapshots = SnapshotStore(MemoryObjectStore())
    manifest = Manifest.of([file_entry("a", b"alpha"), Entry.directory("d", 0o755)])
    snapshot_id = snapshots.save(manifest, {hashlib.sha256(b"alpha").hexdigest(): b"alpha"})
    assert snapshots.load(snapshot_id) == manifest
    assert snapshots.content(manifest.files[0]) == b"alpha"


def test_an_unchanged_tree_costs_nothing_and_shared_contents_are_stored_once() -> None:
    store = CountingStore()
    snapshots = SnapshotStore(store)
    body = b"same bytes"
    contents = {hashlib.sha256(body).hexdigest(): body}
    first = snapshots.save(Manifest.of([file_entry("a", body)]), contents)
    writes = store.puts
    assert snapshots.save(Manifest.of([file_entry("a", body)]), contents) == first
    assert store.puts == writes  # nothing written again
    snapshots.save(Manifest.of([file_entry("a", body), file_entry("copy", body)]), contents)
    assert store.puts == writes + 1  # only the new manifest


def test_a_file_with_no_content_anywhere_is_an_error() -> None:
    with pytest.raises(MissingContent, match="'a'"):
        SnapshotStore(MemoryObjectStore()).save(Manifest.of([file_entry("a", b"x")]), {})


@pytest.mark.parametrize("threads", [1, 4])
def test_many_new_files_are_all_stored_on_any_number_of_threads(threads: int) -> None:
    store = MemoryObjectStore()
    snapshots = SnapshotStore(store, put_threads=threads)
    bodies = [f"file {i}".encode() for i in range(40)]
    manifest = Manifest.of([file_entry(f"f{i}", body) for i, body in enumerate(bodies)])
    snapshot_id = snapshots.save(manifest, {hashlib.sha256(b).hexdigest(): b for b in bodies})
    loaded = snapshots.load(snapshot_id)
    assert {entry.path: snapshots.content(entry) for entry in loaded.files} == {
        f"f{i}": body for i, body in enumerate(bodies)
    }
