"""The synchronous GRPO loop of `trialog bench learning` and what it needs: the toy tasks, the LoRA-adapted
policy and its optimizer, a grader on the stack's sandboxes, and the held-out evaluation with fixed seeds
(also what `ops.bench.learning_race` evaluates the pipeline's versions with)."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ops.console import say
from ops.paired import Outcomes
from ops.paths import Paths


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


def _targets(text: str) -> tuple[str, ...]:
    targets = tuple(name.strip() for name in text.split(",") if name.strip())
    if not targets:
        raise ValueError("--lora-targets names no layer")
    return targets
