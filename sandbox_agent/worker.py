"""The sandbox worker's logic: answer a `SandboxRequest` with a `StepExecuted`, once per key, or with an
`EpisodeFailed` when the step cannot be done.

The worker keeps one sandbox per episode it serves. A request whose restore point is not what this
worker's sandbox holds (a new episode, an episode another worker advanced, a crashed sandbox) gets a fresh
sandbox from the warm pool with the episode's last snapshot restored: that is how an episode continues on
any worker after a crash. Each step runs through the idempotent executor (exec, then snapshot), so a
redelivered request is answered from the recorded result. When the episode ends (`episode_ended`, heard
on `episode.events` by `sandbox_agent.episode_ends`) its sandbox is released and its results dropped. On
Kafka, `ROUTE` is served by `streams.kafka.request_loop` (the loop shared with the rollout and verifier)
with `SandboxWorker.handle`.

Failure answers (the owner decides what follows, `streams.owner.on_sandbox_failed`):
* `invalid_action`: a write outside the workspace (refused before it runs) or a patch that does not apply;
* `sandbox_crash`: the sandbox was lost under the step (killed, out of memory, the engine failed). The
  worker does not redo the step itself: the owner re-issues it as the next attempt, which restores the
  last snapshot into a new sandbox, so every redo is a request on the log with its own key. A crash is
  remembered per key, so a redelivered request gets the same answer instead of a second run.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections import OrderedDict

from sandbox_agent.actions import InvalidAction, invalid_outcome, invocation_for
from sandbox_agent.backend import Sandbox, SandboxBackend
from sandbox_agent.defaults import DEFAULT_EPISODE_STORE_QUOTA
from sandbox_agent.errors import SandboxError
from sandbox_agent.idempotent import ExecKey, IdempotentExecutor, ResultStore
from sandbox_agent.limits import ExecLimits, Quotas, SandboxSpec
from sandbox_agent.manifest import SnapshotId
from sandbox_agent.pool import WarmPools
from sandbox_agent.results import StepResult
from sandbox_agent.snapshots import SnapshotStore
from sandbox_agent.store_quota import EpisodeStoreQuota
from schemas import topics
from schemas.blobs import ObjectStore
from schemas.common import FailureClass, Output
from schemas.events import EpisodeFailed, StepExecuted
from schemas.origin import Origin
from schemas.requests import SandboxRequest
from streams.kafka.request_loop import Route
from streams.telemetry import tracing

log = logging.getLogger(__name__)

DEFAULT_MAX_EPISODES = 8
REMEMBERED_CRASHES = 1024
REASON_LIMIT = 2000
Answer = StepExecuted | EpisodeFailed
ROUTE = Route(SandboxRequest, topics.SANDBOX_REQUESTS, topics.SANDBOX_RESULTS)


@dataclasses.dataclass
class _Held:
    sandbox: Sandbox
    snapshot_id: str | None  # what the workspace holds now, as a snapshot id


class EpisodeSandboxes:
    """The sandbox held for each episode, least recently used released first beyond `max_episodes`."""

    def __init__(self, backend: SandboxBackend, pools: WarmPools, max_episodes: int = DEFAULT_MAX_EPISODES):
        self.backend = backend
        self.pools = pools
        self.max_episodes = max_episodes
        self._held: OrderedDict[str, _Held] = OrderedDict()
        self._lock = threading.Lock()

    def for_step(self, episode_id: str, spec: SandboxSpec, snapshot_id: str | None) -> Sandbox:
        """A sandbox whose workspace is exactly `snapshot_id` (None: the image's empty workspace)."""
        with self._lock:
            held = self._held.get(episode_id)
            if held is not None and held.sandbox.spec == spec and held.snapshot_id == snapshot_id:
                self._held.move_to_end(episode_id)
                return held.sandbox
        self.drop(episode_id)
        with tracing.child_span("sandbox.acquire", {"trialog.restore": snapshot_id is not None}):
            sandbox = self.pools.acquire(spec)
            try:
                if snapshot_id is not None:
                    self.backend.restore(sandbox, SnapshotId.parse(snapshot_id))
            except BaseException:
                self.pools.release(sandbox)
                raise
        with self._lock:
            self._held[episode_id] = _Held(sandbox, snapshot_id)
            evicted = [self._held.popitem(last=False)[1] for _ in range(len(self._held) - self.max_episodes)]
        for old in evicted:
            self.pools.release(old.sandbox)
        return sandbox

    def advanced(self, episode_id: str, snapshot_id: str) -> None:
        with self._lock:
            if episode_id in self._held:
                self._held[episode_id].snapshot_id = snapshot_id

    def episodes(self) -> list[str]:
        """The episodes holding a sandbox, least recently used first."""
        with self._lock:
            return list(self._held)

    def drop(self, episode_id: str) -> None:
        with self._lock:
            held = self._held.pop(episode_id, None)
        if held is not None:
            self.pools.release(held.sandbox)

    def close(self) -> None:
        with self._lock:
            held, self._held = list(self._held.values()), OrderedDict()
        for each in held:
            self.pools.release(each.sandbox)


class SandboxWorker:
    def __init__(
        self,
        backend: SandboxBackend,
        pools: WarmPools,
        results: ResultStore,
        objects: ObjectStore,
        origin: Origin,
        max_episodes: int = DEFAULT_MAX_EPISODES,
        store_quota_bytes: int = DEFAULT_EPISODE_STORE_QUOTA,
    ) -> None:
        self.sandboxes = EpisodeSandboxes(backend, pools, max_episodes)
        self.executor = IdempotentExecutor(backend, results)
        self.objects = objects
        self.quota = EpisodeStoreQuota(SnapshotStore(objects), store_quota_bytes)
        self.origin = origin
        self.crashes: OrderedDict[ExecKey, str] = OrderedDict()  # key -> why, for redelivered requests
        self._crashes_lock = threading.Lock()  # `episode_ended` runs on another thread than `handle`

    def handle(self, request: SandboxRequest) -> Answer:
        meta = request.meta
        key = ExecKey(meta.episode_id, meta.step, meta.attempt)
        with self._crashes_lock:
            crash = self.crashes.get(key)
        if crash is not None:
            return episode_failed(self.origin, request, FailureClass.SANDBOX_CRASH, crash)
        try:
            step = self.executor.results.get(key) or self._execute(request, key)
        except InvalidAction as exc:
            return episode_failed(self.origin, request, FailureClass.INVALID_ACTION, str(exc))
        except SandboxError as exc:
            log.warning(
                "sandbox of %s lost at step %d attempt %d: %s", meta.episode_id, meta.step, meta.attempt, exc
            )
            why = f"sandbox lost: {exc}"
            with self._crashes_lock:
                self.crashes[key] = why
                while len(self.crashes) > REMEMBERED_CRASHES:
                    self.crashes.popitem(last=False)
            return episode_failed(self.origin, request, FailureClass.SANDBOX_CRASH, why)
        result = step.result
        invalid = invalid_outcome(request.action, result.exit_code, result.timed_out, result.stderr)
        if invalid is not None:
            return episode_failed(self.origin, request, FailureClass.INVALID_ACTION, invalid)
        return step_executed(self.origin, request, step)

    def _execute(self, request: SandboxRequest, key: ExecKey) -> StepResult:
        meta = request.meta
        spec = SandboxSpec(request.image, Quotas.from_resource_limits(request.limits))
        invocation = invocation_for(request.action, self.objects)
        limits = ExecLimits(request.timeout_s, request.output_limit_bytes)
        try:
            sandbox = self.sandboxes.for_step(meta.episode_id, spec, meta.snapshot_id)
            rolled_back = False

            def admit(step: StepResult) -> StepResult:
                nonlocal rolled_back
                admitted = self.quota.admit(meta.episode_id, meta.snapshot_id, step)
                rolled_back = admitted is not step
                return admitted

            step = self.executor.run(
                sandbox, key, invocation.argv, limits=limits, stdin=invocation.stdin, admit=admit
            )
        except SandboxError:
            self.sandboxes.drop(meta.episode_id)  # the next attempt restores the snapshot into a new one
            raise
        if rolled_back:  # the sandbox holds the step's files; the log says they are gone: restore next time
            self.sandboxes.drop(meta.episode_id)
        else:
            self.sandboxes.advanced(meta.episode_id, step.snapshot_id)
        return step

    def episode_ended(self, episode_id: str) -> None:
        """The episode is over (`episode_ends`): drop its executed steps and release its sandbox."""
        self.executor.results.forget_episode(episode_id)
        self.quota.forget(episode_id)
        with self._crashes_lock:
            for key in [key for key in self.crashes if key.episode_id == episode_id]:
                del self.crashes[key]
        self.sandboxes.drop(episode_id)

    def close(self) -> None:
        self.sandboxes.close()


def step_executed(origin: Origin, request: SandboxRequest, step: StepResult) -> StepExecuted:
    """The answer to `request`: its header echoed (episode, step, attempt, chain head), the new snapshot."""
    meta = dataclasses.replace(origin.reply_meta(request.meta), snapshot_id=step.snapshot_id)
    result = step.result
    return StepExecuted(
        meta=meta,
        exit_code=result.exit_code,
        stdout=Output(result.stdout, result.stdout_dropped > 0, result.stdout_bytes),
        stderr=Output(result.stderr, result.stderr_dropped > 0, result.stderr_bytes),
        timed_out=result.timed_out,
        duration_us=round(result.duration_s * 1_000_000),
        oom_killed=result.oom_killed,
    )


def episode_failed(
    origin: Origin, request: SandboxRequest, failure: FailureClass, reason: str
) -> EpisodeFailed:
    """The failure answer to `request`: its header echoed (episode, step, attempt, chain head)."""
    return EpisodeFailed(origin.reply_meta(request.meta), failure, reason[:REASON_LIMIT])
