"""The demo's phases on the local stack: tasks, evaluation of v0, training, evaluation of the last version.

Every phase is a real run with its own topics (`<name>-eval-v0`, `<name>-train`, `<name>-eval-vN`) and
its workers as OS processes, exactly as `trialog run start --spawn` starts them, plus the learner during
training. The evaluations pin the rollout to one policy version and give each held-out task the same
number of episodes with the same seeds (round-robin task draw), so they differ only in the weights.
Training runs for a fixed wall-clock budget: the scheduler keeps the pipeline full until time is up, then
every worker is stopped and the last published version is evaluated.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from actors.scheduler.core import Target
from actors.scheduler.status import RunStatus, read_status
from actors.scheduler.worker import SchedulerProcess, SchedulerSettings
from learner.defaults import STATS_FILE
from ops import console
from ops.demo.summary import Evaluation, Training, evaluation
from ops.paths import Paths
from ops.run_workers import Workers, worker_commands
from ops.stack.images import sandbox_ref
from ops.stores import open_objects, stack_location
from schemas.origin import Origin
from schemas.publications import PolicyPublished

PROGRESS_EVERY_S = 20.0
TRAINING_EPISODES = 100_000  # the scheduler never runs out during the time budget


@dataclass(frozen=True)
class DemoSettings:
    name: str
    minutes: float = 18.0
    toy_count: int = 16
    toy_variant: str = "blind"  # actors.tasks.toy.Variant
    holdout_every: int = 4
    group_size: int = 8
    capacity: int = 8
    # Episodes in flight in an evaluation, where no learner competes for the cores: bigger rollout batches
    # share their prompt prefix and more decoding steps (BENCHMARKS.md "demo").
    eval_capacity: int = 16
    # Rollout worker processes in one consumer group (each with one torch thread): they split the
    # episodes by partition. On 2 cores a second one was measured slower (two half-size batches;
    # BENCHMARKS.md, "learning: pipeline against the loop"); a bigger machine has cores to give it.
    rollouts: int = 1
    # Requests per batched generate while training (at most the capacity). Below the capacity, one batch
    # generates while the other episodes are in their sandboxes and verifiers.
    rollout_batch: int = 8
    # How long the rollout holds a batch open for `rollout_batch` requests (0: what one poll brings). On
    # 2 cores neither lever gained (BENCHMARKS.md "demo": rollout batching levers): the CPU, not the batch
    # fill, bounds generation there. A machine with cores to spare for the sandboxes may differ.
    batch_linger_ms: int = 0
    # The rollout's generation backend: torch (CPU or GPU), or vllm on a GPU machine (hot swap included;
    # not run on this CPU machine: README, "What has and has not been run").
    backend: str = "torch"
    # 16 seeds on each of the 4 held-out toy tasks: 64 paired samples per version, enough for a sign test
    # to tell a rise from chance (bench learning's 59 gains and 0 losses give p = 3.5e-18).
    eval_per_task: int = 16
    # A toy task needs one action (write the file): a longer budget only samples turns nothing is learned
    # from, at the price of a model turn and a sandbox step each (BENCHMARKS.md "demo").
    max_steps: int = 1
    eval_versions: int = 3  # points of the held-out curve: v0, evenly spaced versions between, the last
    max_new_tokens: int = 48
    lora_rank: int = 8
    group_timeout_s: float = 150.0
    # The learner's optimisation: the settings under which `trialog bench learning` showed the toy tasks
    # learned (BENCHMARKS.md, learning); lr 1e-4 on q/v with one pass learned nothing in the demo.
    lr: float = 1e-3  # AdamW on the LoRA weights
    lora_targets: str = "q_proj,k_proj,v_proj,o_proj"
    epochs: int = 2  # PPO-clipped passes over each step's samples
    # At 1.0 SmolLM2-135M mostly rambles (measured: 0 of 16 first replies a usable action); the streams
    # worker puts it in every PolicyRequest, and the learner takes its log-probs at the same one.
    temperature: float = 0.7
    seed: int = 0


@dataclass(frozen=True)
class TaskSets:
    train: list[Path]
    heldout: list[Path]


def assemble_tasks(folder: Path, settings: DemoSettings) -> TaskSets:
    """The toy tasks, every `holdout_every`-th held out: the tasks `trialog bench learning` learns, so
    the demo can be held to the same rise (BENCHMARKS.md "learning")."""
    from actors.tasks.toy import Variant, import_toy

    toy = import_toy(
        folder / "toy",
        count=settings.toy_count,
        holdout_every=settings.holdout_every,
        variant=Variant(settings.toy_variant),
    )
    return TaskSets(train=list(toy.train), heldout=list(toy.heldout))


def versions_to_evaluate(published: Sequence[int], points: int) -> list[int]:
    """The versions between v0 and the last that the held-out curve shows: `points` in all with v0 and
    the last, evenly spaced over what was published (fewer when fewer were published)."""
    if not published or points <= 2:
        return []
    inner = points - 2
    last = len(published) - 1
    picks = {published[round(last * (i + 1) / (inner + 1))] for i in range(inner)}
    return sorted(picks - {published[-1]})


@dataclass
class Stage:
    """What every phase shares: where things are and how the workers are started."""

    paths: Paths
    bootstrap: str
    model: Path
    settings: DemoSettings
    say: Callable[[str], None] = console.say

    def rollout_args(self, *, versions_run: str | None, pin: int | None, batch: int) -> list[str]:
        args = ["--model", str(self.model), "--max-new-tokens", str(self.settings.max_new_tokens)]
        args += ["--backend", self.settings.backend]
        # The learner writes the weights to this stage's object store: the rollout must read that one, not
        # whatever store its own environment would default to.
        args += ["--objects", str(stack_location(self.paths))]
        # One torch thread: beside the learner and the sandboxes, two threads spin on each other (measured
        # 24 s against 90 s for the same batch on this 2-core machine under load).
        args += ["--batch", str(batch), "--threads", "1"]
        if self.settings.batch_linger_ms:
            args += ["--batch-linger-ms", str(self.settings.batch_linger_ms)]
        if versions_run is not None:
            args += ["--versions-run", versions_run]
        if pin is not None:
            args += ["--pin-version", str(pin)]
        return args

    def learner_command(self, run: str) -> list[str]:
        s = self.settings
        return [
            sys.executable, "-m", "ops.cli", "worker", "learner", "--run", run, "--bootstrap", self.bootstrap,
            "--model", str(self.model), "--group-size", str(s.group_size),
            "--group-timeout-s", str(s.group_timeout_s), "--lora-rank", str(s.lora_rank),
            "--prompt-encoder", "chat", "--objects", str(stack_location(self.paths)), "--lr", str(s.lr),
            "--lora-targets", s.lora_targets, "--epochs", str(s.epochs),
            # The rollout is the bottleneck on a small CPU machine: the learner keeps to one core.
            "--threads", "1", "--temperature", str(s.temperature),
            "--checkpoint-dir", str(self.paths.component("runs") / run / "learner"),
        ]  # fmt: skip

    def publish(self, run: str, tasks: Sequence[Path]) -> None:
        from actors.tasks.publish import publish_tasks
        from streams.kafka.topics import ensure_topics

        ensure_topics(self.bootstrap, run)
        publication = publish_tasks(
            tasks, self.bootstrap, open_objects(paths=self.paths), str(sandbox_ref()), run=run
        )
        self.say(f"run {run}: published {len(publication.published)} tasks")
        if publication.rejected:
            self.say(f"run {run}: rejected in review, not published: {', '.join(publication.rejected)}")

    def workers(self, run: str, tasks: Sequence[Path], rollout_args: list[str]) -> Workers:
        commands = worker_commands(run, self.bootstrap, "llm", tasks, self.paths, rollout_args)
        s = self.settings
        commands["streams"] += ["--temperature", str(s.temperature), "--max-tokens", str(s.max_new_tokens)]
        for index in range(2, s.rollouts + 1):
            commands[f"rollout-{index}"] = list(commands["rollout"])
        workers = Workers(self.paths.component("runs") / run / "logs")
        workers.start(commands)
        return workers


def evaluate(
    stage: Stage, run: str, tasks: Sequence[Path], *, version: int, versions_run: str | None
) -> Evaluation:
    """Every held-out task `eval_per_task` times with `version` pinned; the seeds depend only on the task."""
    s = stage.settings
    started = time.monotonic()
    stage.publish(run, tasks)
    episodes = len(tasks) * s.eval_per_task
    target = Target(
        run_id=run, episodes=episodes, group_size=s.eval_per_task, capacity=s.eval_capacity, seed=s.seed,
        max_steps=s.max_steps, policy_version=version, round_robin=True,
    )  # fmt: skip
    pin = version if versions_run is not None else None
    args = stage.rollout_args(versions_run=versions_run, pin=pin, batch=s.eval_capacity)
    workers = stage.workers(run, tasks, args)
    try:
        schedule(stage, workers, target, deadline=None)
    finally:
        workers.stop()
    status = read_status(stage.bootstrap, run)
    return evaluation(status, policy_version=version, episodes=episodes, seconds=time.monotonic() - started)


def train(stage: Stage, run: str, tasks: Sequence[Path]) -> Training:
    """Episodes on the training tasks with the learner publishing versions, for `minutes`."""
    from ops.demo.profile import Profiler

    started = time.monotonic()
    profiler = Profiler().start()
    workers = start_training(stage, run, tasks)
    try:
        schedule(
            stage,
            workers,
            training_target(stage.settings, run),
            deadline=started + stage.settings.minutes * 60,
        )
    finally:
        workers.stop()
        profile = profiler.stop()
    summary = training_summary(stage, run, time.monotonic() - started)
    return dataclasses.replace(summary, profile=profile.to_json() | {"lines": profile.lines()})


def training_target(settings: DemoSettings, run: str, episodes: int = TRAINING_EPISODES) -> Target:
    """The training run's episodes: `group_size` per task, tasks in turn, at most `capacity` in flight."""
    s = settings
    return Target(
        run_id=run, episodes=episodes, group_size=s.group_size, capacity=s.capacity, seed=s.seed,
        max_steps=s.max_steps, round_robin=True,
    )  # fmt: skip


