"""`trialog bench compare`, part `tail`: the synchronous loop against trialog's pipeline under a long tail.

Both sides run the same episodes (seeds 0..N-1 of one `LatencyModel`: how many turns each runs, a share
of them 60, and a seeded log-normal inference latency per turn), each turn a cheap real command in a real
Docker sandbox, each final workspace graded by the verifier's grader, with the same number of sandboxes,
the same grading capacity (`--tail-verifiers`), the same learner work (one update of `--tail-update-s`
per `--tail-batch` trajectories) and the same staleness rule. The loop (`sync_loop`) runs them in
lockstep, a wave of `--tail-sandboxes` at a time, and trains each wave in mini-batches; the pipeline
(`tail_pipeline`) streams them through real streams, sandbox (`--tail-sandbox-workers` processes, for the
step concurrency the loop's threads have) and verifier workers on Kafka and trains whenever a batch is
there, dropping trajectories staler than each bound of `--tail-staleness`. Figures: episodes trained per
minute and the learner's idle fraction, over the whole run and in steady state (`timeline`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from actors.rollout.simulated import LatencyModel
from ops.bench.compare.sync_loop import LoopResult
from ops.bench.compare.tail_pipeline import PipelineResult
from ops.bench.compare.timeline import Rate, Timeline
from ops.cli import kit
from ops.paths import REPO_ROOT
from streams.errors import StackError

HEADING = "## compare: long tail"
TARGET_SPEEDUP = 3.0
TARGET_IDLE = 0.20
DEFAULT_TASK = REPO_ROOT / "examples/tasks/easy-fix-add"
DEFAULT_POOL = 4
# A fifth of the episodes run 60 turns: about 3 in each wave of 16, so most of the loop's waves wait for one.
DEFAULT_MODEL = LatencyModel(long_share=0.2)


def _latency_model(text: str) -> LatencyModel:
    try:
        return LatencyModel.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _numbers(text: str, least: int, what: str) -> list[int]:
    try:
        numbers = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        numbers = []
    if not numbers or min(numbers) < least:
        raise argparse.ArgumentTypeError(f"{text!r}: give {what} >= {least}, comma-separated, e.g. 2,4")
    return numbers


def _bounds(text: str) -> list[int]:
    return _numbers(text, 0, "staleness bounds")


def _worker_counts(text: str) -> list[int]:
    return _numbers(text, 1, "numbers of sandbox workers")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("tail", "the synchronous loop against the pipeline under a long tail")
    group.add_argument(
        "--tail-episodes", type=kit.positive_int, metavar="N", default=96, help="episodes each side runs"
    )
    group.add_argument(
        "--tail-sandboxes", type=kit.positive_int, metavar="N", default=16,
        help="sandboxes on each side: the loop's wave, the pipeline's episodes in flight",
    )  # fmt: skip
    group.add_argument(
        "--tail-batch", type=kit.positive_int, metavar="N", default=8,
        help="trajectories per learner update on both sides (the loop trains a wave in mini-batches of N)",
    )  # fmt: skip
    group.add_argument(
        "--tail-sandbox-workers", type=_worker_counts, metavar="N[,N...]", default="4",
        help="sandbox worker processes of the pipeline, one consumer group (each runs one step at a time): "
        "one pipeline run per number and staleness bound",
    )  # fmt: skip
    group.add_argument(
        "--tail-update-s", type=kit.positive_seconds, metavar="S", default=15.0,
        help="seconds one learner update of --tail-batch trajectories takes (simulated, both sides)",
    )  # fmt: skip
    group.add_argument(
        "--tail-staleness", type=_bounds, metavar="K[,K...]", default="2,4",
        help="the pipeline's max staleness in policy versions: one pipeline run per bound",
    )  # fmt: skip
    group.add_argument(
        "--tail-latency-model", type=_latency_model, metavar="SPEC", default=DEFAULT_MODEL.spec(),
        help="the simulated policy: log-normal step latency (median, sigma, max seconds) and turns per "
        "episode (turns=MIN-MAX uniform, a long-share of them `long`)",
    )  # fmt: skip
    group.add_argument(
        "--tail-verifiers", type=kit.positive_int, metavar="N", default=2,
        help="grades at once: verifier workers of the pipeline, grading threads of the loop",
    )  # fmt: skip
    group.add_argument(
        "--tail-task", type=kit.existing_dir, metavar="DIR", default=DEFAULT_TASK,
        help="the task folder every episode runs (the verifier grades its tests)",
    )  # fmt: skip
    group.add_argument(
        "--tail-timeout-s", type=kit.positive_seconds, metavar="S", default=3600.0,
        help="give up a side that has not finished by then",
    )  # fmt: skip


@dataclass(frozen=True)
class TailResult:
    model: LatencyModel
    loop: LoopResult
    pipelines: dict[tuple[int, int], PipelineResult]  # by (staleness bound, sandbox workers)


def measure(args: argparse.Namespace, progress: Callable[[str], None] | None = None) -> str:
    result = run_both(args, progress)
    check(result, args.tail_episodes)
    return render(args, result)


def loop_staleness(sandboxes: int, batch: int) -> int:
    """How many versions behind the loop's last mini-batch of a wave is trained: ceil(wave / batch) - 1."""
    return -(-sandboxes // batch) - 1


def check_args(args: argparse.Namespace) -> None:
    """The options together, before anything is started: the loop must keep to every bound compared."""
    behind = loop_staleness(args.tail_sandboxes, args.tail_batch)
    if behind > min(args.tail_staleness):
        raise StackError(
            f"the loop trains a wave of {args.tail_sandboxes} in mini-batches of {args.tail_batch}, its last "
            f"{behind} versions behind: above the staleness bound {min(args.tail_staleness)}",
            "give a larger --tail-batch or a higher --tail-staleness",
        )


def run_both(
    args: argparse.Namespace, progress: Callable[[str], None] | None = None, bootstrap: str | None = None
) -> TailResult:
    """Both sides, one after the other, on the stack's Kafka (or `bootstrap`) and Docker engine."""
    from actors.tasks.spec import load_task
    from ops.bench.compare.sync_loop import DockerLoopEnv, loop_batches, run_loop
    from ops.bench.compare.tail_pipeline import PipelineSettings, run_pipeline
    from ops.console import say
    from ops.stack.images import sandbox_ref
    from ops.stack.kafka import metadata_error
    from ops.stack.stack import StackConfig
    from ops.stores import open_objects

    check_args(args)
    say_ = progress or say
    bootstrap = bootstrap or getattr(args, "bootstrap", None) or StackConfig.load().kafka.bootstrap
    if metadata_error(bootstrap) is not None:
        raise StackError(f"Kafka does not answer on {bootstrap}", "start the stack: trialog up")
    model: LatencyModel = args.tail_latency_model
    task = load_task(args.tail_task)
    env = DockerLoopEnv(task, str(sandbox_ref()), open_objects(), DEFAULT_POOL, args.tail_verifiers)
    try:
        say_(f"loop: {args.tail_episodes} episodes, {args.tail_sandboxes} at a time")
        batches = loop_batches(args.tail_episodes, args.tail_sandboxes)
        bound = min(args.tail_staleness)
        loop = run_loop(env, model, batches, args.tail_update_s, bound, batch=args.tail_batch, progress=say_)
    finally:
        env.close()
    pipelines = {}
    for workers in args.tail_sandbox_workers:
        for bound in args.tail_staleness:
            say_(
                f"pipeline: {args.tail_episodes} episodes, {args.tail_sandboxes} in flight, staleness <= "
                f"{bound}, {workers} sandbox workers"
            )
            settings = PipelineSettings(
                args.tail_sandboxes, args.tail_episodes, args.tail_update_s, bound, args.tail_verifiers,
                DEFAULT_POOL, args.tail_timeout_s, workers, args.tail_batch,
            )  # fmt: skip
            pipelines[bound, workers] = run_pipeline(bootstrap, args.tail_task, model, settings, say_)
    return TailResult(model, loop, pipelines)


def check(result: TailResult, episodes: int) -> None:
    """The invariants of a measurement; a broken one is a bug in the benchmark, not a figure."""
    loop = result.loop.timeline
    expected = list(range(episodes))
    problems = []
    if loop.trained_seeds() != expected:
        problems.append(f"the loop trained {loop.trained} episodes, not seeds 0..{episodes - 1}")
    loop_steps = {
        seed: n for step in result.loop.steps for seed, n in zip(step.seeds, step.steps, strict=True)
    }
    for (bound, workers), pipeline in result.pipelines.items():
        t = pipeline.timeline
        name = f"staleness {bound}, {workers} sandbox workers"
        if (
            sorted([*t.trained_seeds(), *t.dropped]) != sorted(pipeline.episode_s)
            or t.completed + t.failed != episodes
        ):
            problems.append(f"{name}: trained + dropped + failed is not every episode once")
        if sorted(pipeline.episode_s) != expected:
            problems.append(f"{name}: the pipeline ended other episodes than seeds 0..{episodes - 1}")
        differ = [s for s, n in pipeline.steps.items() if n != loop_steps.get(s)]
        if differ:
            problems.append(f"{name}: episodes {differ[:5]} took other steps than in the loop")
    if problems:
        raise StackError("; ".join(problems), "a bug in the benchmark: report it")


def _rate(rate: Rate | None) -> str:
    return "-" if rate is None else f"{rate.per_minute:.1f}"


def _idle(rate: Rate | None) -> str:
    return "-" if rate is None else f"{100 * rate.idle:.0f}%"


def _ratio(numerator: Rate | None, denominator: Rate | None) -> float | None:
    if numerator is None or denominator is None or denominator.per_minute <= 0:
        return None
    return numerator.per_minute / denominator.per_minute


def _met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def render(args: argparse.Namespace, result: TailResult) -> str:
    from ops.bench.report import cpu_model, memory_gib

    model = result.model
    loop = result.loop.timeline
    turns = [model.turns(seed) for seed in range(args.tail_episodes)]
    longs = sum(1 for t in turns if t == model.long_turns)
    longs_per_wave = [
        sum(1 for s in step.seeds if turns[s] == model.long_turns) for step in result.loop.steps
    ]
    policy_s = [model.episode_seconds(seed) for seed in range(args.tail_episodes)]
    rollout_s = [step.rolled_out - step.acquired for step in result.loop.steps]
    verify_s = [step.verified - step.rolled_out for step in result.loop.steps]
    acquire_s = [step.acquired - step.started for step in result.loop.steps]
    update_s = [step.updates[-1].end - step.updates[0].start for step in result.loop.steps]
    mini = -(-args.tail_sandboxes // args.tail_batch)
    capacity = 60 * args.tail_batch / args.tail_update_s  # trajectories per minute the learner can train
    command = (
        f"trialog bench compare --parts tail --tail-episodes {args.tail_episodes} --tail-sandboxes "
        f"{args.tail_sandboxes} --tail-batch {args.tail_batch} --tail-update-s {args.tail_update_s:g} "
        f"--tail-staleness {_list(args.tail_staleness)} --tail-sandbox-workers "
        f"{_list(args.tail_sandbox_workers)} --tail-latency-model {model.spec()} --tail-verifiers "
        f"{args.tail_verifiers}"
    )
    loop_behind = "0 (on-policy)" if mini == 1 else f"0-{mini - 1} (mini-batches)"
    rows = [_row("synchronous loop", "-", loop_behind, loop, loop)]
    readings = []
    for (bound, workers), pipeline in result.pipelines.items():
        t = pipeline.timeline
        whole, steady = _ratio(t.whole, loop.whole), _ratio(t.steady, loop.steady)
        rows.append(_row("pipeline", str(workers), f"<= {bound}", t, loop))
        dropped_long = sum(1 for seed in t.dropped if model.turns(seed) == model.long_turns)
        steady_idle_ok = t.steady is not None and t.steady.idle < TARGET_IDLE
        # What an episode spent beyond the policy's own time, per step: sandbox, Kafka, the streams
        # worker and queueing behind other episodes' steps at its sandbox worker.
        ended = 60 * (t.completed + t.failed) / pipeline.rollout_s if pipeline.rollout_s > 0 else 0.0
        served = sum(pipeline.steps.values()) / pipeline.rollout_s if pipeline.rollout_s > 0 else 0.0
        overhead = [
            (pipeline.episode_s[seed] - model.episode_seconds(seed)) / n
            for seed, n in pipeline.steps.items()
            if n
        ]
        seconds = pipeline.episode_s.values()
        readings.append(
            f"- pipeline, {workers} sandbox workers, staleness <= {bound}: {_fmt(whole)} the loop's episodes "
            f"per minute over the whole run (target >= {TARGET_SPEEDUP:g}x: "
            f"{_met((whole or 0) >= TARGET_SPEEDUP)}), {_fmt(steady)} in steady state "
            f"({_met((steady or 0) >= TARGET_SPEEDUP)}); learner idle {_idle(t.whole)} whole, "
            f"{_idle(t.steady)} steady (target < {100 * TARGET_IDLE:.0f}%: "
            f"{_met(t.whole.idle < TARGET_IDLE)} whole, {_met(steady_idle_ok)} steady); "
            f"{len(t.dropped)} episodes dropped as stale ({dropped_long} of them {model.long_turns}-turn "
            f"ones), {t.failed} failed; staleness of the trained ones {_histogram(pipeline.staleness)}; "
            f"seconds from an episode's start to its trajectory p50 {statistics.median(seconds):.1f}, max "
            f"{max(seconds):.1f}; beyond the policy's time {_median(overhead):.2f} s per step p50 "
            f"(sandbox, Kafka, streams, queueing); episodes ended at {ended:.1f} per minute until the last "
            f"trajectory ({served:.1f} steps/s, {served / workers:.1f} per sandbox worker) against the "
            f"learner's {capacity:.0f} per minute at most"
        )
    lines = [
        HEADING,
        "",
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- machine: {cpu_model()}, {os.cpu_count()} cores, {memory_gib():.0f} GiB, shared with other "
        "work while measuring (load); Kafka, Docker, every worker and both sides on the same machine, "
        "one side after the other",
        f"- command: `{command}`",
        f"- episodes: seeds 0..{args.tail_episodes - 1}, the same on both sides; turns {model.min_turns}-"
        f"{model.max_turns} uniform, {model.long_share:.0%} of them {model.long_turns} (here {longs} of "
        f"{args.tail_episodes}, per loop wave {', '.join(map(str, longs_per_wave))}; mean "
        f"{statistics.mean(turns):.1f} turns), each turn `echo N >> steps.log` in a real sandbox after a "
        f"log-normal inference latency (median {model.median_s:g} s, sigma {model.sigma:g}, mean "
        f"{model.mean_step_s:.2f} s, clipped at {model.max_s:g} s): the policy's time per episode p50 "
        f"{statistics.median(policy_s):.1f} s, max {max(policy_s):.1f} s; task "
        f"`{Path(args.tail_task).name}` graded by the verifier's grader ({args.tail_verifiers} at a time)",
        f"- both sides: {args.tail_sandboxes} sandboxes; the same learner work, one update of "
        f"{args.tail_update_s:g} s per {args.tail_batch} trajectories ({capacity:.0f} trajectories per "
        f"minute at most): the loop trains each wave of {args.tail_sandboxes} in {mini} mini-batch(es) "
        "back to back, the pipeline as soon as a batch is there; an episode counts once an update trained on "
        "it; the learner is idle when not updating (the same `Timeline` arithmetic on both sides: wall "
        "from the clock's start to the last update's end); steady state runs from the first update's "
        "start to the last one's",
        f"- the loop's waves: rollout (the slowest episode) {statistics.mean(rollout_s):.1f} s mean, "
        f"verify {statistics.mean(verify_s):.1f} s, acquire {statistics.mean(acquire_s):.1f} s, update "
        f"{statistics.mean(update_s):.1f} s; staleness of the trained ones "
        f"{_histogram(list(result.loop.staleness))}",
        "",
        "| side | sandbox workers | staleness | completed | trained | dropped stale | wall | trained/min "
        "| learner idle | steady trained/min | steady idle | x loop (whole) | x loop (steady) |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *rows,
        "",
        *readings,
        "",
    ]
    return "\n".join(lines)


def _list(numbers: list[int]) -> str:
    return ",".join(map(str, numbers))


def _histogram(values: list[int]) -> str:
    return ", ".join(f"{k}: {values.count(k)}" for k in sorted(set(values))) or "-"


def _row(side: str, workers: str, staleness: str, t: Timeline, loop: Timeline) -> str:
    whole, steady = _ratio(t.whole, loop.whole), _ratio(t.steady, loop.steady)
    return (
        f"| {side} | {workers} | {staleness} | {t.completed} | {t.trained} | {len(t.dropped)} "
        f"| {t.whole.seconds:.0f} s "
        f"| {_rate(t.whole)} | {_idle(t.whole)} | {_rate(t.steady)} | {_idle(t.steady)} | {_fmt(whole)} "
        f"| {_fmt(steady)} |"
    )


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def _fmt(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"
