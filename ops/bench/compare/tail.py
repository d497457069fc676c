"""`trialog bench compare`, part `tail`: the synchronous loop against trialog's pipeline under a long tail.

Both sides run the same episodes (seeds 0..N-1 of one `LatencyModel`: how many turns each runs, a share
of them 60, and a seeded log-normal inference latency per turn), each turn a cheap real command in a real
Docker sandbox, each final workspace graded by the verifier's grader, with the same number of sandboxes,
the same grading capacity (`--tail-verifiers`), the same update time and batch (one update per
`--tail-sandboxes` episodes) and the same staleness rule. The loop (`sync_loop`) runs them in lockstep;
the pipeline (`tail_pipeline`) streams them through real streams, sandbox and verifier workers on Kafka
and trains whenever a batch is there, dropping trajectories staler than each bound of
`--tail-staleness`. Figures: episodes trained per minute and the learner's idle fraction, over the whole
run and in steady state (`timeline`).
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


def _latency_model(text: str) -> LatencyModel:
    try:
        return LatencyModel.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _bounds(text: str) -> list[int]:
    try:
        bounds = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        bounds = []
    if not bounds or min(bounds) < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give staleness bounds >= 0, comma-separated, e.g. 2,4")
    return bounds


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("tail", "the synchronous loop against the pipeline under a long tail")
    group.add_argument(
        "--tail-episodes", type=kit.positive_int, metavar="N", default=64, help="episodes each side runs"
    )
    group.add_argument(
        "--tail-sandboxes", type=kit.positive_int, metavar="N", default=16,
        help="sandboxes on each side: the loop's batch, the pipeline's episodes in flight, an update's batch",
    )  # fmt: skip
    group.add_argument(
        "--tail-update-s", type=kit.positive_seconds, metavar="S", default=15.0,
        help="seconds one learner update takes (simulated, the same on both sides)",
    )  # fmt: skip
    group.add_argument(
        "--tail-staleness", type=_bounds, metavar="K[,K...]", default="2,4",
        help="the pipeline's max staleness in policy versions: one pipeline run per bound",
    )  # fmt: skip
    group.add_argument(
        "--tail-latency-model", type=_latency_model, metavar="SPEC", default=LatencyModel().spec(),
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
    pipelines: dict[int, PipelineResult]  # by staleness bound


def measure(args: argparse.Namespace, progress: Callable[[str], None] | None = None) -> str:
    result = run_both(args, progress)
    check(result, args.tail_episodes)
    return render(args, result)


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
        loop = run_loop(env, model, batches, args.tail_update_s, 0, progress=say_)
    finally:
        env.close()
    pipelines = {}
    for bound in args.tail_staleness:
        say_(
            f"pipeline: {args.tail_episodes} episodes, {args.tail_sandboxes} in flight, staleness <= {bound}"
        )
        settings = PipelineSettings(
            args.tail_sandboxes, args.tail_episodes, args.tail_update_s, bound, args.tail_verifiers,
            DEFAULT_POOL, args.tail_timeout_s,
        )  # fmt: skip
        pipelines[bound] = run_pipeline(bootstrap, args.tail_task, model, settings, say_)
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
    for bound, pipeline in result.pipelines.items():
        t = pipeline.timeline
        if (
            sorted([*t.trained_seeds(), *t.dropped]) != sorted(pipeline.episode_s)
            or t.completed + t.failed != episodes
        ):
            problems.append(f"staleness {bound}: trained + dropped + failed is not every episode once")
        if sorted(pipeline.episode_s) != expected:
            problems.append(
                f"staleness {bound}: the pipeline ended other episodes than seeds 0..{episodes - 1}"
            )
        differ = [s for s, n in pipeline.steps.items() if n != loop_steps.get(s)]
        if differ:
            problems.append(f"staleness {bound}: episodes {differ[:5]} took other steps than in the loop")
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
    policy_s = [model.episode_seconds(seed) for seed in range(args.tail_episodes)]
    rollout_s = [step.rolled_out - step.acquired for step in result.loop.steps]
    verify_s = [step.verified - step.rolled_out for step in result.loop.steps]
    acquire_s = [step.acquired - step.started for step in result.loop.steps]
    command = (
        f"trialog bench compare --parts tail --tail-episodes {args.tail_episodes} --tail-sandboxes "
        f"{args.tail_sandboxes} --tail-update-s {args.tail_update_s:g} --tail-staleness "
        f"{','.join(map(str, args.tail_staleness))} --tail-latency-model {model.spec()} --tail-verifiers "
        f"{args.tail_verifiers}"
    )
    rows = [_row("synchronous loop", "0 (on-policy)", loop, loop)]
    readings = []
    for bound, pipeline in result.pipelines.items():
        t = pipeline.timeline
        whole, steady = _ratio(t.whole, loop.whole), _ratio(t.steady, loop.steady)
        rows.append(_row("pipeline", f"<= {bound}", t, loop))
        dropped_long = sum(1 for seed in t.dropped if model.turns(seed) == model.long_turns)
        histogram = ", ".join(f"{k}: {pipeline.staleness.count(k)}" for k in sorted(set(pipeline.staleness)))
        steady_idle_ok = t.steady is not None and t.steady.idle < TARGET_IDLE
        # What an episode spent beyond the policy's own time, per step: sandbox, Kafka, the streams
        # worker and queueing behind other episodes' steps (one sandbox worker, one streams worker).
        ended = 60 * t.completed / t.whole.seconds if t.whole.seconds > 0 else 0.0
        capacity = 60 * args.tail_sandboxes / args.tail_update_s
        overhead = [
            (pipeline.episode_s[seed] - model.episode_seconds(seed)) / n
            for seed, n in pipeline.steps.items()
            if n
        ]
        seconds = pipeline.episode_s.values()
        readings.append(
            f"- staleness <= {bound}: {_fmt(whole)} the loop's episodes per minute over the whole run "
            f"(target >= {TARGET_SPEEDUP:g}x: {_met((whole or 0) >= TARGET_SPEEDUP)}), {_fmt(steady)} in "
            f"steady state ({_met((steady or 0) >= TARGET_SPEEDUP)}); learner idle {_idle(t.whole)} whole, "
            f"{_idle(t.steady)} steady (target < {100 * TARGET_IDLE:.0f}%: "
            f"{_met(t.whole.idle < TARGET_IDLE)} whole, {_met(steady_idle_ok)} steady); "
            f"{len(t.dropped)} episodes dropped as stale ({dropped_long} of them {model.long_turns}-turn "
            f"ones), {t.failed} failed; staleness of the trained ones {histogram}; seconds from an "
            f"episode's start to its trajectory p50 {statistics.median(seconds):.1f}, max "
            f"{max(seconds):.1f}; beyond the policy's time {_median(overhead):.2f} s per step p50 "
            f"(sandbox, Kafka, streams, queueing); episodes ended at {ended:.1f} per minute against the "
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
        f"{args.tail_episodes}; mean {statistics.mean(turns):.1f} turns), each turn `echo N >> steps.log` "
        f"in a real sandbox after a log-normal inference latency (median {model.median_s:g} s, sigma "
        f"{model.sigma:g}, mean {model.mean_step_s:.2f} s, clipped at {model.max_s:g} s): the policy's "
        f"time per episode p50 {statistics.median(policy_s):.1f} s, max {max(policy_s):.1f} s; task "
        f"`{Path(args.tail_task).name}` graded by the verifier's grader ({args.tail_verifiers} at a time)",
        f"- both sides: {args.tail_sandboxes} sandboxes, one update of {args.tail_update_s:g} s per "
        f"{args.tail_sandboxes} episodes; an episode counts once an update trained on it; the learner is "
        "idle when not updating; steady state runs from the first update's start to the last one's",
        f"- the loop's steps: rollout (the slowest episode) {statistics.mean(rollout_s):.1f} s mean, verify "
        f"{statistics.mean(verify_s):.1f} s, acquire {statistics.mean(acquire_s):.1f} s, update "
        f"{args.tail_update_s:g} s",
        "",
        "| side | staleness | completed | trained | dropped stale | wall | trained/min | learner idle "
        "| steady trained/min | steady idle | x loop (whole) | x loop (steady) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *rows,
        "",
        *readings,
        "",
    ]
    return "\n".join(lines)


def _row(side: str, staleness: str, t: Timeline, loop: Timeline) -> str:
    whole, steady = _ratio(t.whole, loop.whole), _ratio(t.steady, loop.steady)
    return (
        f"| {side} | {staleness} | {t.completed} | {t.trained} | {len(t.dropped)} | {t.whole.seconds:.0f} s "
        f"| {_rate(t.whole)} | {_idle(t.whole)} | {_rate(t.steady)} | {_idle(t.steady)} | {_fmt(whole)} "
        f"| {_fmt(steady)} |"
    )


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def _fmt(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"
