from __future__ import annotations

import json
from pathlib import Path

import pytest
from rocksdict import Options, Rdict

from sandbox_agent.backend import Sandbox
from sandbox_agent.idempotent import (
    ExecKey,
    IdempotentExecutor,
    MemoryResultStore,
    ResultStore,
    Retention,
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


STEP = StepResult(ExecResult(0, "out", "", False, False, 0, 0, 0.5), "snap-" + "b" * 64 + "-1")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def store_of(
    kind: str, path: Path, retention: Retention | None = None, clock: Clock | None = None
) -> ResultStore:
    retention = retention or Retention()
    if kind == "memory":
        return MemoryResultStore(retention, clock or Clock())
    return RocksResultStore(path, retention, clock or Clock())


def close(store: ResultStore) -> None:
    if isinstance(store, RocksResultStore):
        store.close()


@pytest.mark.parametrize("kind", ["memory", "rocksdb"])
def test_an_ended_episode_is_forgotten_and_no_other(kind: str, tmp_path: Path) -> None:
    store = store_of(kind, tmp_path / "db")
    episodes = ["ep-1", "ep-10", "ep-", 'ep-1"', "ep-1,2", "épisode"]
    for episode in episodes:
        for step in range(3):
            store.put(ExecKey(episode, step, 1), STEP)
    store.forget_episode("ep-1")
    store.forget_episode("épisode")
    assert all(store.get(ExecKey("ep-1", step, 1)) is None for step in range(3))
    assert store.get(ExecKey("épisode", 0, 1)) is None
    for episode in ("ep-10", "ep-", 'ep-1"', "ep-1,2"):
        assert all(store.get(ExecKey(episode, step, 1)) == STEP for step in range(3)), episode
    close(store)


@pytest.mark.parametrize("kind", ["memory", "rocksdb"])
def test_a_store_keeps_at_most_its_cap_newest_first(kind: str, tmp_path: Path) -> None:
    store = store_of(kind, tmp_path / "db", Retention(max_entries=3))
    keys = [ExecKey(f"ep-{n}", 0, 1) for n in range(5)]
    for key in keys:
        store.put(key, STEP)
    assert [store.get(key) is not None for key in keys] == [False, False, True, True, True]
    assert len(store) == 3
    close(store)


@pytest.mark.parametrize("kind", ["memory", "rocksdb"])
def test_results_older_than_the_retention_are_dropped(kind: str, tmp_path: Path) -> None:
    clock = Clock()
    store = store_of(kind, tmp_path / "db", Retention(max_age_s=60), clock)
    store.put(ExecKey("old", 0, 1), STEP)
    clock.now += 50
    store.put(ExecKey("newer", 0, 1), STEP)
    clock.now += 20  # "old" is 70 s old now, "newer" 20 s
    store.put(ExecKey("newest", 0, 1), STEP)
    assert store.get(ExecKey("old", 0, 1)) is None
    assert store.get(ExecKey("newer", 0, 1)) == STEP
    close(store)


def test_the_bound_holds_across_restarts_and_for_a_store_written_before_the_index(tmp_path: Path) -> None:
    legacy = Rdict(
        str(tmp_path / "db"), Options(raw_mode=True)
    )  # results only, as before this store had bounds
    for n in range(5):
        legacy[ExecKey(f"ep-{n}", 0, 1).encode()] = json.dumps(STEP.to_json()).encode()
    legacy.close()
    with RocksResultStore(tmp_path / "db", Retention(max_entries=4)) as store:
        assert len(store) == 4
        store.put(ExecKey("new", 0, 1), STEP)
    with RocksResultStore(tmp_path / "db", Retention(max_entries=2)) as store:
        assert len(store) == 2
        assert store.get(ExecKey("new", 0, 1)) == STEP
        assert sum(store.get(ExecKey(f"ep-{n}", 0, 1)) is not None for n in range(5)) == 1


def test_a_forgotten_step_runs_again(backend: LocalProcessBackend, sandbox: Sandbox, tmp_path: Path) -> None:
    with RocksResultStore(tmp_path / "db") as results:
        executor = IdempotentExecutor(backend, results)
        executor.run(sandbox, ExecKey("ep-1", 0, 1), APPEND)
        results.forget_episode("ep-1")
        executor.run(sandbox, ExecKey("ep-1", 0, 1), APPEND)
    assert backend.read_file(sandbox, "log") == b"ran\n" * 2
