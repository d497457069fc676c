"""Idempotent steps: every exec carries a key (episode id, step, attempt), and a key runs at most once.

A request delivered twice (a redelivery after a rebalance, a retry by the episode's owner) is answered
from the recorded result instead of running again: the command's side effects happen once, and both
answers carry the same output and the same snapshot id. Results are kept in a local RocksDB (rocksdict).
A new attempt of a step is a new key: it runs again, on purpose.

The store never grows without bound: an episode's results are dropped when the episode ends (the worker
hears of it on `episode.events`), and whatever is not dropped so (an end the worker missed) goes once the
store holds more than `Retention.max_entries` results or a result is older than `Retention.max_age_s`,
oldest first. A request delivered again after its result was dropped runs again: the owner rejects the
second answer of an ended episode as benign, and a redelivery days late is not a case at-least-once
delivery produces.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Protocol

from rocksdict import Options, Rdict, WriteBatch

from sandbox_agent.backend import DEFAULT_EXEC_LIMITS, Sandbox, SandboxBackend
from sandbox_agent.defaults import DEFAULT_MAX_STEPS_KEPT, DEFAULT_STEPS_KEPT_S
from sandbox_agent.limits import ExecLimits
from sandbox_agent.results import StepResult
from streams.telemetry import tracing

_LOCK_STRIPES = 64


@dataclass(frozen=True, slots=True)
class ExecKey:
    episode_id: str
    step: int
    attempt: int

    def encode(self) -> bytes:
        return json.dumps([self.episode_id, self.step, self.attempt], separators=(",", ":")).encode()


class ResultStore(Protocol):
    def get(self, key: ExecKey) -> StepResult | None: ...

    def put(self, key: ExecKey, result: StepResult) -> None: ...

    def forget_episode(self, episode_id: str) -> None:
        """Drop every result of `episode_id` (it ended: no request of it is answered any more)."""
        ...

    def __len__(self) -> int:
        """How many results are kept (at most: see `RocksResultStore`)."""
        ...


@dataclass(frozen=True, slots=True)
class Retention:
    """How many results a store keeps, and for how long, whatever episode ends it hears of."""

    max_entries: int = DEFAULT_MAX_STEPS_KEPT
    max_age_s: float = DEFAULT_STEPS_KEPT_S

    def __post_init__(self) -> None:
        if self.max_entries < 1 or not self.max_age_s > 0:
            raise ValueError("a store keeps at least one result, for a positive time")


class MemoryResultStore:
    def __init__(self, retention: Retention = Retention(), clock: Callable[[], float] = time.time) -> None:
        self.retention = retention
        self._clock = clock
        self._results: OrderedDict[ExecKey, tuple[float, StepResult]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: ExecKey) -> StepResult | None:
        with self._lock:
            kept = self._results.get(key)
        return None if kept is None else kept[1]

    def put(self, key: ExecKey, result: StepResult) -> None:
        now = self._clock()
        with self._lock:
            self._results[key] = (now, result)
            self._results.move_to_end(key)
            too_old = now - self.retention.max_age_s
            while self._results and (
                len(self._results) > self.retention.max_entries
                or next(iter(self._results.values()))[0] < too_old
            ):
                self._results.popitem(last=False)

    def forget_episode(self, episode_id: str) -> None:
        with self._lock:
            for key in [key for key in self._results if key.episode_id == episode_id]:
                del self._results[key]

    def __len__(self) -> int:
        return len(self._results)


class RocksResultStore:
    """Results in a RocksDB folder (one per worker process: RocksDB takes a lock on it).

    Beside each result (key: `ExecKey.encode()`, a JSON array, so it starts with `[`) an index entry in
    write order (key: `o` + an 8-byte sequence number; value: the time written, a space, the result's key):
    the oldest results are found without a scan. An episode's results are one key range (its id is the
    array's first element), dropped at once by `forget_episode`; their index entries stay until they are
    the oldest (the count of entries then overstates what is kept: the store prunes a little early, never
    late)."""

    def __init__(
        self, path: Path, retention: Retention = Retention(), clock: Callable[[], float] = time.time
    ) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.retention = retention
        self._clock = clock
        self._db = Rdict(str(path), Options(raw_mode=True))
        self._lock = threading.Lock()
        self._count, self._next = 0, 0
        self._oldest_at = -math.inf  # when the oldest kept result was written: unknown until pruned once
        for index_key, _ in _entries(self._db, _INDEX):
            self._count += 1
            self._next = int.from_bytes(index_key[1:], "big") + 1
        if self._count == 0:
            self._index_unindexed()
        with self._lock:
            self._prune(self._clock())

    def _index_unindexed(self) -> None:
        """A store written before results were indexed: index them now, as if written now."""
        now = self._clock()
        for key, _ in _entries(self._db, _RESULTS):
            self._db[self._index_key(self._next)] = _index_value(now, key)
            self._next += 1
            self._count += 1

    @staticmethod
    def _index_key(sequence: int) -> bytes:
        return _INDEX + sequence.to_bytes(8, "big")

    def get(self, key: ExecKey) -> StepResult | None:
        raw = self._db.get(key.encode())
        return None if raw is None else StepResult.from_json(json.loads(raw))

    def put(self, key: ExecKey, result: StepResult) -> None:
        now = self._clock()
        encoded = key.encode()
        batch = WriteBatch(raw_mode=True)
        batch.put(encoded, json.dumps(result.to_json(), separators=(",", ":")).encode())
        with self._lock:
            batch.put(self._index_key(self._next), _index_value(now, encoded))
            self._db.write(batch)
            self._next += 1
            self._count += 1
            self._prune(now)

    def _prune(self, now: float) -> None:
        """Drop the oldest results while there are too many or they are too old (under the lock)."""
        too_old = now - self.retention.max_age_s
        if self._count <= self.retention.max_entries and self._oldest_at >= too_old:
            return  # the common case, without opening an iterator (a put's cost doubles with one)
        dropped: list[bytes] = []
        self._oldest_at = now
        for index_key, value in _entries(self._db, _INDEX):
            if self._count - len(dropped) <= self.retention.max_entries and _written_at(value) >= too_old:
                self._oldest_at = _written_at(value)
                break
            dropped.append(index_key)
            self._db.delete(value.partition(b" ")[2])
        if dropped:
            self._db.delete_range(dropped[0], dropped[-1] + b"\0")
            self._count -= len(dropped)

    def forget_episode(self, episode_id: str) -> None:
        prefix = ExecKey(episode_id, 0, 0).encode().partition(b",")[0] + b","  # b'["EPISODE",'
        self._db.delete_range(prefix, prefix[:-1] + b"-")  # ',' + 1: every key of the episode, no other

    def __len__(self) -> int:
        """Index entries: the results kept, plus those of forgotten episodes not yet pruned."""
        return self._count

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> RocksResultStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


_RESULTS = b"["
_INDEX = b"o"


def _entries(db: Rdict, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
    """The (key, value) pairs whose key starts with `prefix`, in key order (a raw-mode store: all bytes)."""
    for key, value in db.items(from_key=prefix):
        if not isinstance(key, bytes) or not key.startswith(prefix):
            return
        yield key, value if isinstance(value, bytes) else b""


def _index_value(now: float, key: bytes) -> bytes:
    return f"{now:.3f} ".encode() + key


def _written_at(value: bytes) -> float:
    try:
        return float(value.partition(b" ")[0])
    except ValueError:
        return 0.0  # a damaged entry is the oldest of all: pruned first


class IdempotentExecutor:
    """Runs a keyed step (exec, then snapshot) once; a repeated key returns the recorded `StepResult`."""

    def __init__(self, backend: SandboxBackend, results: ResultStore) -> None:
        self.backend = backend
        self.results = results
        # Two deliveries of one key racing in this process: the second waits and reads the first's result.
        self._locks = [threading.Lock() for _ in range(_LOCK_STRIPES)]

    def run(
        self,
        sandbox: Sandbox,
        key: ExecKey,
        argv: Sequence[str],
        *,
        limits: ExecLimits = DEFAULT_EXEC_LIMITS,
        stdin: bytes | None = None,
        admit: Callable[[StepResult], StepResult] | None = None,
    ) -> StepResult:
        """Exec and snapshot, once per key. `admit` may rewrite the step before it is recorded (the store
        quota rolls a step back): what is recorded is what every duplicate is answered with."""
        with self._locks[hash(key) % _LOCK_STRIPES]:
            recorded = self.results.get(key)
            if recorded is not None:
                return recorded
            result = self.backend.exec(sandbox, argv, limits=limits, stdin=stdin)
            with tracing.child_span("sandbox.snapshot"):
                step = StepResult(result, str(self.backend.snapshot(sandbox)))
            if admit is not None:
                step = admit(step)
            self.results.put(key, step)
            return step
