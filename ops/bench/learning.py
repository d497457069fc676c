"""`trialog bench learning`: the learning check. Does one GRPO step after another make SmolLM2-135M better
at a verifiable toy task ("make NAME() return N"), with rewards from the frozen tests in real sandboxes?

Each step takes the next training task (in turn), samples a group of G replies to the task's first turn
through the production policy (`LlmPolicy`: the scaffold's chat, batched seeded sampling with behaviour
log-probs), grades each reply's action with `verify` in a fresh Docker sandbox (the reward rule of the
pipeline; a reply that writes no file is graded on the unchanged repo), computes group-relative
advantages and takes one PPO-clipped step with the learner's own code (`learner.trainer`, LoRA). The
pass rate of every group is the curve. Before the first and after the last step, the held-out tasks are
sampled with the same fixed seeds, so the two pass rates differ only in the weights.

This check runs the policy, reward and learner code without Kafka, to measure learning alone; `trialog
demo` runs the same pieces through the whole pipeline.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ops.bench.report import cpu_model, memory_gib, write_section
from ops.paths import REPO_ROOT, Paths

SECTION = "## learning"


@dataclass(frozen=True)
class StepResult:
    step: int
    task: str
    rewards: tuple[float, ...]
    passed: int
    wrote_file: int
    trained: bool
    seconds: float

    @property
    def pass_rate(self) -> float:
        return self.passed / len(self.rewards)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=int, default=16, help="GRPO steps (default 16)")
    parser.add_argument("--group", type=int, default=8, help="replies per step (default 8)")
    parser.add_argument("--tasks", type=int, default=8, help="toy tasks, a quarter held out (default 8)")
    parser.add_argument("--eval-per-task", type=int, default=8, help="held-out samples per task (default 8)")
    parser.add_argument("--lr", type=float, default=2e-4, help="AdamW learning rate (default 2e-4)")
    parser.add_argument("--lora-rank", type=int, default=8, help="LoRA rank, 0 for every weight (default 8)")
    parser.add_argument("--max-new-tokens", type=int, default=48, help="tokens per reply (default 48)")
    parser.add_argument(
        "--temperature",
        type=float,
        default=0.7,
        help="sampling temperature, also the learner's (default 0.7)",
    )
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
    parser.add_argument(
        "--output",
        type=Path,
        default=REPO_ROOT / "BENCHMARKS.md",
        help="where to record (default BENCHMARKS.md)",
    )
    parser.add_argument("--no-record", action="store_true", help="print only; leave BENCHMARKS.md alone")


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


def evaluate(policy: Any, grader: Grader, tasks: Sequence[Any], args: argparse.Namespace) -> float:
    """Pass rate on `tasks` with fixed seeds (the same before and after training)."""
    passed = total = 0
    for task in tasks:
        requests = [
            _request(
                task.spec.instruction, f"eval-{task.id}-{i}", 1000 + i, args.max_new_tokens, args.temperature
            )
            for i in range(args.eval_per_task)
        ]
        for sample in _samples(policy, requests):
            reward, _wrote = grader.reward(task, sample.action)
            passed += reward >= 1.0
            total += 1
    return passed / total if total else 0.0


def run(args: argparse.Namespace) -> int:
    import torch

    from actors.rollout.llm import load_llm_policy
    from actors.tasks.spec import load_tasks
    from actors.tasks.toy import import_toy
    from actors.tasks.verify import task_quotas, verify
    from learner.lora import Adaptation, adapt, trainable_parameters
    from learner.model import prepare_model
    from learner.objective import group_advantages
    from learner.step import Sample
    from learner.trainer import TrainSettings, train_step
    from sandbox_agent.limits import SandboxSpec
    from sandbox_agent.stack import default_image, stack_backend

    if args.threads:
        torch.set_num_threads(args.threads)
    paths = Paths.from_env()
    model_dir = prepare_model(paths.cache)
    policy = load_llm_policy(model_dir, max_new_tokens=args.max_new_tokens)
    model = policy.backend.model  # type: ignore[attr-defined]
    adapt(model, Adaptation(rank=args.lora_rank))
    optimizer = torch.optim.AdamW(trainable_parameters(model), lr=args.lr)
    started = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="trialog-bench-learning-") as scratch,
        stack_backend(paths, labels={"dev.trialog.bench": "learning"}) as backend,
    ):
        split = import_toy(Path(scratch) / "tasks", count=args.tasks, holdout_every=4)
        train, heldout = load_tasks(split.train), load_tasks(split.heldout)

        def graded(task: Any, workspace: Path) -> float:
            spec = SandboxSpec(task.spec.image or default_image(), task_quotas(task))
            return float(verify(task, workspace, backend, spec).grade.reward)

        grader = Grader(graded, Path(scratch) / "work")
        _say(f"evaluating v0 on {len(heldout)} held-out tasks x {args.eval_per_task}")
        before = evaluate(policy, grader, heldout, args)
        _say(f"held-out pass rate before: {before:.0%}")
        curve: list[StepResult] = []
        for step in range(args.steps):
            began = time.monotonic()
            task = train[step % len(train)]
            requests = [
                _request(
                    task.spec.instruction,
                    f"learn-{step}-{i}",
                    step * 1000 + i,
                    args.max_new_tokens,
                    args.temperature,
                )
                for i in range(args.group)
            ]
            replies = _samples(policy, requests)
            outcomes = [grader.reward(task, reply.action) for reply in replies]
            rewards = [reward for reward, _wrote in outcomes]
            advantages = group_advantages(rewards)
            if advantages is not None:
                batch = [
                    Sample(tuple(policy.encoder.encode(request)), reply.token_ids, reply.logprobs, advantage)
                    for request, reply, advantage in zip(requests, replies, advantages, strict=True)
                    if reply.token_ids
                ]
                train_step(model, optimizer, batch, TrainSettings(temperature=args.temperature))
            result = StepResult(
                step, task.id, tuple(rewards), sum(r >= 1.0 for r in rewards), sum(w for _r, w in outcomes),
                advantages is not None, time.monotonic() - began,
            )  # fmt: skip
            curve.append(result)
            _say(
                f"step {step + 1}/{args.steps} {task.id}: passed {result.passed}/{args.group}, wrote a file "
                f"{result.wrote_file}/{args.group}, {'trained' if result.trained else 'skipped (all equal)'} "
                f"[{result.seconds:.0f} s]"
            )
        after = evaluate(policy, grader, heldout, args)
        _say(f"held-out pass rate after: {after:.0%}")
    section = render(args, curve, before, after, time.monotonic() - started)
    print(section)
    if not args.no_record:
        write_section(args.output, section)
    return 0


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def render(
    args: argparse.Namespace, curve: Sequence[StepResult], before: float, after: float, seconds: float
) -> str:
    half = len(curve) // 2
    first = statistics.fmean(r.pass_rate for r in curve[:half]) if half else 0.0
    second = statistics.fmean(r.pass_rate for r in curve[half:]) if curve[half:] else 0.0
    rows = "\n".join(
        f"| {r.step + 1} | {r.task} | {r.passed}/{len(r.rewards)} | {r.wrote_file}/{len(r.rewards)} | "
        f"{statistics.fmean(r.rewards):.2f} | {'yes' if r.trained else 'no (all equal)'} |"
        for r in curve
    )
    return f"""{SECTION}

`trialog bench learning --steps {args.steps} --group {args.group} --tasks {args.tasks} --lr {args.lr} \
--lora-rank {args.lora_rank} --max-new-tokens {args.max_new_tokens} --temperature {args.temperature}` \
on {dt.date.today().isoformat()}, \
{cpu_model()}, {memory_gib():.0f} GiB; {seconds / 60:.1f} min in all.
SmolLM2-135M-Instruct, GRPO groups of {args.group} on the first turn of toy tasks ("make NAME() return N"),
rewards from `verify` in fresh Docker sandboxes, LoRA rank {args.lora_rank}, one PPO-clipped step per group.

- training pass rate, first half of the steps: {first:.0%}; second half: {second:.0%}
- held-out pass rate ({args.eval_per_task} fixed seeds per task): before {before:.0%}, after {after:.0%}

| step | task | passed | wrote a file | mean reward | trained |
| --- | --- | --- | --- | --- | --- |
{rows}
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="trialog bench learning", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
