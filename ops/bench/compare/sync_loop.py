"""The synchronous loop of the design brief, the baseline of `trialog bench compare`'s long-tail part.

In lockstep, one step per wave of `sandboxes` episodes: acquire that many sandboxes, roll every episode
out to its end (all at once, each in its own thread: the slowest one gates the step), verify them all,
update the policy, release the sandboxes. The update trains the wave in mini-batches of `batch`
trajectories, one after the other (as verl's `ppo_mini_batch_size` splits a rollout batch), each a fixed
`update_s` and a new policy version: the same learner work per trajectory as the pipeline's learner,
whose updates take `batch` trajectories each. Every episode of a wave starts at the same policy version;
the first mini-batch trains it at that version (staleness 0), the next ones one version later each (the
wave's last mini-batch is `ceil(wave / batch) - 1` behind), within the bound by the learner's `is_stale`,
the same rule the pipeline's learner drops by (a wave of one mini-batch is staleness 0 throughout).

The side effects are behind `LoopEnv` (real Docker sandboxes and the verifier's grader in `DockerLoopEnv`),
so the step accounting is tested without them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from actors.rollout.simulated import LatencyModel, action_at
from learner.objective import is_stale
from ops.bench.compare.timeline import Timeline, Update
from schemas.actions import RunCommand


def loop_batches(episodes: int, sandboxes: int) -> list[tuple[int, ...]]:
    """The seeds of each step: `sandboxes` at a time, in order (the last step may have fewer)."""
    if episodes < 1 or sandboxes < 1:
        raise ValueError("episodes and sandboxes must be >= 1")
    return [tuple(range(i, min(i + sandboxes, episodes))) for i in range(0, episodes, sandboxes)]


class LoopEnv(Protocol):
    def acquire(self, count: int) -> list[Any]:
        """`count` sandboxes, each with the task's initial workspace."""
        ...

    def execute(self, sandbox: Any, action: RunCommand) -> None:
        """Run one action in the sandbox (raises if the sandbox is lost)."""
        ...

    def verify(self, sandboxes: Sequence[Any]) -> list[float]:
        """The reward of each sandbox's workspace."""
        ...

    def release(self, sandboxes: Sequence[Any]) -> None: ...


@dataclass(frozen=True, slots=True)
class LoopStep:
    seeds: tuple[int, ...]
    started: float
    acquired: float
    rolled_out: float
    verified: float
    updates: tuple[Update, ...]  # the wave's mini-batches, back to back
    rewards: tuple[float, ...]
    steps: tuple[int, ...]  # actions each episode took (its turns and the submit)


@dataclass(frozen=True)
class LoopResult:
    timeline: Timeline
    steps: tuple[LoopStep, ...]
    staleness: tuple[int, ...] = ()  # of each trained episode, when its update started


def mini_batches(seeds: Sequence[int], batch: int) -> list[tuple[int, ...]]:
    """A wave's mini-batches: `batch` seeds at a time, in order (the last may have fewer)."""
    if batch < 1:
        raise ValueError("batch must be >= 1")
    return [tuple(seeds[i : i + batch]) for i in range(0, len(seeds), batch)]


def run_loop(
    env: LoopEnv,
    model: LatencyModel,
    batches: Sequence[tuple[int, ...]],
    update_s: float,
    max_staleness: int,
    *,
    batch: int | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    progress: Callable[[str], None] = lambda _: None,
) -> LoopResult:
    started = clock()
    steps: list[LoopStep] = []
    dropped: list[int] = []
    staleness: list[int] = []
    version = 0
    for number, seeds in enumerate(batches):
        step_started = clock()
        sampled_at = version  # every episode of the wave starts with this policy
        sandboxes = env.acquire(len(seeds))
        try:
            acquired = clock()
            with ThreadPoolExecutor(max_workers=len(seeds)) as pool:
                runs = [
                    pool.submit(_episode, env, model, seed, box, sleep)
                    for seed, box in zip(seeds, sandboxes, strict=True)
                ]
                taken = [run.result() for run in runs]
            rolled_out = clock()
            rewards = tuple(env.verify(sandboxes))
            verified = clock()
            updates = []
            for part in mini_batches(seeds, batch or len(seeds)):
                trained = tuple(s for s in part if not is_stale(sampled_at, version, max_staleness))
                dropped += [s for s in part if s not in trained]
                staleness += [version - sampled_at] * len(trained)
                begun = clock()
                sleep(update_s)
                updates.append(Update(begun, clock(), trained))
                version += 1
        finally:
            env.release(sandboxes)
        steps.append(
            LoopStep(
                seeds, step_started, acquired, rolled_out, verified, tuple(updates), rewards, tuple(taken)
            )
        )
        progress(
            f"loop step {number + 1}/{len(batches)}: rollout {rolled_out - acquired:.1f} s (longest "
            f"{max(taken)} steps), verify {verified - rolled_out:.1f} s, "
            f"update {updates[-1].end - updates[0].start:.1f} s ({len(updates)} mini-batches)"
        )
    timeline = Timeline(
        started,
        tuple(update for step in steps for update in step.updates),
        sum(map(len, batches)),
        dropped=tuple(dropped),
    )
    return LoopResult(timeline, tuple(steps), tuple(staleness))


