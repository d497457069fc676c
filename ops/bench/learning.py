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
import contextlib
import datetime as dt
import hashlib
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actors.tasks.toy import Variant
from ops.bench.report import cpu_model, memory_gib, write_section
from ops.cli import kit
from ops.console import say
from ops.paired import Outcomes, Paired
from ops.paths import REPO_ROOT, Paths

SECTION = "## learning"
LORA_TARGETS = "q_proj,k_proj,v_proj,o_proj"  # every attention projection


@dataclass(frozen=True)
class StepResult:
    step: int
    tasks: tuple[str, ...]
    rewards: tuple[float, ...]
    passed: int
    wrote_file: int
    trained_groups: int  # groups whose rewards differed (the others teach nothing and are skipped)
    seconds: float

    @property
    def pass_rate(self) -> float:
        return self.passed / len(self.rewards)


def step_tasks(train: Sequence[Any], step: int, per_step: int) -> list[Any]:
    """The training tasks of `step`: the next `per_step` in turn, cycling through `train`."""
    return [train[(step * per_step + j) % len(train)] for j in range(per_step)]


def group_samples(
    groups: Sequence[tuple[Sequence[tuple[int, ...]], Sequence[Any], Sequence[float]]],
) -> tuple[list[Any], int]:
    """The training samples of a step's groups, each group (prompts, replies, rewards) with advantages
    relative to its own rewards; a group whose rewards are all equal gives none. Returns (samples, the
    number of groups that gave some). A reply without tokens is left out (nothing to train on)."""
    from learner.objective import group_advantages
    from learner.step import Sample

    samples: list[Sample] = []
    trained = 0
    for prompts, replies, rewards in groups:
        advantages = group_advantages(rewards)
        if advantages is None:
            continue
        trained += 1
        samples += [
            Sample(prompt, reply.token_ids, reply.logprobs, advantage)
            for prompt, reply, advantage in zip(prompts, replies, advantages, strict=True)
            if reply.token_ids
        ]
    return samples, trained


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
        "--eval-every",
        type=kit.positive_float,
        metavar="MIN",
        default=1.0,
        help="with --pipeline: held-out evaluation grid, in training minutes (the newest version at each)",
    )
    kit.add_record(parser, REPO_ROOT / "BENCHMARKS.md", "learning (or learning: pipeline against the loop)")
    parser.add_argument("--note", default="", help="a reading of the result, recorded as its own line")


def _request(instruction: str, episode: str, seed: int, max_tokens: int, temperature: float) -> Any:
    from schemas.common import EventMeta, Producer
    from schemas.requests import PolicyRequest, SamplingParams

    meta = EventMeta(
        event_id=f"req-{episode}", occurred_at_us=0, producer=Producer("bench-learning", "0"), run_id="bench",
        episode_id=episode, task_id="", task_version="", step=0, attempt=1, policy_version=0,
        snapshot_id=None, prev_hash="0" * 64, traceparent=None,
    )  # fmt: skip
    sampling = SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=seed)
    return PolicyRequest(meta, instruction, (), sampling)


class Grader:
    """The reward of a reply's action: the task's repo with the action applied, graded by `verify` in a
    fresh sandbox. Equal outcomes are graded once (a group often repeats a reply)."""

    def __init__(self, verify_in_sandbox: Callable[[Any, Path], float], scratch: Path) -> None:
        self.verify = verify_in_sandbox
        self.scratch = scratch
        self.cache: dict[tuple[str, str], float] = {}

    def reward(self, task: Any, action: object) -> tuple[float, bool]:
        """(reward, whether the action wrote a file)."""
        from schemas.actions import WriteFile

        files: dict[str, bytes] = {}
        # A model's reply is far below the inline cap: its content is bytes, never a blob reference.
        if isinstance(action, WriteFile) and isinstance(action.content, bytes) and _safe(action.path):
            files[action.path] = action.content
        key = (task.id, hashlib.sha256(repr(sorted(files.items())).encode()).hexdigest())
        if key not in self.cache:
            workspace = task.copy_repo(self.scratch / f"{task.id}-{key[1][:12]}")
            for path, content in files.items():
                (workspace / path).parent.mkdir(parents=True, exist_ok=True)
                (workspace / path).write_bytes(content)
            self.cache[key] = self.verify(task, workspace)
        return self.cache[key], bool(files)


def _safe(path: str) -> bool:
    parts = Path(path).parts
    return bool(parts) and not Path(path).is_absolute() and ".." not in parts


def _samples(policy: Any, requests: Sequence[Any]) -> list[Any]:
    return list(policy.sample_batch(list(requests)))


