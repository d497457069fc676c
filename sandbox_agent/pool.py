"""Warm pools: sandboxes created ahead of need, so that acquiring one is a hand-over, not a container start.

One pool per `SandboxSpec` (image and quotas: sandboxes of equal specs are interchangeable). Background
threads keep `size` sandboxes ready; an empty pool does not make its caller wait for the refill but
creates one on the spot (counted as a miss). A sandbox handed out is never taken back: `release` destroys
it in the background, since whatever ran in it may have left anything behind. `WarmPools` closes a spec's
pool once it has not been used for a while (`idle_s`), so specs no longer used keep no containers.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType

from sandbox_agent.backend import Sandbox, SandboxBackend
from sandbox_agent.defaults import DEFAULT_POOL_IDLE_S
from sandbox_agent.errors import SandboxError
from sandbox_agent.limits import SandboxSpec
from streams.telemetry import metrics

log = logging.getLogger(__name__)

RETRY_AFTER_FAILURE_S = 1.0
IDLE_CHECK_MAX_S = 30.0


class PoolClosed(SandboxError):
    """An acquire from a pool that was closed."""


@dataclass(frozen=True, slots=True)
class PoolStats:
    ready: int
    hits: int  # acquisitions served from the pool
    misses: int  # acquisitions that had to create a sandbox on the spot
    created: int
    destroyed: int
    failures: int  # background creations that failed


class WarmPool:
    def __init__(
        self,
        backend: SandboxBackend,
        spec: SandboxSpec,
        size: int,
        *,
        creators: int = 1,
        retry_after_s: float = RETRY_AFTER_FAILURE_S,
    ) -> None:
        if size < 0 or creators < 1:
            raise ValueError("a pool has a size of 0 or more and at least one creator thread")
        self.backend = backend
        self.spec = spec
        self.size = size
        self.retry_after_s = retry_after_s
        self._ready: deque[Sandbox] = deque()
        self._creating = 0
        self._closed = False
        self._changed = threading.Condition()
        self._dirty: queue.Queue[Sandbox | None] = queue.Queue()
        self._counts = {"hits": 0, "misses": 0, "created": 0, "destroyed": 0, "failures": 0}
        self._threads = [
            threading.Thread(target=self._refill, name=f"pool-create-{i}", daemon=True)
            for i in range(creators)
        ]
        self._threads.append(threading.Thread(target=self._destroy_dirty, name="pool-destroy", daemon=True))

    def start(self) -> WarmPool:
        for thread in self._threads:
            thread.start()
        return self

    def __enter__(self) -> WarmPool:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def acquire(self) -> Sandbox:
        """A ready sandbox, now: from the pool when it has one, else freshly created."""
        with self._changed:
            if self._closed:
                raise PoolClosed("the pool is closed")
            if self._ready:
                self._counts["hits"] += 1
                sandbox = self._ready.popleft()
                self._changed.notify_all()  # a refill thread has room again
                return sandbox
            self._counts["misses"] += 1
        sandbox = self.backend.create(self.spec)
        self._count("created")
        return sandbox

    def release(self, sandbox: Sandbox) -> None:
        """Give a used sandbox back: it is destroyed (in the background), never handed out again."""
        with self._changed:
            if not self._closed:  # before close's end marker, so the destroyer thread still sees it
                self._dirty.put(sandbox)
                return
        self.backend.destroy(sandbox)
        self._count("destroyed")

    def wait_ready(self, count: int | None = None, timeout_s: float = 60.0) -> bool:
        """Block until `count` (default: the pool's size) sandboxes are ready; False on timeout."""
        wanted = self.size if count is None else count
        with self._changed:
            return self._changed.wait_for(lambda: len(self._ready) >= wanted or self._closed, timeout_s)

    def stats(self) -> PoolStats:
        with self._changed:
            return PoolStats(ready=len(self._ready), **self._counts)

    def close(self) -> None:
        """Stop refilling; destroy the ready sandboxes and those released. Sandboxes handed out are the
        holders' to release."""
        with self._changed:
            if self._closed:
                return
            self._closed = True
            for sandbox in self._ready:
                self._dirty.put(sandbox)
            self._ready.clear()
            self._dirty.put(None)  # the destroyer's end marker: nothing is queued after it
            self._changed.notify_all()
        for thread in self._threads:
            if thread.is_alive():
                thread.join()

    def _count(self, name: str) -> None:
        with self._changed:
            self._counts[name] += 1

    def _refill(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._closed or len(self._ready) + self._creating < self.size)
                if self._closed:
                    return
                self._creating += 1
            sandbox = self._create_one()
            with self._changed:
                self._creating -= 1
                if sandbox is not None and not self._closed:
                    self._ready.append(sandbox)
                    self._changed.notify_all()
                    continue
            if sandbox is not None:  # closed while it was being made
                self.backend.destroy(sandbox)
                self._count("destroyed")

    def _create_one(self) -> Sandbox | None:
        try:
            sandbox = self.backend.create(self.spec)
        except SandboxError as exc:
            self._count("failures")
            log.warning("warm pool for %s: creating a sandbox failed: %s", self.spec.image, exc)
            with self._changed:  # back off, but wake at once when closed
                self._changed.wait_for(lambda: self._closed, self.retry_after_s)
            return None
        self._count("created")
        return sandbox

    def _destroy_dirty(self) -> None:
        while (sandbox := self._dirty.get()) is not None:
            try:
                self.backend.destroy(sandbox)
                self._count("destroyed")
            except SandboxError as exc:
                log.warning("warm pool: destroying sandbox %s failed: %s", sandbox.id[:12], exc)


def idle_specs(last_used: Mapping[SandboxSpec, float], now: float, idle_s: float) -> list[SandboxSpec]:
    """The specs whose pools were last used (an acquire or a release) `idle_s` or more before `now`."""
    return [spec for spec, used in last_used.items() if now - used >= idle_s]


class WarmPools:
    """A warm pool per spec, made on first use, and closed (its warm sandboxes destroyed) once no sandbox
    of its spec was acquired or released for `idle_s` seconds: a spec no episode uses any more (a task
    retired, its image rebuilt under a new tag) must not keep `size` containers running for ever. A later
    acquire of that spec makes a new pool. None: pools are never closed before `close`."""

    def __init__(
        self,
        backend: SandboxBackend,
        size: int,
        *,
        creators: int = 1,
        idle_s: float | None = DEFAULT_POOL_IDLE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if idle_s is not None and not idle_s > 0:
            raise ValueError("a pool's idle time is positive (or None: never closed)")
        self.backend = backend
        self.size = size
        self.creators = creators
        self.idle_s = idle_s
        self._clock = clock
        self._pools: dict[SandboxSpec, WarmPool] = {}
        self._used: dict[SandboxSpec, float] = {}
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._janitor: threading.Thread | None = None
        if idle_s is not None:
            self._janitor = threading.Thread(
                target=self._close_idle_ones, args=(min(idle_s / 4, IDLE_CHECK_MAX_S),), name="pool-janitor",
                daemon=True,
            )  # fmt: skip
            self._janitor.start()

    def pool(self, spec: SandboxSpec) -> WarmPool:
        with self._lock:
            self._used[spec] = self._clock()
            pool = self._pools.get(spec)
            if pool is None:
                pool = self._pools[spec] = WarmPool(
                    self.backend, spec, self.size, creators=self.creators
                ).start()
            return pool

    def acquire(self, spec: SandboxSpec) -> Sandbox:
        started = time.perf_counter()
        try:
            sandbox = self.pool(spec).acquire()
        except PoolClosed:  # closed as idle between the look-up and the acquire: a new pool serves
            sandbox = self.pool(spec).acquire()
        metrics.metrics().record(metrics.ACQUIRE_DURATION, time.perf_counter() - started)
        return sandbox

    def ready(self) -> int:
        """Warm sandboxes ready in every pool (the pool-size gauge)."""
        with self._lock:
            pools = list(self._pools.values())
        return sum(pool.stats().ready for pool in pools)

    def specs(self) -> list[SandboxSpec]:
        """The specs that have an open pool."""
        with self._lock:
            return list(self._pools)

    def release(self, sandbox: Sandbox) -> None:
        with self._lock:
            pool = self._pools.get(sandbox.spec)
            if pool is not None:
                self._used[sandbox.spec] = self._clock()
        if pool is not None:
            pool.release(sandbox)
        else:  # its pool was closed as idle while the sandbox was held: no new pool just to destroy it
            self.backend.destroy(sandbox)

    def close_idle(self) -> list[SandboxSpec]:
        """Close the pools idle for `idle_s` or more now; returns their specs."""
        if self.idle_s is None:
            return []
        with self._lock:
            idle = idle_specs({spec: self._used[spec] for spec in self._pools}, self._clock(), self.idle_s)
            pools = [self._pools.pop(spec) for spec in idle]
        for pool in pools:
            log.info("warm pool for %s idle for %.0f s: closed", pool.spec.image, self.idle_s)
            pool.close()
        return idle

    def _close_idle_ones(self, every_s: float) -> None:
        while not self._closed.wait(every_s):
            try:
                self.close_idle()
            except Exception:  # a dead janitor would let idle pools run for ever, silently
                log.exception("warm pools: closing idle pools failed")

    def close(self) -> None:
        self._closed.set()
        if self._janitor is not None and self._janitor is not threading.current_thread():
            self._janitor.join()
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close()
