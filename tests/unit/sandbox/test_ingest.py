"""Fetched tar streams go into the store file by file, in whatever pieces they arrive."""

from __future__ import annotations

import hashlib
import threading

import pytest

from sandbox_agent.ingest import FetchedFile, IngestError, TarIngest
from sandbox_agent.tarball import files_tar
from schemas.blobs import OCTET_STREAM, BlobRef, MemoryObjectStore

pytestmark = pytest.mark.unit

BODIES = {
    "x.py": b"print(1)\n",
    "caf\udce9/-rf": b"\x00\xff" * 100,
    "a" * 150: b"long name",
    "big": b"z" * 300_000,
}


def pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize("size", [1, 511, 4096, 1 << 20])
def test_every_file_is_stored_whatever_the_pieces(size: int) -> None:
    store = MemoryObjectStore()
    ingest = TarIngest(store, in_flight_bytes=1 << 20)
    for piece in pieces(files_tar(BODIES), size):
        ingest.write(piece)
    files = ingest.finish()
    assert files == {
        path: FetchedFile(0o644, len(body), hashlib.sha256(body).hexdigest()) for path, body in BODIES.items()
    }
    for path, body in BODIES.items():
        assert store.get(BlobRef.of(body)) == body, path


def test_a_stream_that_is_not_a_tar_is_an_error_not_a_hang() -> None:
    ingest = TarIngest(MemoryObjectStore(), in_flight_bytes=1 << 20)
    for piece in pieces(b"FORGED\n" * 100_000, 4096):  # far more than the queue holds
        ingest.write(piece)
    with pytest.raises(IngestError):
        ingest.finish()


def test_a_store_that_fails_is_an_error() -> None:
    class Failing(MemoryObjectStore):
        def put(self, data: bytes, media_type: str = OCTET_STREAM) -> BlobRef:
            raise OSError("disk full")

    ingest = TarIngest(Failing(), in_flight_bytes=1 << 20)
    ingest.write(files_tar(BODIES))
    with pytest.raises(IngestError, match="disk full"):
        ingest.finish()


def test_puts_in_flight_stay_within_the_budget() -> None:
    class Slow(MemoryObjectStore):
        def __init__(self) -> None:
            super().__init__()
            self.lock = threading.Lock()
            self.in_flight = self.most = 0

        def put(self, data: bytes, media_type: str = OCTET_STREAM) -> BlobRef:
            with self.lock:
                self.in_flight += len(data)
                self.most = max(self.most, self.in_flight)
            threading.Event().wait(0.01)
            with self.lock:
                self.in_flight -= len(data)
            return super().put(data, media_type)

    store = Slow()
    bodies = {f"f{i}": bytes([i]) * 10_000 for i in range(40)}
    ingest = TarIngest(store, in_flight_bytes=25_000, put_threads=8)
    ingest.write(files_tar(bodies))
    assert len(ingest.finish()) == 40
    assert store.most <= 25_000  # two files of 10 kB at a time, never eight


def test_closing_a_cut_stream_neither_raises_nor_hangs() -> None:
    ingest = TarIngest(MemoryObjectStore(), in_flight_bytes=1 << 20)
    ingest.write(files_tar(BODIES)[:700])
    ingest.close()
