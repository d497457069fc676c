"""Synthetic trajectories and tiny models, for the learner's tests and benchmark.

A trajectory here is what a byte-level policy would have produced: each turn's response is the UTF-8 bytes
of a tool call, with behaviour log-probs, and the recorded prompt length is what `encoder` rebuilds for
that turn (so the learner accepts every sample). Rewards and policy versions are chosen by the caller.

Tiny models: `tiny_llama` (byte vocabulary), `tiny_chat_llama` (a real chat tokenizer's vocabulary) and
`taught_tiny_model`, a tiny chat llama taught a few first replies so that the real pipeline can run on it.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actors.rollout.policy import byte_tokens, render_action
from actors.rollout.simple_policies import float32
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


def tiny_chat_llama(tokenizer: Any, hidden_size: int = 32, layers: int = 2, seed: int = 0) -> Any:
    """A randomly initialised llama on a real chat tokenizer's vocabulary (e.g. SmolLM2's), tied embeddings
    so that its weights stay small (~1.6 M parameters with SmolLM2's 49,152 tokens)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192,
        eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id,
        pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=True,
    )  # fmt: skip
    return LlamaForCausalLM(config)  # type: ignore[no-untyped-call]


@dataclass(frozen=True)
class Taught:
    """What `taught_tiny_model` reached: each (instruction, reply)'s probability at temperature 1."""

    folder: Path
    steps: int
    probabilities: dict[tuple[str, str], float]


def taught_tiny_model(
    out: Path,
    tokenizer_dir: Path,
    lessons: Mapping[str, Sequence[str]],
    *,
    min_probability: float = 0.3,
    max_steps: int = 600,
    lr: float = 1e-2,
    seed: int = 0,
) -> Taught:
    """A tiny random llama (`tiny_chat_llama`), taught by gradient descent to answer the FIRST turn of each
    instruction of `lessons` with each of its replies equally often, then saved with the tokenizer of
    `tokenizer_dir` (chat template included) as a model folder the rollout worker and the learner load.

    A purely random model never writes a parseable action, so every episode gets the same reward and the
    learner has nothing to learn from (every group is skipped as all-equal). Taught, say, a correct file and
    `submit` for each task, it solves about half of its first turns: groups of episodes get different
    rewards and the whole pipeline (hot swap included) runs on a model that generates in milliseconds.
    Teaching stops once every reply has at least `min_probability` (ValueError if `max_steps` is not enough).
    """
    import torch
    from transformers import AutoTokenizer

    from actors.rollout.llm import ChatPromptEncoder, end_of_turn

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    encoder, eos = ChatPromptEncoder(tokenizer), end_of_turn(tokenizer)
    pairs = [(instruction, reply) for instruction, replies in lessons.items() for reply in replies]
    if not pairs:
        raise ValueError("nothing to teach: no (instruction, reply)")
    rows = []
    for instruction, reply in pairs:
        prompt = encoder.encode_history(instruction, ())
        answer = [int(i) for i in tokenizer.encode(reply, add_special_tokens=False)] + [eos]
        rows.append((prompt, answer))
    width = max(len(p) + len(a) for p, a in rows)
    ids = torch.full((len(rows), width), eos, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    for row, (prompt, answer) in enumerate(rows):  # right padding: positions start at 0 in every row
        sequence = prompt + answer
        ids[row, : len(sequence)] = torch.tensor(sequence)
        labels[row, len(prompt) : len(sequence)] = torch.tensor(answer)
        attention[row, : len(sequence)] = 1
    model = tiny_chat_llama(tokenizer, seed=seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # such small matrices: a second thread only spins (10x slower on a busy machine)
    try:
        return _teach(
            model, optimizer, tokenizer, out, pairs, (ids, attention, labels), max_steps, min_probability
        )
    finally:
        torch.set_num_threads(threads)


def _teach(
    model: Any,
    optimizer: Any,
    tokenizer: Any,
    out: Path,
    pairs: Sequence[tuple[str, str]],
    batch: tuple[Any, Any, Any],
    max_steps: int,
    min_probability: float,
) -> Taught:
    import torch

    ids, attention, labels = batch
    probabilities: dict[tuple[str, str], float] = {}
    for step in range(1, max_steps + 1):
        loss = -_reply_logprobs(model, ids, attention, labels).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 10 == 0 or step == max_steps:
            with torch.no_grad():
                logprobs = _reply_logprobs(model, ids, attention, labels)
            probabilities = {pair: float(torch.exp(logprobs[row])) for row, pair in enumerate(pairs)}
            if min(probabilities.values()) >= min_probability:
                model.eval()
                model.save_pretrained(out)
                tokenizer.save_pretrained(out)
                return Taught(out, step, probabilities)
    raise ValueError(f"not taught in {max_steps} steps: {probabilities}")


def _reply_logprobs(model: Any, ids: Any, attention: Any, labels: Any) -> Any:
    """Each row's log-probability of its whole reply (end of turn included) at temperature 1. The
    vocabulary projection is applied only where a reply token is predicted: the prompts are long and the
    vocabulary large, and the rest of the logits would cost most of the time."""
    import torch

    hidden = model.model(input_ids=ids, attention_mask=attention).last_hidden_state[:, :-1]
    targets = labels[:, 1:]
    rows, positions = torch.nonzero(targets != -100, as_tuple=True)
    logits = model.lm_head(hidden[rows, positions]).float()
    chosen = torch.log_softmax(logits, dim=-1).gather(-1, targets[rows, positions].unsqueeze(-1)).squeeze(-1)
    return torch.zeros(ids.shape[0], dtype=chosen.dtype).index_add(0, rows, chosen)
