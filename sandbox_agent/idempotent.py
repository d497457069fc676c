"""Idempotent steps: every exec carries a key (episode id, step, attempt), and a key runs at most once.

A request delivered twice (a redelivery after a rebalance, a retry by the episode's owner) is answered
from the recorded result instead of running again: the command's side effects happen once, and both
answers carry the same output and the same snapshot id. Results are kept in a local RocksDB (rocksdict).
A new attempt of a step is a new key: it runs again, on purpose.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Protocol

from rocksdict import Options, Rdict

from sandbox_agent.backend import DEFAULT_EXEC_LIMITS, Sandbox, SandboxBackend
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


class MemoryResultStore:
    def __init__(self) -> None:
        self._results: dict[ExecKey, StepResult] = {}

    def get(self, key: ExecKey) -> StepResult | None:
        return self._results.get(key)

    def put(self, key: ExecKey, result: StepResult) -> None:
        self._results[key] = result


class RocksResultStore:
    """Results in a RocksDB folder (one per worker process: RocksDB takes a lock on it)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = Rdict(str(path), Options(raw_mode=True))

    def get(self, key: ExecKey) -> StepResult | None:
        raw = self._db.get(key.encode())
        return None if raw is None else StepResult.from_json(json.loads(raw))

    def put(self, key: ExecKey, result: StepResult) -> None:
        self._db[key.encode()] = json.dumps(result.to_json(), separators=(",", ":")).encode()

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> RocksResultStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


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
    ) -> StepResult:
        with self._locks[hash(key) % _LOCK_STRIPES]:
            recorded = self.results.get(key)
            if recorded is not None:
                return recorded
            result = self.backend.exec(sandbox, argv, limits=limits, stdin=stdin)
            with tracing.child_span("sandbox.snapshot"):
                step = StepResult(result, str(self.backend.snapshot(sandbox)))
            self.results.put(key, step)
            return step