def _episode(
    env: LoopEnv, model: LatencyModel, seed: int, sandbox: Any, sleep: Callable[[float], None]
) -> int:
    """Roll one episode out: each step the policy's latency, then its action in the sandbox; returns the
    number of actions (the submit ends the episode and runs nothing)."""
    step = 0
    while True:
        sleep(model.step_latency(seed, step))
        action = action_at(model, seed, step)
        step += 1
        if not isinstance(action, RunCommand):
            return step
        env.execute(sandbox, action)


class DockerLoopEnv:
    """The loop's sandboxes and grading on the stack's Docker engine, as the pipeline's workers do them:
    a warm pool, the task's initial snapshot restored into each sandbox, each action run as the sandbox
    worker runs it (`invocation_for`), and each final workspace snapshotted and graded by the verifier's
    `SnapshotGrader` with `verifiers` grades at a time."""

    def __init__(self, task: Any, image: str, objects: Any, pool: int, verifiers: int) -> None:
        from actors.tasks.bundle import initial_snapshot, resource_limits
        from actors.verifier.grading import SnapshotGrader
        from ops.cli import kit
        from sandbox_agent.docker_backend import DockerBackend
        from sandbox_agent.limits import Quotas, SandboxSpec
        from sandbox_agent.manifest import SnapshotId
        from sandbox_agent.pool import WarmPools
        from schemas.requests import ResourceLimits

        self.task = task
        self.objects = objects
        self.verifiers = verifiers
        self.client = kit.require_docker().client()
        self.backend = DockerBackend(
            self.client, objects, labels={"dev.trialog.worker": "bench-compare-loop"}
        )
        self.pools = WarmPools(self.backend, pool)
        limits = resource_limits(task) or ResourceLimits()
        self.spec = SandboxSpec(task.spec.image or image, Quotas.from_resource_limits(limits))
        self.initial = SnapshotId.parse(initial_snapshot(task, objects))
        self.grader = SnapshotGrader(self.backend, objects, image)
        self._lock = threading.Lock()

    def acquire(self, count: int) -> list[Any]:
        sandboxes = []
        try:
            for _ in range(count):
                sandbox = self.pools.acquire(self.spec)
                sandboxes.append(sandbox)
                self.backend.restore(sandbox, self.initial)
        except BaseException:
            self.release(sandboxes)
            raise
        return sandboxes

    def execute(self, sandbox: Any, action: RunCommand) -> None:
        from sandbox_agent.actions import invocation_for

        invocation = invocation_for(action, self.objects)
        self.backend.exec(sandbox, invocation.argv, stdin=invocation.stdin)

    def verify(self, sandboxes: Sequence[Any]) -> list[float]:
        def grade(sandbox: Any) -> float:
            snapshot = str(self.backend.snapshot(sandbox))
            return float(self.grader(self.task, snapshot, None).grade.reward)

        with ThreadPoolExecutor(max_workers=self.verifiers) as pool:
            return list(pool.map(grade, sandboxes))

    def release(self, sandboxes: Sequence[Any]) -> None:
        for sandbox in sandboxes:
            self.pools.release(sandbox)

    def close(self) -> None:
        self.pools.close()
        self.client.close()
