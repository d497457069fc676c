"""trialog's streaming pipeline under the long tail: the other side of `trialog bench compare`'s first part.

Real workers as processes on the stack's Kafka, as `run start --spawn` starts them: one streams worker (the
episodes' owner), `sandbox_workers` sandbox workers in one consumer group (each serves its partitions of
`sandbox.requests` one step at a time, so several give the steps of different episodes the concurrency
the loop's threads give them; together they hold the `sandboxes` episodes' sandboxes in real Docker, with
the loop's warm pool split between them), and `verifiers` verifier workers grading each final workspace.
This process plays the scheduler, the rollout and the learner:

- scheduler: keeps `sandboxes` episodes in flight (one sandbox each, the loop's count), started with
  seeds 0, 1, ... in order and the learner's current policy version;
- rollout: the simulated policy (`actors.rollout.simulated`) answers each PolicyRequest `delay` seconds
  after it arrives, with the answer `trialog worker rollout` sends (`action_proposed`); requests wait
  side by side, as at an inference server, never one behind another;
- learner: `SimLearner`, training whenever `batch` trajectories are there, dropping stale ones.

The clock starts after a warm-up episode went through every worker (their start and the topics' metadata
are not measured; the loop's clock likewise starts with its sandboxes' engine connected), and stops when
the learner's last update ends.
"""

from __future__ import annotations

import dataclasses
import heapq
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actors.rollout.simulated import LatencyModel, SimulatedPolicy
from ops.bench.compare.sim_learner import SimLearner
from ops.bench.compare.timeline import Timeline
from streams.errors import StackError

WARM_UP = "-warm-up-"
WARM_UP_SEED = 1_000_000_000  # far from the measured episodes' seeds (0, 1, ...)
POLL_MS = 50
GROUP_WAIT_S = 120.0
PROGRESS_EVERY_S = 20.0


