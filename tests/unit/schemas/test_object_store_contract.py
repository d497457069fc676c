"""The contract every object store keeps, run against each implementation (`schemas.blobs.ObjectStore`):
the local folder, the in-memory store, the audit side's overlay (over either), and the tests' counting fake
here; the S3 store on a real S3 server (SeaweedFS) in tests/integration/test_s3_object_store.py.

Snapshots, task bundles and weights are found by content hash alone, so every store must give back exactly
the bytes a hash names, or refuse (`BlobIntegrityError`): never other bytes, never a half-written blob.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from ops.audit_sandboxes import OverlayStore
from sandbox_agent.manifest import MANIFEST_MEDIA_TYPE
from schemas.blobs import (
    OCTET_STREAM,
    TEXT_PLAIN,
    BlobIntegrityError,
    BlobRef,
    LocalObjectStore,
    MemoryObjectStore,
    ObjectStore,
)
from tests.unit.sandbox.test_snapshots import CountingStore


@dataclass(frozen=True)
class StoreUnderTest:
    """A store, and how to damage a blob it holds in place (what a bad disk or a tamperer does)."""

    store: ObjectStore
    corrupt: Callable[[str], None]  # sha256 -> replace the stored bytes with others


def _local(tmp_path: Path) -> StoreUnderTest:
    store = LocalObjectStore(tmp_path / "objects")

    def corrupt(sha256: str) -> None:
        (tmp_path / "objects" / sha256[:2] / sha256).write_bytes(b"not what was put")

    return StoreUnderTest(store, corrupt)


def _memory(store: MemoryObjectStore) -> StoreUnderTest:
    def corrupt(sha256: str) -> None:
        store.blobs[sha256] = b"not what was put"

    return StoreUnderTest(store, corrupt)


def _overlay_on_memory(_tmp_path: Path) -> StoreUnderTest:
    overlay = OverlayStore(MemoryObjectStore())
    return StoreUnderTest(overlay, _memory(overlay.scratch).corrupt)


def _overlay_on_local(tmp_path: Path) -> StoreUnderTest:
    overlay = OverlayStore(LocalObjectStore(tmp_path / "base"))
    return StoreUnderTest(overlay, _memory(overlay.scratch).corrupt)


STORES: dict[str, Callable[[Path], StoreUnderTest]] = {
    "local": _local,
    "memory": lambda _tmp_path: _memory(MemoryObjectStore()),
    "counting-fake": lambda _tmp_path: _memory(CountingStore()),
    "overlay-on-memory": _overlay_on_memory,
    "overlay-on-local": _overlay_on_local,
}


class ObjectStoreContract:
    """The contract's tests; a subclass supplies the `under_test` fixture (here: every store without a
    server; tests/integration/test_s3_object_store.py: the S3 store on a real SeaweedFS)."""

    def test_a_put_blob_is_named_by_its_content_and_comes_back_exactly(
        self, under_test: StoreUnderTest
    ) -> None:
        store = under_test.store
        data = bytes(range(256)) * 40
        ref = store.put(data)
        assert ref == BlobRef(hashlib.sha256(data).hexdigest(), len(data), OCTET_STREAM) == BlobRef.of(data)
        assert store.contains(ref.sha256)
        assert store.get(ref) == data

    def test_a_blob_is_found_only_under_the_media_type_it_was_put_with(
        self, under_test: StoreUnderTest
    ) -> None:
        """A workspace file (octet-stream) must never serve as a manifest, a bundle or a report."""
        store = under_test.store
        as_bytes = store.put(b'{"entries": []}')
        as_manifest = BlobRef(as_bytes.sha256, as_bytes.size, MANIFEST_MEDIA_TYPE)
        assert store.contains(as_bytes.sha256) and not store.contains(as_bytes.sha256, MANIFEST_MEDIA_TYPE)
        with pytest.raises(BlobIntegrityError):
            store.get(as_manifest)
        as_text = store.put(b"hello\n", TEXT_PLAIN)
        assert as_text.media_type == TEXT_PLAIN and store.contains(as_text.sha256, TEXT_PLAIN)
        assert not store.contains(as_text.sha256)
        with pytest.raises(BlobIntegrityError):
            store.get(BlobRef(as_text.sha256, as_text.size))
        # The same bytes under two types are two blobs; each reads back as itself.
        again = store.put(b"hello\n")
        assert again.sha256 == as_text.sha256 and store.get(again) == store.get(as_text) == b"hello\n"

    def test_putting_the_same_bytes_again_changes_nothing(self, under_test: StoreUnderTest) -> None:
        store = under_test.store
        first = store.put(b"same")
        assert store.put(b"same") == first
        assert store.get(first) == b"same"
        other = store.put(b"other")
        assert other.sha256 != first.sha256 and store.get(first) == b"same" and store.get(other) == b"other"

    def test_empty_and_large_blobs(self, under_test: StoreUnderTest) -> None:
        store = under_test.store
        empty = store.put(b"")
        large = b"".join(hashlib.sha256(str(n).encode()).digest() for n in range(1 << 15))  # 1 MiB
        ref = store.put(large)
        assert store.get(empty) == b"" and empty.size == 0
        assert store.get(ref) == large and ref.size == len(large)

    def test_a_missing_blob_is_refused(self, under_test: StoreUnderTest) -> None:
        store = under_test.store
        missing = BlobRef.of(b"never put")
        assert not store.contains(missing.sha256)
        with pytest.raises(BlobIntegrityError):
            store.get(missing)

    def test_bytes_that_do_not_match_their_ref_are_refused(self, under_test: StoreUnderTest) -> None:
        store = under_test.store
        ref = store.put(b"the recorded payload")
        with pytest.raises(BlobIntegrityError):  # the right hash, the wrong size
            store.get(BlobRef(ref.sha256, ref.size + 1, ref.media_type))
        under_test.corrupt(ref.sha256)
        with pytest.raises(BlobIntegrityError):
            store.get(ref)

    def test_concurrent_puts_of_the_same_and_of_different_blobs(self, under_test: StoreUnderTest) -> None:
        """Sandbox snapshots put from several threads at once (one pool per worker)."""
        store = under_test.store
        payloads = [b"shared" * 1000] * 4 + [b"own-%d" % n * 1000 for n in range(4)]
        refs: list[BlobRef] = []
        lock = threading.Lock()

        def put(data: bytes) -> None:
            ref = store.put(data)
            with lock:
                refs.append(ref)

        threads = [threading.Thread(target=put, args=(data,)) for data in payloads]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(refs, key=lambda r: r.sha256) == sorted(
            map(BlobRef.of, payloads), key=lambda r: r.sha256
        )
        assert all(store.get(BlobRef.of(data)) == data for data in payloads)


class TestStoresWithoutAServer(ObjectStoreContract):
    @pytest.fixture(params=sorted(STORES))
    def under_test(self, request: pytest.FixtureRequest, tmp_path: Path) -> StoreUnderTest:
        return STORES[request.param](tmp_path)
