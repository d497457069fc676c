from __future__ import annotations

from pathlib import Path

import pytest

from sandbox_agent.backend import Sandbox
from sandbox_agent.idempotent import (
    ExecKey,
    IdempotentExecutor,
    MemoryResultStore,
    ResultStore,
    RocksResultStore,
)
from sandbox_agent.limits import SandboxSpec
from sandbox_agent.local_backend import LocalProcessBackend
from sandbox_agent.results import ExecResult, StepResult
from schemas.blobs import MemoryObjectStore

APPEND = ["sh", "-c", "echo ran >> log; wc -l < log"]


@pytest.fixture
def backend(tmp_path: Path) -> LocalProcessBackend:
    return LocalProcessBackend(MemoryObjectStore(), tmp_path / "sandboxes")


@pytest.fixture
def sandbox(backend: LocalProcessBackend) -> Sandbox:
    return backend.create(SandboxSpec("local"))


@pytest.fixture(params=["memory", "rocksdb"])
def results(request: pytest.FixtureRequest, tmp_path: Path) -> ResultStore:
    if request.param == "memory":
        return MemoryResultStore()
    store = RocksResultStore(tmp_path / "results")
    request.addfinalizer(store.close)
    return store


def test_a_repeated_key_returns_the_recorded_result_without_running(
    backend: LocalProcessBackend, sandbox: Sandbox, results: ResultStore
) -> None:
    executor = IdempotentExecutor(backend, results)
    key = ExecKey("ep-1", step=4, attempt=1)
    first = executor.run(sandbox, key, APPEND)
    assert executor.run(sandbox, key, APPEND) == first
    assert backend.read_file(sandbox, "log") == b"ran\n"
    assert first.result.stdout.strip() == "1" and first.snapshot_id == str(backend.snapshot(sandbox))


def test_another_step_or_attempt_runs(
    backend: LocalProcessBackend, sandbox: Sandbox, results: ResultStore
) -> None:
    executor = IdempotentExecutor(backend, results)
    executor.run(sandbox, ExecKey("ep-1", 4, 1), APPEND)
    executor.run(sandbox, ExecKey("ep-1", 4, 2), APPEND)
    executor.run(sandbox, ExecKey("ep-1", 5, 1), APPEND)
    executor.run(sandbox, ExecKey("ep-2", 4, 1), APPEND)
    assert backend.read_file(sandbox, "log") == b"ran\n" * 4


def test_recorded_results_survive_reopening_the_store(tmp_path: Path) -> None:
    step = StepResult(ExecResult(1, "out", "err\n", True, True, 5, 0, 1.25), "snap-" + "a" * 64 + "-9")
    with RocksResultStore(tmp_path / "db") as store:
        store.put(ExecKey("ep", 1, 1), step)
    with RocksResultStore(tmp_path / "db") as store:
        assert store.get(ExecKey("ep", 1, 1)) == step
        assert store.get(ExecKey("ep", 1, 2)) is None


def test_keys_with_separators_in_the_episode_id_do_not_collide() -> None:
    assert ExecKey("a,1", 2, 3).encode() != ExecKey("a", 1, 23).encode()
