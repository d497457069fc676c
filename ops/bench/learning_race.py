"""`trialog bench learning --pipeline`: the same learning through trialog's pipeline and through the
synchronous loop, one after the other in one command, raced by the training clock.

Both sides start from SmolLM2-135M-Instruct with the same LoRA, learning rate, PPO passes, group size,
sampling temperature and toy tasks, and each trains for `--minutes` of wall-clock time:

- the loop (`ops.bench.learning_loop.SyncLoop`): in one process, sample a step's groups, grade them in
  sandboxes, train, and only then sample the next step;
- the pipeline (`ops.demo.run.train`, what `trialog demo` runs): scheduler, streams, sandbox, rollout,
  verifier and learner as processes on Kafka, the rollout hot-swapping each version the learner publishes.

The clock of each side starts when its training starts (the pipeline's includes starting its workers)
and evaluation never runs on it: each side keeps every version it makes with the minute it was ready (the
loop's after each step, the pipeline's from its PolicyPublished record), and afterwards the newest version
at every `--eval-every` minutes is evaluated in this process the same way for both (the held-out tasks,
`--eval-per-task` fixed seeds each, one batched generation, graded in sandboxes). The result is each
side's held-out pass rate by training minute and the minutes it took to reach 50% and 80%.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ops.bench.learning_loop import Bench, bench, evaluate
from ops.bench.report import cpu_model, memory_gib, write_section
from ops.console import say
from ops.paired import Outcomes
from ops.paths import Paths

SECTION = "## learning: pipeline against the loop"
THRESHOLDS = (0.5, 0.8)
TARGET_SPEEDUP = 1.5  # issue 17: the pipeline reaches each threshold at least this much sooner


@dataclass(frozen=True)
class Point:
    """The held-out result of the newest version a side had at `minute` of its training."""

    minute: float
    version: int
    passed: int
    episodes: int

    @property
    def rate(self) -> float:
        return self.passed / self.episodes if self.episodes else 0.0


def grid(minutes: float, every: float) -> list[float]:
    """The training minutes evaluated: 0, every `every`, and the end of the budget."""
    points = [round(i * every, 3) for i in range(int(minutes / every) + 1)]
    return points if points[-1] >= minutes else [*points, minutes]


def newest_at(ready: Sequence[tuple[float, int]], minute: float) -> int:
    """The newest version ready at `minute` ((minute ready, version) pairs); 0, the base, before any."""
    versions = [version for at, version in ready if at <= minute]
    return max(versions, default=0)


def minutes_to(points: Sequence[Point], threshold: float) -> float | None:
    """The first evaluated minute whose pass rate reaches `threshold`; None when none does."""
    return next((p.minute for p in points if p.rate >= threshold), None)


def curve(
    ready: Sequence[tuple[float, int]], minutes: Sequence[float], score: Callable[[int], Outcomes]
) -> list[Point]:
    """A side's points: each grid minute's newest version, scored once per version."""
    scored: dict[int, Outcomes] = {}
    points = []
    for minute in minutes:
        version = newest_at(ready, minute)
        if version not in scored:
            scored[version] = score(version)
            say(f"  minute {minute:g}: v{version} {scored[version]}")
        outcomes = scored[version]
        points.append(Point(minute, version, outcomes.passed, outcomes.total))
    return points


def race(args: argparse.Namespace) -> int:
    from ops.stack.stack import StackConfig, up

    paths = Paths.from_env()
    config = StackConfig.load(paths)
    up(config)  # the pipeline's Kafka and Jaeger; the loop needs only the sandboxes
    started = time.monotonic()
    with bench(args, paths) as b:
        say(f"the loop: {args.minutes:g} min of training")
        loop_ready, loop_states, steps = _loop_side(b, args)
        say(f"the pipeline: {args.minutes:g} min of training")
        pipeline_ready, trained, publications = _pipeline_side(b, args, paths, config.kafka.bootstrap)
        minutes = grid(args.minutes, args.eval_every)
        say("evaluating the loop's versions")
        loop_curve = curve(loop_ready, minutes, _loop_scorer(b, loop_states, args))
        say("evaluating the pipeline's versions")
        pipeline_curve = curve(pipeline_ready, minutes, _pipeline_scorer(b, paths, publications, args))
    section = render(
        args, loop_curve, pipeline_curve, time.monotonic() - started,
        loop_detail=f"{steps} steps ({steps * args.tasks_per_step * args.group} episodes)",
        pipeline_detail=f"{len(pipeline_ready)} versions ({trained} trajectories trained)",
    )  # fmt: skip
    print(section)
    if not args.no_record:
        write_section(args.record, section)
    return 0


def _loop_side(b: Bench, args: argparse.Namespace) -> tuple[list[tuple[float, int]], dict[int, Any], int]:
    """Steps of the loop until the budget is spent; each step's weights (its version) kept with the
    minute they were ready."""
    from learner.lora import trainable_state

    loop = b.loop(args)
    states = {0: trainable_state(b.model)}
    ready: list[tuple[float, int]] = []
    started = time.monotonic()
    step = 0
    while time.monotonic() - started < args.minutes * 60:
        loop.step(step)
        step += 1
        states[step] = trainable_state(b.model)
        ready.append(((time.monotonic() - started) / 60, step))
    return ready, states, step


def _pipeline_side(
    b: Bench, args: argparse.Namespace, paths: Paths, bootstrap: str
) -> tuple[list[tuple[float, int]], int, dict[int, Any]]:
    """The demo's training phase with the loop's settings; every published version with its minute, and
    the publications by version."""
    from ops.demo.run import DemoSettings, Stage, publications, train

    settings = DemoSettings(
        name=f"race-{uuid.uuid4().hex[:6]}", minutes=args.minutes, toy_count=args.tasks,
        toy_variant=args.variant, group_size=args.group, max_steps=1,
        # in flight (and in one rollout batch) at most what the loop samples at once: one step's groups
        capacity=args.tasks_per_step * args.group, rollouts=args.rollouts,
        batch_linger_ms=args.batch_linger_ms,
        max_new_tokens=args.max_new_tokens, lora_rank=args.lora_rank, lr=args.lr,
        lora_targets=args.lora_targets, epochs=args.epochs, temperature=args.temperature,
    )  # fmt: skip
    stage = Stage(paths, bootstrap, b.model_dir, settings)
    run = f"{settings.name}-train"
    started = time.time()
    training = train(stage, run, b.split.train)
    say(f"  {len(training.versions)} versions, {training.trajectories_trained} trajectories trained")
    published = publications(bootstrap, run)
    # a version's minute is when the learner announced it: the rollout may take it from then on
    ready = [((p.meta.occurred_at_us / 1e6 - started) / 60, v) for v, p in published.items()]
    return sorted(ready), training.trajectories_trained, published


def _loop_scorer(b: Bench, states: dict[int, Any], args: argparse.Namespace) -> Callable[[int], Outcomes]:
    from learner.lora import load_trainable_state

    def score(version: int) -> Outcomes:
        load_trainable_state(b.model, states[version])
        return evaluate(b.policy, b.grader, b.heldout, args)

    return score


def _pipeline_scorer(
    b: Bench, paths: Paths, publications: dict[int, Any], args: argparse.Namespace
) -> Callable[[int], Outcomes]:
    """Scores a published version as the rollout runs it: the base model with the version's merged
    weights, read from the store the learner wrote them to, loaded (the base itself for v0)."""
    from safetensors.torch import load as safetensors_load

    from actors.rollout.llm import load_llm_policy
    from actors.rollout.weights import TorchModelTarget, check_tensors
    from ops.stores import open_objects

    store = open_objects(paths=paths)
    policy = load_llm_policy(b.model_dir, max_new_tokens=args.max_new_tokens)
    model = policy.backend.model  # type: ignore[attr-defined]
    target = TorchModelTarget(model)
    base = {name: tensor.clone() for name, tensor in model.state_dict().items()}

    def score(version: int) -> Outcomes:
        target.load(base)
        if version:
            tensors = safetensors_load(store.get(publications[version].weights))
            check_tensors(tensors, target.shapes())
            target.load(tensors)
        # the loop's grader: equal outcomes of a task are graded once, whichever side sampled them
        return evaluate(policy, b.grader, b.heldout, args)

    return score


def render(
    args: argparse.Namespace,
    loop: Sequence[Point],
    pipeline: Sequence[Point],
    seconds: float,
    *,
    loop_detail: str,
    pipeline_detail: str,
) -> str:
    rows = "\n".join(
        f"| {a.minute:g} | v{a.version} | {a.passed}/{a.episodes} ({a.rate:.0%}) | v{b.version} | "
        f"{b.passed}/{b.episodes} ({b.rate:.0%}) |"
        for a, b in zip(loop, pipeline, strict=True)
    )
    lines = []
    for threshold in THRESHOLDS:
        first, second = minutes_to(loop, threshold), minutes_to(pipeline, threshold)
        lines.append(f"- minutes to {threshold:.0%} held-out: loop {_minutes(first)}, pipeline "
                     f"{_minutes(second)}; {_speedup(first, second)}")  # fmt: skip
    note = f"- reading: {args.note.strip()}\n" if args.note.strip() else ""
    return f"""{SECTION}

