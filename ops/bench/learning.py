"""`trialog bench learning`: the learning check. Does one GRPO step after another make SmolLM2-135M better
at a verifiable toy task ("make NAME() return N"), with rewards from the frozen tests in real sandboxes?

Each step takes the next `--tasks-per-step` training tasks (in turn), samples a group of G replies to each
task's first turn through the production policy (`LlmPolicy`: the scaffold's chat, batched seeded sampling
with behaviour log-probs), grades each reply's action with `verify` in a fresh Docker sandbox (the reward
rule of the pipeline; a reply that writes no file is graded on the unchanged repo), computes
group-relative advantages per task and trains on the step's groups with the learner's own code
(`learner.trainer`, LoRA): `--epochs` PPO-clipped passes over the same samples, each one optimizer step
(the behaviour log-probs stay those of the sampling policy, so the clipped ratio bounds how far the passes
move it). The pass rate of every step's replies is the curve. Before the first and after the last step,
the held-out tasks are sampled with the same fixed seeds, so the two pass rates differ only in the weights.

This check runs the policy, reward and learner code without Kafka, to measure learning alone; `trialog
demo` runs the same pieces through the whole pipeline, and `--pipeline` races the two by the training
clock (`ops.bench.learning_race`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import time
from collections.abc import Sequence

from actors.tasks.toy import Variant
from ops.bench.learning_loop import StepResult, bench, evaluate
from ops.bench.report import cpu_model, memory_gib, write_section
from ops.cli import kit
from ops.console import say
from ops.paired import Outcomes, Paired
from ops.paths import REPO_ROOT, Paths

SECTION = "## learning"
LORA_TARGETS = "q_proj,k_proj,v_proj,o_proj"  # every attention projection


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # The defaults are the settings of the run recorded in BENCHMARKS.md (the one that showed learning);
    # the earlier defaults, which showed none, were --steps 16 --tasks-per-step 1 --tasks 8
    # --eval-per-task 8 --lr 2e-4 --epochs 1 --lora-targets q_proj,v_proj.
    parser.add_argument("--steps", type=kit.positive_int, metavar="N", default=12, help="GRPO steps")
    parser.add_argument(
        "--variant",
        choices=[variant.value for variant in Variant],
        default="blind",
        help="toy variant (actors.tasks.toy): blind names the function only, shown also shows the file",
    )
    parser.add_argument(
        "--tasks-per-step", type=kit.positive_int, metavar="N", default=2, help="groups per step"
    )
    parser.add_argument(
        "--epochs", type=kit.positive_int, metavar="N", default=2, help="PPO passes over each step's samples"
    )
    parser.add_argument(
        "--lora-targets", default=LORA_TARGETS, help="comma-separated linear layers LoRA adapts"
    )
    parser.add_argument(
        "--group", type=kit.positive_int, metavar="N", default=8, help="replies per task and step"
    )
    parser.add_argument(
        "--tasks", type=kit.positive_int, metavar="N", default=16, help="toy tasks, a quarter held out"
    )
    parser.add_argument(
        "--eval-per-task", type=kit.positive_int, metavar="N", default=16, help="held-out samples per task"
    )
    parser.add_argument(
        "--lr", type=kit.positive_float, metavar="N", default=1e-3, help="AdamW learning rate"
    )
    parser.add_argument(
        "--lora-rank", type=kit.non_negative_int, metavar="N", default=8, help="LoRA rank, 0 for every weight"
    )
    parser.add_argument(
        "--max-new-tokens", type=kit.positive_int, metavar="N", default=48, help="tokens per reply"
    )
    parser.add_argument(
        "--temperature",
        type=kit.positive_float,
        metavar="N",
        default=0.7,
        help="sampling temperature, also the learner's",
    )
    parser.add_argument(
        "--threads",
        type=kit.non_negative_int,
        metavar="N",
        default=1,
        help="torch threads, 0 for torch's choice (1: on 2 shared cores one thread is faster than two "
        "spinning on each other)",
    )
    parser.add_argument(
        "--pipeline",
        action="store_true",
        help="race: the same training through the real pipeline (Kafka, workers, learner) and with this "
        "synchronous loop, one after the other, each for --minutes; held-out pass rate by training minute, "
        "minutes to 50%% and 80%%",
    )
    parser.add_argument(
        "--minutes",
        type=kit.positive_float,
        metavar="N",
        default=8.0,
        help="with --pipeline: each side's training time",
    )
    parser.add_argument(
        "--rollouts",
        type=kit.positive_int,
        metavar="N",
        default=1,
        help="with --pipeline: the pipeline's rollout worker processes (the loop is one process)",
    )
    parser.add_argument(
        "--batch-linger-ms",
        type=kit.non_negative_int,
        metavar="MS",
        default=0,
        help="with --pipeline: how long the rollout holds a batch open for more requests (0: none)",
    )
    parser.add_argument(
        "--eval-every",
        type=kit.positive_float,
        metavar="MIN",
        default=1.0,
        help="with --pipeline: held-out evaluation grid, in training minutes (the newest version at each)",
    )
    kit.add_record(parser, REPO_ROOT / "BENCHMARKS.md", "learning (or learning: pipeline against the loop)")
    parser.add_argument("--note", default="", help="a reading of the result, recorded as its own line")


def run(args: argparse.Namespace) -> int:
    if args.pipeline:
        from ops.bench.learning_race import race  # the race imports the loop, never this module

        return race(args)
    started = time.monotonic()
    with bench(args, Paths.from_env()) as b:
        say(f"evaluating v0 on {len(b.heldout)} held-out tasks x {args.eval_per_task}")
        before = evaluate(b.policy, b.grader, b.heldout, args)
        say(f"held-out pass rate before: {before}")
        loop = b.loop(args)
        curve = [loop.step(step) for step in range(args.steps)]
        after = evaluate(b.policy, b.grader, b.heldout, args)
        say(f"held-out pass rate after: {after}")
    section = render(args, curve, before, after, time.monotonic() - started, [t.id for t in b.heldout])
    print(section)
    if not args.no_record:
        write_section(args.record, section)
    return 0


def render(
    args: argparse.Namespace,
    curve: Sequence[StepResult],
    before: Outcomes,
    after: Outcomes,
    seconds: float,
    heldout: Sequence[str] = (),
) -> str:
    half = len(curve) // 2
    first = sum(r.passed for r in curve[:half]), sum(len(r.rewards) for r in curve[:half])
    second = sum(r.passed for r in curve[half:]), sum(len(r.rewards) for r in curve[half:])
    groups = sum(len(r.tasks) for r in curve)
    trained = sum(r.trained_groups for r in curve)
    step_s = statistics.fmean(r.seconds for r in curve) if curve else 0.0
    paired = Paired.of(before, after)
    rows = "\n".join(
        f"| {r.step + 1} | {' '.join(r.tasks)} | {r.passed}/{len(r.rewards)} | "
        f"{r.wrote_file}/{len(r.rewards)} | {statistics.fmean(r.rewards):.2f} | "
        f"{r.trained_groups}/{len(r.tasks)} | {r.seconds:.0f} |"
        for r in curve
    )
    note = f"- reading: {args.note.strip()}\n" if args.note.strip() else ""
    return f"""{SECTION}

