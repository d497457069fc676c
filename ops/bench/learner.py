"""`trialog bench learner`: how fast the learner consumes trajectories on CPU, and how idle it is.

The learner runs in this process exactly as `trialog worker learner` runs it (`learner.learner.Learner` over
a Kafka feed of the run's `trajectories.completed`, checkpoints, weights into an object store, announcements
on `policy.versions`), on the prepared SmolLM2-135M-Instruct with LoRA (rank 8 on q_proj/v_proj).
Trajectories are synthetic (`learner.testing`): each turn's prompt is the instruction's bytes (the `bytes`
prompt encoder, `--prompt-tokens` of them) and its response is a tool call's bytes, so the shapes are set
here, not by a tokenizer.

1. Throughput: `--groups` groups are on the topic before the learner starts; trajectories per second =
   trajectories trained / time from the learner's first poll to its last announcement.
2. Idle fraction: a rollout stand-in writes one group at a time, at the pace a rollout worker of the CPU
   policy would sample it (`--rollout-tokens-per-s` response tokens per second, sleeping meanwhile, so it
   takes no CPU from the learner), tagged with the learner's current version; the learner's idle fraction
   is the share of that phase's wall time it spent waiting for data rather than training and publishing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ops.bench.report import cpu_model, memory_gib, write_section
from ops.cli import kit
from ops.console import say
from ops.paths import REPO_ROOT
from schemas.topics import TRAJECTORIES_COMPLETED
from streams.errors import StackError
from streams.kafka.topics import ensure_topics

INSTRUCTION_WORDS = "Fix the function in calc.py so that the tests in tests/test_calc.py pass. "


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--groups", type=kit.positive_int, metavar="N", default=3, help="groups for the throughput phase"
    )
    parser.add_argument(
        "--idle-groups",
        type=kit.positive_int,
        metavar="N",
        default=3,
        help="groups for the idle-fraction phase",
    )
    parser.add_argument(
        "--group-size", type=kit.positive_int, metavar="N", default=4, help="trajectories per group"
    )
    parser.add_argument(
        "--turns", type=kit.positive_int, metavar="N", default=2, help="model turns per trajectory"
    )
    parser.add_argument(
        "--prompt-tokens", type=kit.positive_int, metavar="N", default=256, help="prompt tokens per turn"
    )
    parser.add_argument(
        "--lora-rank", type=kit.non_negative_int, metavar="N", default=8, help="LoRA rank, 0 for every weight"
    )
    parser.add_argument(
        "--threads",
        type=kit.non_negative_int,
        metavar="N",
        default=0,
        help="torch threads (0: torch's choice)",
    )
    parser.add_argument("--rollout-tokens-per-s", type=kit.positive_float, metavar="N", default=15.0,
                        help="the stand-in's sampling pace (SmolLM2 greedy on 2 cores: ~15)")  # fmt: skip
    parser.add_argument(
        "--model", type=kit.existing_dir, metavar="DIR", help="model folder (default: the prepared SmolLM2)"
    )
    kit.add_bootstrap(parser)
    kit.add_record(parser, REPO_ROOT / "BENCHMARKS.md", "learner")


@dataclass
class Phase:
    trajectories: int
    seconds: float
    steps: int
    step_seconds: list[float]
    samples_per_step: list[int]
    tokens: int
    idle_fraction: float


def run(args: argparse.Namespace) -> int:
    import torch

    from learner.model import load_model, prepare_model
    from ops.paths import Paths
    from ops.stack.kafka import metadata_error
    from ops.stack.stack import StackConfig

    bootstrap = args.bootstrap or StackConfig.load().kafka.bootstrap
    if metadata_error(bootstrap) is not None:
        raise StackError(f"Kafka does not answer on {bootstrap}", "start the stack: trialog up")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    model_dir = args.model or prepare_model(Paths.from_env().cache)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="trialog-bench-learner-") as scratch:
        say(f"throughput: {args.groups} groups of {args.group_size} waiting on the topic")
        throughput = _phase(args, bootstrap, load_model(model_dir), Path(scratch) / "a", paced=False)
        say(f"idle fraction: {args.idle_groups} groups from a rollout stand-in")
        idle = _phase(args, bootstrap, load_model(model_dir), Path(scratch) / "b", paced=True)
    load = (load_before, os.getloadavg()[0])
    section = _render(args, throughput, idle, torch.get_num_threads(), load)
    print(section)
    if not args.no_record:
        write_section(args.record, section)
        say(f"wrote {args.record}")
    return 0


def _phase(args: argparse.Namespace, bootstrap: str, model: object, scratch: Path, *, paced: bool) -> Phase:
    from learner.kafka_io import KafkaAnnouncer, KafkaFeed
    from learner.learner import Learner, LearnerSettings
    from learner.loop import run as run_learner
    from learner.lora import Adaptation
    from learner.samples import BytesPromptEncoder
    from learner.state import PlannerConfig
    from schemas.blobs import LocalObjectStore
    from schemas.origin import Origin, SystemClock

    run_id = f"bench-learner-{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, run_id)
    groups = args.idle_groups if paced else args.groups
    settings = LearnerSettings(
        run_id=run_id,
        checkpoint_dir=scratch / "ckpt",
        planner=PlannerConfig(args.group_size, 3600.0, 1000),
        adaptation=Adaptation(rank=args.lora_rank),
    )
    announcer = KafkaAnnouncer(bootstrap, run_id)
    store = LocalObjectStore(scratch / "objects")
    learner = Learner(
        model, BytesPromptEncoder(), store, announcer, settings, Origin.system("learner", "bench")
    )
    stand_in = RolloutStandIn(bootstrap, run_id, args, learner)
    if not paced:
        stand_in.produce(groups, paced=False)
    feed = KafkaFeed(bootstrap, run_id, {})
    stopping = threading.Event()
    producer = threading.Thread(target=stand_in.produce, args=(groups,), kwargs={"paced": True}, daemon=True)
    expected = groups * args.group_size
    watcher = threading.Thread(target=_stop_when_trained, args=(learner, expected, stopping), daemon=True)
    started = time.monotonic()
    learner.activity.started = started
    if paced:
        producer.start()
    watcher.start()
    try:
        run_learner(learner, feed, SystemClock(), stopping, poll_ms=100)
    finally:
        feed.close()
        announcer.close()
    seconds = time.monotonic() - started
    stats = _stats(settings.checkpoint_dir)
    return Phase(
        trajectories=learner.state.counters.trained,
        seconds=seconds,
        steps=learner.state.counters.steps,
        step_seconds=[s["train"]["seconds"] for s in stats],
        samples_per_step=[s["train"]["samples"] for s in stats],
        tokens=sum(s["train"]["tokens"] for s in stats),
        idle_fraction=1.0 - learner.activity.busy_s / seconds,
    )


def _stop_when_trained(learner: object, expected: int, stopping: threading.Event) -> None:
    give_up = time.monotonic() + 3600
    while time.monotonic() < give_up and learner.state.counters.trained < expected:  # type: ignore[attr-defined]
        time.sleep(0.05)
    stopping.set()


def _stats(folder: Path) -> list[dict[str, Any]]:
    import json

    from learner.defaults import STATS_FILE

    path = folder / STATS_FILE
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


class RolloutStandIn:
    """Writes synthetic groups to the run's `trajectories.completed`, tagged with the learner's version."""

    def __init__(self, bootstrap: str, run_id: str, args: argparse.Namespace, learner: object) -> None:
        self.bootstrap, self.run_id, self.args, self.learner = bootstrap, run_id, args, learner
        repeat = args.prompt_tokens // len(INSTRUCTION_WORDS) + 1
        self.instruction = (INSTRUCTION_WORDS * repeat)[: args.prompt_tokens]

    def produce(self, groups: int, *, paced: bool) -> None:
        from learner import testing
        from schemas.actions import Action, RunCommand, Submit
        from schemas.codec import default_codec
        from streams.kafka import clients

        codec = default_codec()
        producer = clients.producer(self.bootstrap)
        actions: tuple[Action, ...] = (*(RunCommand(f"python3 -m pytest -q tests/test_calc.py -k case{i}")
                     for i in range(self.args.turns - 1)), Submit("done"))  # fmt: skip
        for g in range(groups):
            version = self.learner.state.version  # type: ignore[attr-defined]
            group_id = f"{self.run_id}/g{g:04d}"
            members = [
                testing.trajectory(
                    run_id=self.run_id,
                    episode_id=f"{group_id}/e{i}",
                    group_id=group_id,
                    task_id=f"task-{g}",
                    reward=float(i % 2),
                    policy_version=version,
                    actions=actions,
                    instruction=self.instruction,
                    seed=g,
                )
                for i in range(self.args.group_size)
            ]
            if paced:  # the time a rollout worker would take to sample these responses
                tokens = sum(len(s.action.token_ids) for m in members for s in m.steps)
                time.sleep(tokens / self.args.rollout_tokens_per_s)
            for member in members:
                producer.send(TRAJECTORIES_COMPLETED.of(self.run_id), key=f"task-{g}".encode(),
                              value=codec.encode(member))  # fmt: skip
            producer.flush()
        producer.close()


def _render(
    args: argparse.Namespace, throughput: Phase, idle: Phase, threads: int, load: tuple[float, float]
) -> str:
    rate = throughput.trajectories / throughput.seconds
    step_s = sorted(throughput.step_seconds)
    median = statistics.median(step_s) if step_s else float("nan")
    tokens_per_step = throughput.tokens / max(throughput.steps, 1)
    samples = sum(throughput.samples_per_step) or 1
    response = throughput.tokens / samples
    return "\n".join(
        [
            "## learner",
            "",
            f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
            f"- machine: {cpu_model()}, {os.cpu_count()} cores, {memory_gib():.0f} GiB, CPU only, torch "
            f"{threads} threads; the Kafka broker on the same machine; load average {load[0]:.1f} at the "
            f"start, {load[1]:.1f} at the end (other work on the machine, not controlled)",
            f"- command: `trialog bench learner --groups {args.groups} --idle-groups {args.idle_groups} "
            f"--group-size {args.group_size} --turns {args.turns} --prompt-tokens {args.prompt_tokens} "
            f"--lora-rank {args.lora_rank} --rollout-tokens-per-s {args.rollout_tokens_per_s:g}`",
            f"- model: SmolLM2-135M-Instruct (float32), LoRA rank {args.lora_rank} on q_proj/v_proj, "
            "AdamW; one training step (one new version, checkpointed and published) per group of "
            f"{args.group_size}",
            f"- trajectories: {args.turns} turns each, {args.prompt_tokens} prompt tokens per turn, "
            f"responses of {response:.0f} tokens on average (a tool call's bytes; the `bytes` prompt "
            "encoder)",
            "",
            "| measure | value |",
            "| --- | ---: |",
            f"| trajectories/s consumed (throughput phase, {throughput.trajectories} trajectories) | "
            f"{rate:.3f} |",
            f"| seconds per training step (median of {throughput.steps}: "
            f"{', '.join(f'{s:.0f}' for s in step_s)}) | {median:.1f} |",
            f"| response tokens trained per step | {tokens_per_step:.0f} |",
            f"| learner idle fraction while the rollout stand-in produces ({idle.trajectories} trajectories, "
            f"{idle.seconds:.0f} s) | {idle.idle_fraction:.1%} |",
            "",
            f"- the stand-in samples at {args.rollout_tokens_per_s:g} response tokens/s (one CPU rollout "
            "worker of this policy) and sleeps meanwhile: on a real 2-core machine the rollout would also "
            "take CPU from the learner",
            "- reading: with the machine's load average far above its 2 cores, the learner got a fraction "
            "of them; the figures are an upper bound on its cost here, not its speed on an idle machine. "
            "Either way the learner, not the rollouts, is the bottleneck on CPU (it is idle a small share "
            "of the time), which is why LoRA and one step per group are the defaults",
            "",
        ]
    )