def start_training(stage: Stage, run: str, tasks: Sequence[Path]) -> Workers:
    """Publish the tasks and start the run's workers with the learner; the rollout hot-swaps its weights."""
    stage.publish(run, tasks)
    s = stage.settings
    args = stage.rollout_args(versions_run=run, pin=None, batch=min(s.rollout_batch, s.capacity))
    workers = stage.workers(run, tasks, args)
    workers.start({"learner": stage.learner_command(run)})
    return workers


def training_summary(stage: Stage, run: str, seconds: float) -> Training:
    """What the training run did, read back from its topics."""
    status = read_status(stage.bootstrap, run)
    published = published_versions(stage.bootstrap, run)
    data = status.to_json()
    return Training(
        run=run,
        seconds=seconds,
        episodes_ended=data["completed"] + data["failed"],
        completed=data["completed"],
        passed=data["verdicts"].get("pass", 0),
        failed_by_class=data["failed_by_class"],
        versions=[version for version, _trained in published],
        trajectories_trained=sum(trained for _version, trained in published),
        sampled_tokens=data["sampled_tokens"],
        learner_step_s=learner_step_seconds(stage.paths.component("runs") / run / "learner" / STATS_FILE),
    )


def learner_step_seconds(stats: Path) -> list[float]:
    """Each training step's seconds (every PPO pass of it), from the learner's stats file; none when the
    learner wrote none."""
    from ops.report.learner_steps import read_stats

    return [round(step.seconds, 2) for step in read_stats(stats)]