`trialog bench learning --variant {args.variant} --steps {args.steps} --tasks-per-step {args.tasks_per_step} \
--group {args.group} --tasks {args.tasks} --eval-per-task {args.eval_per_task} --lr {args.lr} \
--epochs {args.epochs} --lora-rank {args.lora_rank} --lora-targets {args.lora_targets} \
--max-new-tokens {args.max_new_tokens} \
--temperature {args.temperature} --threads {args.threads}` on {dt.date.today().isoformat()}, \
{cpu_model()}, {memory_gib():.0f} GiB, {os.cpu_count()} cores; {seconds / 60:.1f} min in all \
({step_s:.0f} s a step).
SmolLM2-135M-Instruct on the first turn of {args.variant} toy tasks ("make NAME() return N", \
`actors/tasks/toy.py`): per step {args.tasks_per_step} task(s) x a GRPO group of {args.group}, rewards from \
`verify` in fresh Docker sandboxes, LoRA rank {args.lora_rank} on {args.lora_targets}, \
{args.epochs} PPO-clipped pass(es) per step. Held-out tasks ({", ".join(heldout) or "none"}) are never \
trained on.

- training pass rate, first half of the steps: {_share(*first)}; second half: {_share(*second)}
- held-out pass rate ({args.eval_per_task} fixed seeds per task): before {before}, after {after}; \
same task and seed: {paired.gained} failed before and passed after, {paired.lost} the other way \
(two-sided sign test p = {paired.p_value:.2g})
- groups with different rewards (trained on): {trained} of {groups}
{note}
| step | tasks | passed | wrote a file | mean reward | groups trained | seconds |
| --- | --- | --- | --- | --- | --- | --- |
{rows}
"""


def _share(passed: int, total: int) -> str:
    return f"{passed / total:.0%} ({passed}/{total})" if total else "n/a"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="trialog bench learning", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