@dataclass(frozen=True)
class PipelineSettings:
    sandboxes: int
    episodes: int
    update_s: float
    max_staleness: int
    verifiers: int = 1
    pool: int = 4  # warm sandboxes in all, split between the sandbox workers
    timeout_s: float = 3600.0
    sandbox_workers: int = 1
    batch: int = 0  # trajectories per update (0: `sandboxes`)

    @property
    def update_batch(self) -> int:
        return self.batch or self.sandboxes

    @property
    def pool_per_worker(self) -> int:
        return max(1, -(-self.pool // self.sandbox_workers))


@dataclass
class PipelineResult:
    timeline: Timeline
    staleness: list[int]  # of each trained episode
    episode_s: dict[int, float] = field(default_factory=dict)  # seed -> seconds from start to trajectory
    answered: int = 0  # policy requests answered
    steps: dict[int, int] = field(default_factory=dict)  # seed -> steps in its trajectory
    rollout_s: float = 0.0  # from the clock's start to the last trajectory


def run_pipeline(
    bootstrap: str,
    task_folder: Path,
    model: LatencyModel,
    settings: PipelineSettings,
    progress: Callable[[str], None],
) -> PipelineResult:
    import uuid

    from actors.tasks.publish import publish_tasks
    from actors.tasks.spec import load_task
    from ops.paths import Paths
    from ops.run_workers import Workers, worker_commands
    from ops.stack.images import sandbox_ref
    from ops.stores import open_objects
    from streams.kafka.topics import ensure_topics

    run = f"compare-tail-{uuid.uuid4().hex[:8]}"
    paths = Paths.from_env()
    image = str(sandbox_ref())
    ensure_topics(bootstrap, run)
    publish_tasks([task_folder], bootstrap, open_objects(paths=paths), image, run=run)
    task = load_task(task_folder)
    commands = worker_commands(run, bootstrap, "scripted", [task_folder], paths, guard=False)
    home = paths.component("runs") / run
    # The scheduler holds `sandboxes` episodes in flight in all, so no worker needs a tighter cap (a
    # worker past its cap evicts a sandbox and restores it later: a cost the loop does not pay).
    sandbox = [*commands["sandbox"], "--max-episodes", str(settings.sandboxes), "--pool"]
    started_workers = {
        "streams": commands["streams"],
        **{
            f"sandbox-{i}": [
                *sandbox, str(settings.pool_per_worker),
                "--instance", f"{run}-sandbox-{i}", "--state", str(home / f"sandbox-steps-{i}"),
            ]
            for i in range(settings.sandbox_workers)
        },
        **{
            f"verifier-{i}": [*commands["verifier"], "--instance", f"{run}-verifier-{i}"]
            for i in range(settings.verifiers)
        },
    }  # fmt: skip
    workers = Workers(paths.component("runs") / run)
    progress(f"pipeline run {run}: workers' logs under {workers.logs}")
    workers.start(started_workers)
    try:
        driver = _Driver(bootstrap, run, task.id, task.version, task.spec.image or image, model, settings)
        try:
            return driver.drive(progress, workers.dead)
        finally:
            driver.close()
    finally:
        workers.stop()


def warm_up_episode(run: str, partition: int, attempt: int, partitions: int) -> str:
    """A warm-up episode id whose key lands on `partition` (the producer's murmur2 partitioner)."""
    from kafka.partitioner.default import murmur2

    for salt in range(100_000):
        episode = f"{run}{WARM_UP}{partition}-{attempt}-{salt}"
        if (murmur2(episode.encode()) & 0x7FFFFFFF) % partitions == partition:
            return episode
    raise AssertionError(f"no key found for partition {partition}")  # 1 in 8 keys fits: never


class _Driver:
    """The scheduler, rollout and learner of the pipeline side, one event loop on one consumer."""

    def __init__(
        self,
        bootstrap: str,
        run: str,
        task_id: str,
        task_version: str,
        image: str,
        model: LatencyModel,
        settings: PipelineSettings,
    ) -> None:
        from kafka import TopicPartition

        from schemas.codec import default_codec
        from schemas.origin import Origin
        from schemas.topics import POLICY_REQUESTS, TRAJECTORIES_COMPLETED, TRAJECTORIES_FAILED
        from streams.kafka import clients

        self.bootstrap = bootstrap
        self.run, self.task_id, self.task_version, self.image = run, task_id, task_version, image
        self.model, self.settings = model, settings
        self.policy = SimulatedPolicy(model)
        self.codec = default_codec()
        self.producer = clients.producer(bootstrap, linger_ms=0)
        self.consumer = clients.consumer(bootstrap, enable_auto_commit=False, fetch_max_wait_ms=POLL_MS)
        read = (POLICY_REQUESTS, TRAJECTORIES_COMPLETED, TRAJECTORIES_FAILED)
        self.consumer.assign([TopicPartition(t.of(run), p) for t in read for p in range(t.partitions)])
        self.consumer.seek_to_beginning()
        self.rollout = Origin.system("rollout", f"{run}-simulated")
        self.scheduler = Origin.system("scheduler", f"{run}-bench")
        self.due: list[tuple[float, int, Any]] = []  # (when, tie-break, request) answers waiting
        self.answered_keys: set[tuple[str, int, int]] = set()
        self.answered = 0
        self._ticket = 0

    def close(self) -> None:
        self.producer.close()
        self.consumer.close()

    # -- the rollout ------------------------------------------------------------------------------------

    def _take_request(self, request: Any, now: float) -> None:
        key = (request.meta.episode_id, request.meta.step, request.meta.attempt)
        if key in self.answered_keys:  # read again (a rewind): it was answered
            return
        self.answered_keys.add(key)
        delay = 0.0 if WARM_UP in request.meta.episode_id else self.policy.delay(request)
        self._ticket += 1
        heapq.heappush(self.due, (now + delay, self._ticket, request))

    def _answer_due(self, now: float) -> None:
        from actors.rollout.worker import action_proposed
        from schemas.actions import RunCommand, Submit
        from schemas.topics import POLICY_RESULTS

        while self.due and self.due[0][0] <= now:
            _, _, request = heapq.heappop(self.due)
            sample = self.policy.answer(request)
            if WARM_UP in request.meta.episode_id:  # one command, then submit: every worker answers once
                action = RunCommand("true") if request.meta.step == 0 else Submit()
                sample = dataclasses.replace(sample, action=action)
            latency_us = round(self.policy.delay(request) * 1e6)
            answer = action_proposed(self.rollout, request, sample, latency_us)
            key = request.meta.episode_id.encode()
            self.producer.send(POLICY_RESULTS.of(self.run), key=key, value=self.codec.encode(answer))
            self.answered += 1
        self.producer.flush()

    # -- the scheduler ----------------------------------------------------------------------------------

    def _start(self, episode_id: str, seed: int, version: int) -> None:
        from schemas.commands import StartEpisode
        from schemas.common import EpisodeConfig
        from schemas.topics import EPISODE_COMMANDS

        command = StartEpisode(
            self.scheduler.record_meta(), self.run, episode_id, self.task_id, self.task_version, version,
            EpisodeConfig(max_steps=self.model.most_steps), self.image, f"{episode_id}-group", seed,
        )  # fmt: skip
        self.producer.send(
            EPISODE_COMMANDS.of(self.run), key=episode_id.encode(), value=self.codec.encode(command)
        )
        self.producer.flush()

    # -- the loop ---------------------------------------------------------------------------------------

    def _poll(self, timeout_s: float) -> list[Any]:
        polled = self.consumer.poll(timeout_ms=max(1, round(timeout_s * 1000)))
        values = []
        for records in polled.values():
            for record in records:
                try:
                    values.append(self.codec.decode(record.value))
                except Exception:  # a record this driver cannot read is not its business
                    continue
        return values

    def _wait_for_group(self, group: str, members: int, dead: Callable[[], dict[str, int]]) -> None:
        """Until `members` consumers share `group`, settled (a worker joining later would move partitions
        while the clock runs: a rebalance the measurement must not carry)."""
        from streams.kafka import clients

        admin = clients.admin(self.bootstrap)
        try:
            give_up = time.monotonic() + GROUP_WAIT_S
            seen: Any = None
            while time.monotonic() < give_up:
                if dead():
                    raise StackError(f"workers exited before their group settled: {dead()}", "see their logs")
                try:
                    seen = admin.describe_groups([group]).get(group) or {}
                except Exception as exc:  # the coordinator is not known yet: ask again
                    seen = exc
                else:
                    state = seen.get("group_state") or seen.get("state")
                    if state == "Stable" and len(seen.get("members") or ()) == members:
                        return
                time.sleep(0.5)
            raise StackError(
                f"{group} did not settle with {members} members within {GROUP_WAIT_S:.0f} s "
                f"(last seen: {seen!r:.200})",
                "see the sandbox workers' logs",
            )
        finally:
            admin.close()

    def _warm_up(self, dead: Callable[[], dict[str, int]]) -> None:
        """One short episode on each partition of `sandbox.requests`, all at once: every sandbox worker
        (and the streams worker and a verifier) answers before the clock starts, its warm pool filled."""
        from schemas.requests import PolicyRequest
        from schemas.topics import SANDBOX_REQUESTS
        from schemas.trajectories import TrajectoryCompleted, TrajectoryFailed

        self._wait_for_group(f"{self.run}.trialog-sandbox", self.settings.sandbox_workers, dead)
        waiting = {p: 0 for p in range(SANDBOX_REQUESTS.partitions)}  # partition -> attempts started
        episodes: dict[str, int] = {}  # warm-up episode -> its partition
        retry_at: dict[int, float] = {}
        give_up = time.monotonic() + 300
        while waiting:
            now = time.monotonic()
            if now > give_up:
                raise StackError(
                    f"warm-up episodes on partitions {sorted(waiting)} did not complete within 300 s",
                    "see the workers' logs",
                )
            if dead():
                raise StackError(f"workers exited during the warm-up: {dead()}", "see their logs")
            for partition in [p for p in waiting if retry_at.get(p, 0.0) <= now]:
                episode = warm_up_episode(
                    self.run, partition, waiting[partition], SANDBOX_REQUESTS.partitions
                )
                episodes[episode] = partition
                self._start(episode, WARM_UP_SEED + len(episodes), 0)
                waiting[partition] += 1
                retry_at[partition] = now + 45
            for value in self._poll(0.1):
                if isinstance(value, PolicyRequest):
                    self._take_request(value, time.monotonic())
                elif isinstance(value, TrajectoryFailed) and value.meta.episode_id in episodes:
                    raise StackError(f"the warm-up episode failed: {value.reason}", "see the logs")
                elif isinstance(value, TrajectoryCompleted) and value.meta.episode_id in episodes:
                    waiting.pop(episodes[value.meta.episode_id], None)
            self._answer_due(time.monotonic())

    def drive(self, progress: Callable[[str], None], dead: Callable[[], dict[str, int]]) -> PipelineResult:
        from schemas.requests import PolicyRequest
        from schemas.trajectories import TrajectoryCompleted, TrajectoryFailed

        self._warm_up(dead)
        s = self.settings
        learner = SimLearner(s.update_batch, s.update_s, s.max_staleness)
        started = time.monotonic()
        seeds: dict[str, int] = {}  # episode id -> seed, of the episodes started
        began: dict[int, float] = {}
        finished: dict[int, float] = {}
        steps: dict[int, int] = {}
        completed = failed = 0
        next_seed = 0
        next_progress = started + PROGRESS_EVERY_S
        while True:
            now = time.monotonic()
            while next_seed < s.episodes and next_seed - len(finished) < s.sandboxes:
                episode = f"{self.run}-ep{next_seed:05d}"
                seeds[episode] = next_seed
                began[next_seed] = now
                self._start(episode, next_seed, learner.version)
                next_seed += 1
            draining = len(finished) == s.episodes
            learner.tick(now, draining=draining)
            if draining and not learner.busy and not learner.queue:
                break
            if now - started > s.timeout_s:
                raise StackError(
                    f"the pipeline side did not finish within {s.timeout_s:.0f} s ({len(finished)} of "
                    f"{s.episodes} episodes ended)", "see the workers' logs",
                )  # fmt: skip
            if dead():
                raise StackError(f"workers exited: {dead()}", "see their logs")
            if now >= next_progress:
                next_progress = now + PROGRESS_EVERY_S
                progress(
                    f"pipeline {now - started:.0f} s: {len(finished)}/{s.episodes} episodes ended, "
                    f"{sum(len(u.seeds) for u in learner.updates)} trained, {len(learner.dropped)} stale, "
                    f"policy version {learner.version}"
                )
            wake = [t for t in (self.due[0][0] if self.due else None, learner.next_due()) if t is not None]
            for value in self._poll(min([0.2, *(max(0.0, t - now) for t in wake)])):
                arrived = time.monotonic()
                if isinstance(value, PolicyRequest):
                    self._take_request(value, arrived)
                    continue
                if not isinstance(value, TrajectoryCompleted | TrajectoryFailed):
                    continue
                seed = seeds.get(value.meta.episode_id)
                if seed is None or seed in finished:  # the warm-up, or a trajectory read twice
                    continue
                finished[seed] = arrived
                steps[seed] = len(value.steps)
                if isinstance(value, TrajectoryCompleted):
                    completed += 1
                    learner.arrive(seed, value.min_policy_version)
                else:
                    failed += 1
            self._answer_due(time.monotonic())
        timeline = Timeline(started, tuple(learner.updates), completed, failed, tuple(learner.dropped))
        episode_s = {seed: finished[seed] - began[seed] for seed in finished}
        rollout_s = max(finished.values(), default=started) - started
        return PipelineResult(timeline, learner.staleness, episode_s, self.answered, steps, rollout_s)