`trialog bench learning --pipeline --minutes {args.minutes:g} --eval-every {args.eval_every:g} \
--rollouts {args.rollouts} --batch-linger-ms {args.batch_linger_ms} \
--variant {args.variant} --tasks {args.tasks} \
--tasks-per-step {args.tasks_per_step} --group {args.group} \
--eval-per-task {args.eval_per_task} --lr {args.lr} --epochs {args.epochs} --lora-rank {args.lora_rank} \
--lora-targets {args.lora_targets} --max-new-tokens {args.max_new_tokens} --temperature {args.temperature} \
--threads {args.threads}` on {dt.date.today().isoformat()}, {cpu_model()}, {memory_gib():.0f} GiB, \
{os.cpu_count()} cores; {seconds / 60:.1f} min in all.
Both sides train SmolLM2-135M-Instruct on the same {args.variant} toy tasks with the same settings for \
{args.minutes:g} min each, one after the other: the synchronous loop in one process ({loop_detail}), then \
the pipeline on Kafka as `trialog demo` runs it ({pipeline_detail}). Evaluation is off both clocks: the \
newest version of each side at every {args.eval_every:g} training minutes, on the held-out tasks with \
{args.eval_per_task} fixed seeds each, sampled and graded alike. The loop grades an outcome it has seen \
once (a cache); the pipeline grades every episode in its own sandbox.

{chr(10).join(lines)}
{note}
| training minute | loop version | loop held-out | pipeline version | pipeline held-out |
| --- | --- | --- | --- | --- |
{rows}
"""


def _minutes(value: float | None) -> str:
    return "not reached" if value is None else f"{value:g}"


def _speedup(loop: float | None, pipeline: float | None) -> str:
    """How much sooner the pipeline got there, against the target."""
    if pipeline is None:
        return "the pipeline did not reach it"
    if loop is None:
        return "the loop did not reach it; the pipeline did"
    if pipeline == 0:
        return "both from the start" if loop == 0 else "the pipeline from the start"
    ratio = loop / pipeline
    met = "meets" if ratio >= TARGET_SPEEDUP else "misses"
    return f"the pipeline {ratio:.2f}x sooner ({met} the {TARGET_SPEEDUP}x target)"
