from __future__ import annotations

import threading
from pathlib import Path

import pytest

from sandbox_agent.backend import Sandbox
from sandbox_agent.errors import SandboxError
from sandbox_agent.limits import SandboxSpec
from sandbox_agent.local_backend import LocalProcessBackend
from sandbox_agent.pool import WarmPool, WarmPools, idle_specs
from schemas.blobs import MemoryObjectStore

SPEC = SandboxSpec("local")


class RecordingBackend(LocalProcessBackend):
    """The local backend, noting what it creates and destroys (and failing creations on demand)."""

    def __init__(self, root: Path) -> None:
        super().__init__(MemoryObjectStore(), root)
        self.created: list[str] = []
        self.spec_of: dict[str, SandboxSpec] = {}
        self.destroyed: list[str] = []
        self.failing = False
        self.lock = threading.Lock()

    def create(self, spec: SandboxSpec) -> Sandbox:
        if self.failing:
            raise SandboxError("engine down")
        sandbox = super().create(spec)
        with self.lock:
            self.created.append(sandbox.id)
            self.spec_of[sandbox.id] = spec
        return sandbox

    def destroy(self, sandbox: Sandbox) -> None:
        super().destroy(sandbox)
        with self.lock:
            self.destroyed.append(sandbox.id)


@pytest.fixture
def backend(tmp_path: Path) -> RecordingBackend:
    return RecordingBackend(tmp_path)


def test_acquiring_from_a_warm_pool_hands_over_a_ready_sandbox(backend: RecordingBackend) -> None:
    with WarmPool(backend, SPEC, size=3) as pool:
        assert pool.wait_ready(timeout_s=30)
        sandbox = pool.acquire()
        assert sandbox.id in backend.created and pool.stats().hits == 1
        assert backend.exec(sandbox, ["sh", "-c", "echo ready"]).stdout == "ready\n"
        assert pool.wait_ready(timeout_s=30)  # refilled
        pool.release(sandbox)


def test_released_sandboxes_are_destroyed_and_never_handed_out_again(backend: RecordingBackend) -> None:
    with WarmPool(backend, SPEC, size=2) as pool:
        seen = []
        for _ in range(6):
            assert pool.wait_ready(timeout_s=30)
            sandbox = pool.acquire()
            seen.append(sandbox.id)
            pool.release(sandbox)
    assert len(set(seen)) == 6
    assert set(seen) <= set(backend.destroyed)


def test_an_empty_pool_creates_on_the_spot(backend: RecordingBackend) -> None:
    with WarmPool(backend, SPEC, size=0) as pool:
        sandbox = pool.acquire()
        assert pool.stats().misses == 1 and sandbox.id in backend.created
        pool.release(sandbox)


def test_closing_destroys_every_sandbox_the_pool_still_holds(backend: RecordingBackend) -> None:
    pool = WarmPool(backend, SPEC, size=3).start()
    assert pool.wait_ready(timeout_s=30)
    held = pool.acquire()
    pool.close()
    assert set(backend.created) - set(backend.destroyed) == {held.id}  # the one handed out is the holder's
    pool.release(held)  # after close: destroyed at once
    assert set(backend.created) == set(backend.destroyed)
    with pytest.raises(SandboxError, match="closed"):
        pool.acquire()


def test_failed_creations_are_counted_and_retried(backend: RecordingBackend) -> None:
    backend.failing = True
    with WarmPool(backend, SPEC, size=1, retry_after_s=0.01) as pool:
        while pool.stats().failures < 2:  # it keeps trying
            threading.Event().wait(0.05)
        assert pool.stats().ready == 0
        with pytest.raises(SandboxError, match="engine down"):
            pool.acquire()
        backend.failing = False
        assert pool.wait_ready(timeout_s=30)


def test_there_is_one_pool_per_spec(backend: RecordingBackend) -> None:
    pools = WarmPools(backend, size=1)
    try:
        other = SandboxSpec("other-image")
        assert pools.pool(SPEC) is pools.pool(SPEC) and pools.pool(other) is not pools.pool(SPEC)
        sandbox = pools.acquire(other)
        assert sandbox.spec == other
        pools.release(sandbox)
    finally:
        pools.close()
    assert set(backend.created) == set(backend.destroyed)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_idle_specs_are_those_unused_for_the_idle_time() -> None:
    other = SandboxSpec("other-image")
    assert idle_specs({SPEC: 10.0, other: 50.0}, now=70.0, idle_s=60.0) == [SPEC]
    assert idle_specs({SPEC: 10.0, other: 50.0}, now=69.9, idle_s=60.0) == []


def test_a_pool_unused_for_its_idle_time_is_closed_and_its_warm_sandboxes_destroyed(
    backend: RecordingBackend,
) -> None:
    clock, other = Clock(), SandboxSpec("other-image")
    pools = WarmPools(backend, size=2, idle_s=60.0, clock=clock)
    try:
        retired, used = pools.pool(SPEC), pools.pool(other)
        assert retired.wait_ready(timeout_s=30) and used.wait_ready(timeout_s=30)
        held = pools.acquire(SPEC)  # held by an episode across the pool's closing
        assert retired.wait_ready(timeout_s=30)
        clock.now += 30
        pools.release(pools.acquire(other))
        clock.now += 40  # SPEC: 70 s unused; other: 40 s
        assert pools.close_idle() == [SPEC]
        assert pools.specs() == [other]
        assert retired.stats().ready == 0 and used.stats().ready == 2
        with backend.lock:
            alive = set(backend.created) - set(backend.destroyed)
        assert {id for id in alive if backend.spec_of[id] == SPEC} == {held.id}  # only the held one is left
        pools.release(held)  # its pool is gone: destroyed at once, no new pool made for it
        assert held.id in backend.destroyed and pools.specs() == [other]
        again = pools.acquire(SPEC)  # the spec is used again: a new pool
        assert again.spec == SPEC and set(pools.specs()) == {SPEC, other}
        pools.release(again)
    finally:
        pools.close()
    assert set(backend.created) == set(backend.destroyed)


def test_pools_without_an_idle_time_are_never_closed_before_close(backend: RecordingBackend) -> None:
    clock = Clock()
    pools = WarmPools(backend, size=1, idle_s=None, clock=clock)
    try:
        pools.pool(SPEC)
        clock.now += 10**9
        assert pools.close_idle() == [] and pools.specs() == [SPEC]
    finally:
        pools.close()


def test_the_janitor_closes_idle_pools_by_itself(backend: RecordingBackend) -> None:
    pools = WarmPools(backend, size=1, idle_s=0.2)
    try:
        pool = pools.pool(SPEC)
        assert pool.wait_ready(timeout_s=30)
        closed = threading.Event()
        while not closed.wait(0.05):
            if not pools.specs():
                closed.set()
        assert pool.stats().ready == 0
    finally:
        pools.close()
    assert set(backend.created) == set(backend.destroyed)
