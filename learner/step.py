"""One learner step on a batch of samples: the policy's own tokens, their behaviour log-probs, an advantage.

A sample is one model turn: the prompt tokens it was conditioned on and the response tokens it produced
(with the log-probs recorded at sampling time in ActionProposed). Sequences are right-padded into one
batch; the mask selects response tokens only, so the loss never trains the model on prompts or
observations (`learner.objective`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from learner.objective import ppo_clipped_loss


@dataclass(frozen=True)
class Sample:
    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    behaviour_logprobs: tuple[float, ...]  # one per response token
    advantage: float

    def __post_init__(self) -> None:
        if not self.prompt_ids or len(self.response_ids) != len(self.behaviour_logprobs):
            raise ValueError("a sample needs a prompt and one behaviour log-prob per response token")


@dataclass(frozen=True)
class Batch:
    input_ids: torch.Tensor  # [B, L]
    attention_mask: torch.Tensor  # [B, L]
    response_mask: torch.Tensor  # [B, L-1]: position t predicts token t+1; 1 where that token is a response
    behaviour: torch.Tensor  # [B, L-1] behaviour log-probs aligned with response_mask
    advantages: torch.Tensor  # [B]


def collate(samples: Sequence[Sample], pad_id: int = 0) -> Batch:
    length = max(len(s.prompt_ids) + len(s.response_ids) for s in samples)
    ids = torch.full((len(samples), length), pad_id, dtype=torch.long)
    attention = torch.zeros((len(samples), length), dtype=torch.long)
    response = torch.zeros((len(samples), length - 1))
    behaviour = torch.zeros((len(samples), length - 1))
    for row, sample in enumerate(samples):
        tokens = sample.prompt_ids + sample.response_ids
        ids[row, : len(tokens)] = torch.tensor(tokens)
        attention[row, : len(tokens)] = 1
        first = len(sample.prompt_ids) - 1  # the position whose next token is the first response token
        end = first + len(sample.response_ids)
        response[row, first:end] = 1.0
        behaviour[row, first:end] = torch.tensor(sample.behaviour_logprobs)
    advantages = torch.tensor([s.advantage for s in samples], dtype=torch.float32)
    return Batch(ids, attention, response, behaviour, advantages)


def token_logprobs(
    model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """log p(token t+1 | tokens <= t) for every position t: [B, L-1], at the sampling temperature (the
    distribution the rollout drew from, so that an on-policy ratio is exactly 1)."""
    chosen, _entropy = token_logprobs_and_entropy(model, input_ids, attention_mask, temperature)
    return chosen


def token_logprobs_and_entropy(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float = 1.0,
    *,
    start: int = 0,
    shared: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`token_logprobs` and, from the same forward pass, the entropy of each position's next-token
    distribution at that temperature (without a gradient: a statistic, not part of the loss), for the
    positions from `start` on: both [B, L-1-start].

    `start` skips positions nobody trains on (the prompt's: a turn's first response token is predicted at
    the prompt's last position), so the vocabulary projection and softmax, a tenth of the forward pass and
    most of its activation memory on SmolLM2, run only where the loss looks.

    `shared` > 0 says the first `shared` tokens are the same in every row (the turns of one group share
    their prompt): they run once, with batch 1, and every row attends to that one key/value cache, whose
    gradient is the sum of the rows' (the same gradient as running each row whole, computed once)."""
    if not 0 <= shared <= start < input_ids.shape[1]:
        raise ValueError(f"need 0 <= shared ({shared}) <= start ({start}) < length ({input_ids.shape[1]})")
    length = input_ids.shape[1]
    if shared:
        rows = input_ids.shape[0]
        prefix = model(input_ids=input_ids[:1, :shared], use_cache=True, logits_to_keep=1)
        past = prefix.past_key_values
        past.reorder_cache(torch.zeros(rows, dtype=torch.long, device=input_ids.device))
        suffix = length - shared
        positions = torch.arange(shared, length, device=input_ids.device).expand(rows, suffix)
        logits = model(
            input_ids=input_ids[:, shared:], attention_mask=attention_mask, position_ids=positions,
            past_key_values=past, use_cache=True, logits_to_keep=length - start,
        ).logits[:, :-1, :]  # fmt: skip
    else:
        logits = model(
            input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=length - start
        ).logits[:, :-1, :]
    logprobs = torch.log_softmax(logits.float() / temperature, dim=-1)
    chosen: torch.Tensor = logprobs.gather(-1, input_ids[:, start + 1 :].unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():
        entropy = -(logprobs.exp() * logprobs).sum(-1)
    return chosen, entropy


def first_response(samples: Sequence[Sample]) -> int:
    """The first position whose next token is a response token in some sample: where the loss begins."""
    return min(len(s.prompt_ids) for s in samples) - 1


def learner_step(
    model: Any,
    optimizer: torch.optim.Optimizer,
    samples: Sequence[Sample],
    clip_eps: float = 0.2,
    temperature: float = 1.0,
) -> float:
    """One gradient step on `samples`; returns the loss before the step."""
    batch = collate(samples)
    model.train()
    new = token_logprobs(model, batch.input_ids, batch.attention_mask, temperature)
    loss = ppo_clipped_loss(new, batch.behaviour, batch.advantages, batch.response_mask, clip_eps)
    optimizer.zero_grad()
    torch.autograd.backward(loss)
    optimizer.step()
    return float(loss.item())
