"""Files fetched from a sandbox go into the object store as the tar stream arrives, never all at once.

A snapshot used to hold the fetched workspace three times (the stream's buffer, a copy, every file's body
taken out of it): a 1 GiB workspace could cost 3 GiB on the host, per concurrent step. `TarIngest` is the
sink the tar stream is written into; a thread parses it (tarfile's streaming mode), hashes each regular
file and hands it to the store on a few put threads. Memory is bounded by the largest file, not by the
workspace: at most the file being read (about twice, while its pieces are joined), the puts in flight
(`in_flight_bytes`, or one file larger than that), and `QUEUE_CHUNKS` pieces of the stream. When the
store is slower than the sandbox, the queue fills and the writer waits: the sandbox's tar is held back,
not buffered.

What remains: a single file as large as the workspace quota is still held in memory (the object store
takes whole blobs), and a restore still builds the whole tree's tar in memory once (tarball.tree_tar).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import queue
import tarfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from sandbox_agent.tarball import ENCODING, ERRORS
from schemas.blobs import ObjectStore

QUEUE_CHUNKS = 16  # pieces of the stream (each at most a socket read) waiting to be parsed
_READ_PIECE = 1 << 20
_WAIT_S = 0.5


@dataclass(frozen=True, slots=True)
class FetchedFile:
    """A regular file that came out of a sandbox and is now in the store."""

    mode: int
    size: int
    sha256: str


class IngestError(ValueError):
    """The tar stream did not parse, or the store refused a file."""


class _Stream:
    """A file object over the queue's pieces (what tarfile's streaming mode reads from)."""

    def __init__(self, pieces: queue.Queue[bytes | None]) -> None:
        self._pieces = pieces
        self._buffer = b""
        self._ended = False
        self._position = 0

    def read(self, size: int = -1, /) -> bytes:
        while not self._ended and (size < 0 or len(self._buffer) < size):
            piece = self._pieces.get()
            if piece is None:
                self._ended = True
            else:
                self._buffer += piece
        if size < 0:
            size = len(self._buffer)
        data, self._buffer = self._buffer[:size], self._buffer[size:]
        self._position += len(data)
        return data

    def tell(self) -> int:
        return self._position

    def write(self, data: bytes, /) -> int:
        raise io.UnsupportedOperation("a read-only stream")

    def seek(self, position: int, /) -> int:
        raise io.UnsupportedOperation("a stream cannot seek")

    def close(self) -> None:
        return None


class _Budget:
    """Bytes of puts in flight; one file larger than the budget may go when nothing else is in flight."""

    def __init__(self, most: int) -> None:
        self._most = most
        self._used = 0
        self._cond = threading.Condition()

    def take(self, size: int) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._used == 0 or self._used + size <= self._most)
            self._used += size

    def give(self, size: int) -> None:
        with self._cond:
            self._used -= size
            self._cond.notify_all()


class TarIngest:
    """A sink for `tar -c` output: regular files are hashed and stored as they arrive (see the module)."""

    def __init__(self, objects: ObjectStore, *, in_flight_bytes: int, put_threads: int = 4) -> None:
        self._objects = objects
        self._pieces: queue.Queue[bytes | None] = queue.Queue(maxsize=QUEUE_CHUNKS)
        self._budget = _Budget(in_flight_bytes)
        self._puts = ThreadPoolExecutor(max(1, put_threads), thread_name_prefix="snapshot-put")
        self._pending: list[Future[None]] = []
        self._error: BaseException | None = None
        self._done = threading.Event()
        self.files: dict[str, FetchedFile] = {}
        self.total = 0
        self._parser = threading.Thread(target=self._parse, name="snapshot-ingest", daemon=True)
        self._parser.start()

    def write(self, data: bytes) -> None:
        self.total += len(data)
        while not self._done.is_set():  # a parser that failed reads no more: drop the rest
            try:
                self._pieces.put(data, timeout=_WAIT_S)
                return
            except queue.Full:
                continue

    def finish(self) -> dict[str, FetchedFile]:
        """The files stored, once the stream has ended; raises IngestError if any of it failed."""
        try:
            while not self._done.is_set():
                try:
                    self._pieces.put(None, timeout=_WAIT_S)
                    break
                except queue.Full:
                    continue
            self._parser.join()
            for pending in self._pending:
                pending.result()
        except Exception as exc:
            self._error = self._error or exc
        finally:
            self._puts.shutdown(wait=True)
        if self._error is not None:
            raise IngestError(f"storing the fetched files failed: {self._error}") from self._error
        return self.files

    def close(self) -> None:
        """The command failed: stop storing, wait for what is in flight, raise nothing."""
        self._error = self._error or IngestError("abandoned")
        with contextlib.suppress(IngestError):
            self.finish()

    def _parse(self) -> None:
        stream = _Stream(self._pieces)
        try:
            with tarfile.open(fileobj=stream, mode="r|", encoding=ENCODING, errors=ERRORS) as tar:
                for member in tar:
                    if not member.isreg() or self._error is not None:
                        continue
                    body = tar.extractfile(member)
                    if body is None:
                        continue
                    pieces: list[bytes] = []
                    digest = hashlib.sha256()
                    while piece := body.read(_READ_PIECE):
                        digest.update(piece)
                        pieces.append(piece)
                    data = b"".join(pieces)
                    del pieces
                    sha256 = digest.hexdigest()
                    self.files[member.name] = FetchedFile(member.mode, len(data), sha256)
                    self._store(sha256, data)
        except Exception as exc:
            self._error = self._error or exc
        finally:
            self._done.set()  # what is still written (tar's end padding, or all after an error) is dropped

    def _store(self, sha256: str, data: bytes) -> None:
        if self._objects.contains(sha256):
            return
        size = len(data)
        self._budget.take(size)

        def put() -> None:
            try:
                self._objects.put(data)
            finally:
                self._budget.give(size)

        self._pending.append(self._puts.submit(put))  # a done future no longer holds the body