def evaluate(policy: Any, grader: Grader, tasks: Sequence[Any], args: argparse.Namespace) -> Outcomes:
    """Passes on `tasks` with fixed seeds (the same before and after training), all in one batch."""
    requests = [
        _request(
            task.spec.instruction, f"eval-{task.id}-{i}", 1000 + i, args.max_new_tokens, args.temperature
        )
        for task in tasks
        for i in range(args.eval_per_task)
    ]
    outcomes = [
        grader.reward(tasks[row // args.eval_per_task], sample.action)[0] >= 1.0
        for row, sample in enumerate(_samples(policy, requests))
    ]
    return Outcomes(tuple(outcomes))


@dataclass
class SyncLoop:
    """The synchronous loop of the design brief, in one process: sample a step's groups, grade them, train
    on them, then the next step (each phase waits for the one before)."""

    policy: Any
    model: Any
    optimizer: Any
    grader: Grader
    train: Sequence[Any]
    args: argparse.Namespace

    def step(self, step: int) -> StepResult:
        from learner.trainer import TrainSettings, train_epochs

        args, policy = self.args, self.policy
        began = time.monotonic()
        tasks = step_tasks(self.train, step, args.tasks_per_step)
        requests = [
            _request(
                task.spec.instruction, f"learn-{step}-{task.id}-{i}", step * 1000 + i, args.max_new_tokens,
                args.temperature,
            )
            for task in tasks
            for i in range(args.group)
        ]  # fmt: skip
        replies = _samples(policy, requests)  # every group of the step in one batched generation
        sampled = time.monotonic()
        outcomes = [
            self.grader.reward(tasks[row // args.group], reply.action) for row, reply in enumerate(replies)
        ]
        rewards = [reward for reward, _wrote in outcomes]
        prompts = [tuple(policy.encoder.encode(request)) for request in requests]
        groups = [
            (prompts[first : first + args.group], replies[first : first + args.group],
             rewards[first : first + args.group])
            for first in range(0, len(requests), args.group)
        ]  # fmt: skip
        samples, trained = group_samples(groups)
        graded_at = time.monotonic()
        settings = TrainSettings(temperature=args.temperature)
        stats = train_epochs(self.model, self.optimizer, samples, args.epochs, settings)
        result = StepResult(
            step, tuple(task.id for task in tasks), tuple(rewards), sum(r >= 1.0 for r in rewards),
            sum(w for _r, w in outcomes), trained, time.monotonic() - began,
        )  # fmt: skip
        clip = f", clipped {stats[-1].clip_fraction:.0%} in the last pass" if stats else ""
        say(
            f"step {step + 1} {' '.join(result.tasks)}: passed {result.passed}/{len(rewards)}, wrote a file "
            f"{result.wrote_file}/{len(rewards)}, trained on {trained} of {len(tasks)} groups{clip} "
            f"[{result.seconds:.0f} s: sampling {sampled - began:.0f}, grading {graded_at - sampled:.0f}, "
            f"training {began + result.seconds - graded_at:.0f}]"
        )
        return result


@dataclass
class Bench:
    """What both the synchronous loop and the race need: the policy (LoRA-adapted, its optimizer), the
    toy tasks, and a grader on the stack's sandboxes."""

    policy: Any
    model: Any
    optimizer: Any
    grader: Grader
    train: list[Any]
    heldout: list[Any]
    split: Any  # actors.tasks.toy.ToySplit: the task folders (the pipeline publishes these)
    model_dir: Path

    def loop(self, args: argparse.Namespace) -> SyncLoop:
        return SyncLoop(self.policy, self.model, self.optimizer, self.grader, self.train, args)


@contextlib.contextmanager
def bench(args: argparse.Namespace, paths: Paths) -> Iterator[Bench]:
    import torch

    from actors.rollout.llm import load_llm_policy
    from actors.tasks.spec import load_tasks
    from actors.tasks.toy import Variant, import_toy
    from actors.tasks.verify import task_quotas, verify
    from learner.lora import Adaptation, adapt, trainable_parameters
    from learner.model import prepare_model
    from ops.stack.sandboxes import default_image, stack_backend
    from sandbox_agent.limits import SandboxSpec

    if args.threads:
        torch.set_num_threads(args.threads)
    model_dir = prepare_model(paths.cache)
    policy = load_llm_policy(model_dir, max_new_tokens=args.max_new_tokens)
    model = policy.backend.model  # type: ignore[attr-defined]
    adapt(model, Adaptation(rank=args.lora_rank, targets=_targets(args.lora_targets)))
    optimizer = torch.optim.AdamW(trainable_parameters(model), lr=args.lr)
    with (
        tempfile.TemporaryDirectory(prefix="trialog-bench-learning-") as scratch,
        stack_backend(paths, labels={"dev.trialog.bench": "learning"}) as backend,
    ):
        split = import_toy(
            Path(scratch) / "tasks", count=args.tasks, holdout_every=4, variant=Variant(args.variant)
        )

        def graded(task: Any, workspace: Path) -> float:
            spec = SandboxSpec(task.spec.image or default_image(), task_quotas(task))
            return float(verify(task, workspace, backend, spec).grade.reward)

        grader = Grader(graded, Path(scratch) / "work")
        yield Bench(
            policy, model, optimizer, grader, load_tasks(split.train), load_tasks(split.heldout), split,
            model_dir,
        )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    if args.pipeline:
        from ops.bench.learning_race import race

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


def _targets(text: str) -> tuple[str, ...]:
    targets = tuple(name.strip() for name in text.split(",") if name.strip())
    if not targets:
        raise ValueError("--lora-targets names no layer")
    return targets


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