def publications(bootstrap: str, run: str) -> dict[int, PolicyPublished]:
    """Every PolicyPublished of `run` on its `policy.versions`, by version."""
    from schemas.topics import POLICY_VERSIONS
    from streams.kafka.reader import read_to_end

    return {
        value.version: value
        for _topic, value in read_to_end(bootstrap, [POLICY_VERSIONS.of(run)])
        if isinstance(value, PolicyPublished) and value.run_id == run
    }


def published_versions(bootstrap: str, run: str) -> list[tuple[int, int]]:
    """(version, trajectories trained into it) of every PolicyPublished of `run`, in version order."""
    return sorted((version, p.trajectories) for version, p in publications(bootstrap, run).items())


def schedule(
    stage: Stage,
    workers: Workers,
    target: Target,
    *,
    deadline: float | None,
    watch: Callable[[Workers], None] | None = None,
) -> None:
    """The scheduler in a thread; progress every PROGRESS_EVERY_S; stops at the deadline or when done.

    `watch` is called about once a second while the run goes on (a test kills and restarts a worker there:
    `Workers.kill` takes a process out of the watched set, so only a worker that dies by itself stops the
    run)."""
    process = SchedulerProcess(
        SchedulerSettings(stage.bootstrap, target), Origin.system("scheduler", "demo"), say=lambda _text: None
    )
    thread = threading.Thread(target=process.run, name="scheduler", daemon=True)
    thread.start()
    started = next_line = time.monotonic()
    try:
        while thread.is_alive():
            thread.join(timeout=1.0)
            now = time.monotonic()
            if watch is not None:
                watch(workers)
            if dead := workers.dead():
                raise RuntimeError(f"run {target.run_id}: workers exited {dead}; see {workers.logs}")
            if deadline is not None and now >= deadline:
                stage.say(f"run {target.run_id}: time is up; stopping the episodes in flight")
                break
            if now >= next_line:
                stage.say(progress_line(stage.bootstrap, target, now - started))
                next_line = now + PROGRESS_EVERY_S
    finally:
        process.stopping.set()
        thread.join(timeout=30)
    stage.say(progress_line(stage.bootstrap, target, time.monotonic() - started))


def progress_line(bootstrap: str, target: Target, elapsed_s: float) -> str:
    """Episodes, rewards, the newest policy version and the staleness of what ended last."""
    status: RunStatus = read_status(bootstrap, target.run_id)
    data = status.to_json()
    ended = data["completed"] + data["failed"]
    total = "" if target.episodes >= TRAINING_EPISODES else f"/{target.episodes}"
    mean = "-" if status.mean_reward is None else f"{status.mean_reward:.2f}"
    line = (
        f"[{elapsed_s / 60:4.1f} min] {target.run_id}: ended {ended}{total} (passed "
        f"{data['verdicts'].get('pass', 0)}, failed {data['failed']}), in flight {data['in_flight']}, "
        f"mean reward {mean}"
    )
    if target.episodes >= TRAINING_EPISODES:
        versions = published_versions(bootstrap, target.run_id)
        newest = versions[-1][0] if versions else 0
        line += f", policy v{newest}, trained {sum(t for _v, t in versions)}"
    return line
