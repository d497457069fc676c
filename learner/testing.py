"""Synthetic trajectories, as the pipeline would assemble them, for the learner's tests and benchmark.

A trajectory here is what a byte-level policy would have produced: each turn's response is the UTF-8 bytes
of a tool call, with behaviour log-probs, and the recorded prompt length is what `encoder` rebuilds for
that turn (so the learner accepts every sample). Rewards and policy versions are chosen by the caller.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from actors.rollout.plugins import float32
from actors.rollout.policy import byte_tokens, render_action
from learner.samples import BytesPromptEncoder, PromptEncoder, step_request
from schemas.actions import Action, RunCommand, Submit
from schemas.common import EventMeta, Output, Producer, Verdict
from schemas.events import ActionProposed, StepExecuted, StepRecord
from schemas.trajectories import TrajectoryCompleted

PRODUCER = Producer("test", "synthetic-0")


def meta(run_id: str, episode_id: str, task_id: str, step: int, policy_version: int) -> EventMeta:
    return EventMeta(
        event_id=f"{episode_id}-{step}",
        occurred_at_us=1_700_000_000_000_000 + step,
        producer=PRODUCER,
        run_id=run_id,
        episode_id=episode_id,
        task_id=task_id,
        task_version="v1",
        step=step,
        attempt=1,
        policy_version=policy_version,
        snapshot_id=None,
        prev_hash=f"{step:064x}",
    )


def trajectory(
    *,
    run_id: str = "run-test",
    episode_id: str = "ep-1",
    group_id: str = "run-test/g000000",
    task_id: str = "task-1",
    reward: float = 1.0,
    policy_version: int = 0,
    actions: Sequence[Action] = (RunCommand("ls"), Submit()),
    instruction: str = "Fix the bug.",
    encoder: PromptEncoder | None = None,
    seed: int = 0,
) -> TrajectoryCompleted:
    """A completed trajectory of `actions`; each turn's prompt length is what `encoder` rebuilds."""
    encoder = encoder or BytesPromptEncoder()
    rng = random.Random(f"{episode_id}:{seed}")
    steps: list[StepRecord] = []
    draft = TrajectoryCompleted(
        meta(run_id, episode_id, task_id, len(actions), policy_version), group_id, instruction, (),
        reward, Verdict.PASS if reward >= 1.0 else Verdict.FAIL, 1 if reward >= 1.0 else 0, 1,
        policy_version, policy_version,
    )  # fmt: skip
    for index, action in enumerate(actions):
        tokens = byte_tokens(render_action(action))
        logprobs = tuple(float32(-rng.uniform(0.5, 6.0)) for _ in tokens)  # as the wire carries them
        proposed = ActionProposed(
            meta(run_id, episode_id, task_id, index, policy_version), action, render_action(action),
            0, tokens, logprobs, 1000,
        )  # fmt: skip
        prompt = encoder.encode(step_request(_with_steps(draft, (*steps, StepRecord(proposed))), index))
        proposed = ActionProposed(
            proposed.meta, action, proposed.response, len(prompt), tokens, logprobs, 1000
        )
        result = None if isinstance(action, Submit) else _executed(run_id, episode_id, task_id, index)
        steps.append(StepRecord(proposed, result))
    return _with_steps(draft, tuple(steps))


def _with_steps(draft: TrajectoryCompleted, steps: Sequence[StepRecord]) -> TrajectoryCompleted:
    return TrajectoryCompleted(
        draft.meta, draft.group_id, draft.instruction, tuple(steps), draft.reward, draft.verdict,
        draft.passed, draft.total, draft.min_policy_version, draft.max_policy_version,
    )  # fmt: skip


def _executed(run_id: str, episode_id: str, task_id: str, step: int) -> StepExecuted:
    out = Output("ok\n", False, 3)
    return StepExecuted(meta(run_id, episode_id, task_id, step, 0), 0, out, Output(""), False, 1000)


def group(
    group_id: str,
    rewards: Sequence[float],
    *,
    run_id: str = "run-test",
    policy_version: int = 0,
    task_id: str = "task-1",
) -> list[TrajectoryCompleted]:
    """One group of trajectories on one task, one per reward."""
    return [
        trajectory(
            run_id=run_id,
            episode_id=f"{group_id}/e{i}",
            group_id=group_id,
            task_id=task_id,
            reward=reward,
            policy_version=policy_version,
        )
        for i, reward in enumerate(rewards)
    ]


def tiny_llama(vocab_size: int = 320, layers: int = 2, seed: int = 0) -> Any:
    """A randomly initialised llama small enough to train in milliseconds (byte-level vocabulary)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=512,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(config)  # type: ignore[no-untyped-call]
