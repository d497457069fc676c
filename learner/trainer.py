"""One training step of the learner: the PPO-clipped loss over a group's samples, in micro-batches.

The loss is the one of `learner.objective` (a mean over the policy's own tokens); micro-batches only bound
memory: each one's loss is weighted by its share of the step's response tokens, so the accumulated gradient
equals the gradient of the whole batch's loss. Then the gradient norm is clipped and one optimizer step is
taken. Stats are measured on the same forward passes (no extra pass).

Across ranks (`collective`, `learner.ranks`): every rank has the whole step's samples and takes its own
contiguous share (`shard`, balanced by tokens); each pass's loss is still weighted by its share of the
whole step's tokens, so the gradients summed over the ranks are the one-process gradient. The summed
gradient is what every rank clips and steps with: the ranks end the step with the same weights.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from actors.rollout.generation import shared_prompt_prefix
from learner.collective import Collective
from learner.objective import ppo_clipped_loss
from learner.step import Sample, collate, first_response, token_logprobs_and_entropy


@dataclass(frozen=True, slots=True)
class TrainSettings:
    # Samples per forward pass. A group's turns share their prompt, which each pass runs once
    # (`shared_prompt_prefix`), so a whole group of 8 costs little more memory than 4 would.
    micro_batch: int = 8
    clip_eps: float = 0.2
    temperature: float = 1.0  # the rollout's sampling temperature (log-probs are taken at it)
    max_grad_norm: float = 1.0


@dataclass(frozen=True, slots=True)
class TrainStats:
    """One pass's statistics, over the step's response tokens (the policy's own) unless named otherwise.

    The log-prob gap of the first pass, before this step changed the weights, is the training-inference
    mismatch: the learner's log-prob of the very tokens the rollout sampled against the rollout's own
    (for samples of the current version it would be 0 with identical numerics; stale samples add the
    policy's change since)."""

    loss: float
    ratio_mean: float  # mean new/behaviour probability ratio over response tokens (1.0 on-policy)
    clip_fraction: float  # share of response tokens whose ratio lies outside [1 - eps, 1 + eps]
    grad_norm: float
    samples: int
    tokens: int
    seconds: float
    # the share of tokens whose clipped surrogate still passes a gradient (the unclipped side is the min)
    pg_fraction: float = 1.0
    approx_kl: float = 0.0  # KL(behaviour || new), k3 estimator: mean of (ratio - 1) - log(ratio)
    entropy: float = 0.0  # mean entropy (nats) of the new policy's next-token distribution
    logprob_gap_mean: float = 0.0  # mean |log p_new - log p_behaviour| per token
    logprob_gap_max: float = 0.0
    advantage_mean: float = 0.0  # over samples
    advantage_std: float = 0.0
    advantage_min: float = 0.0
    advantage_max: float = 0.0


def train_step(
    model: Any,
    optimizer: torch.optim.Optimizer,
    samples: Sequence[Sample],
    settings: TrainSettings = TrainSettings(),
    collective: Collective | None = None,
) -> TrainStats:
    """One optimizer step on `samples`; with `collective`, this rank's share of them, the gradients summed
    over the ranks before the step (every rank passes the same `samples`)."""
    if not samples:
        raise ValueError("a training step needs at least one sample")
    started = time.monotonic()
    device = next(model.parameters()).device
    total_tokens = sum(len(s.response_ids) for s in samples)
    mine = samples if collective is None else shard(samples, collective.rank, collective.world_size)
    model.train()
    optimizer.zero_grad()
    loss_sum = ratio_sum = clipped = passing = kl_sum = entropy_sum = gap_sum = gap_max = 0.0
    for chunk in micro_batches(mine, settings.micro_batch):
        batch = collate(chunk)
        start = first_response(chunk)
        # at most `start`: the common prefix leaves every prompt its last token
        shared = shared_prompt_prefix([sample.prompt_ids for sample in chunk])
        new, entropy = token_logprobs_and_entropy(
            model, batch.input_ids.to(device), batch.attention_mask.to(device), settings.temperature,
            start=start, shared=shared,
        )  # fmt: skip
        mask = batch.response_mask[:, start:].to(device)
        behaviour = batch.behaviour[:, start:].to(device)
        advantages = batch.advantages.to(device)
        loss = ppo_clipped_loss(new, behaviour, advantages, mask, settings.clip_eps)
        share = float(mask.sum().item()) / max(total_tokens, 1)
        torch.autograd.backward(loss * share)
        with torch.no_grad():
            log_ratio = (new - behaviour) * mask
            ratio = torch.exp(log_ratio)
            outside = (ratio - 1.0).abs() > settings.clip_eps
            adv = advantages.unsqueeze(-1)
            # clipped away: the ratio left the band on the side the advantage pushes it to
            cut = ((adv > 0) & (ratio > 1.0 + settings.clip_eps)) | (
                (adv < 0) & (ratio < 1.0 - settings.clip_eps)
            )
            loss_sum += float(loss.item()) * share
            ratio_sum += float((ratio * mask).sum().item())
            clipped += float((outside.float() * mask).sum().item())
            passing += float(((~cut).float() * mask).sum().item())
            kl_sum += float((((ratio - 1.0) - log_ratio) * mask).sum().item())
            entropy_sum += float((entropy * mask).sum().item())
            gap = log_ratio.abs()
            gap_sum += float(gap.sum().item())
            gap_max = max(gap_max, float(gap.max().item()))
    parameters = [p for p in model.parameters() if p.requires_grad]
    if collective is not None:
        sum_gradients(parameters, collective)
        sums = torch.tensor(
            [loss_sum, ratio_sum, clipped, passing, kl_sum, entropy_sum, gap_sum], dtype=torch.float64,
            device=device,
        )  # fmt: skip
        collective.all_reduce(sums)
        loss_sum, ratio_sum, clipped, passing, kl_sum, entropy_sum, gap_sum = (float(x) for x in sums)
        highest = torch.tensor([gap_max], dtype=torch.float64, device=device)
        collective.all_reduce(highest, "max")
        gap_max = float(highest[0])
    grad_norm = torch.nn.utils.clip_grad_norm_(parameters, settings.max_grad_norm)
    optimizer.step()
    optimizer.zero_grad()
    tokens = max(total_tokens, 1)
    advantages_all = [s.advantage for s in samples]
    mean_adv = sum(advantages_all) / len(advantages_all)
    return TrainStats(
        loss=loss_sum,
        ratio_mean=ratio_sum / tokens,
        clip_fraction=clipped / tokens,
        grad_norm=float(grad_norm),
        samples=len(samples),
        tokens=total_tokens,
        seconds=time.monotonic() - started,
        pg_fraction=passing / tokens,
        approx_kl=kl_sum / tokens,
        entropy=entropy_sum / tokens,
        logprob_gap_mean=gap_sum / tokens,
        logprob_gap_max=gap_max,
        advantage_mean=mean_adv,
        advantage_std=(sum((a - mean_adv) ** 2 for a in advantages_all) / len(advantages_all)) ** 0.5,
        advantage_min=min(advantages_all),
        advantage_max=max(advantages_all),
    )


def shard(samples: Sequence[Sample], rank: int, world_size: int) -> list[Sample]:
    """Rank `rank`'s share of a step's `samples`: the turns of one prompt next to each other (as
    `micro_batches` takes them, so a prompt is mostly run on one rank), cut into `world_size` contiguous
    runs of about equal cost (prompt and response tokens: what a forward pass costs). A sample goes to the
    rank whose part of the total cost holds the sample's midpoint, so every sample has exactly one rank;
    a rank may get none when there are fewer samples than ranks."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in a group of {world_size}")
    by_prompt: dict[tuple[int, ...], list[Sample]] = {}
    for sample in samples:
        by_prompt.setdefault(sample.prompt_ids, []).append(sample)
    ordered = [sample for turns in by_prompt.values() for sample in turns]
    costs = [len(s.prompt_ids) + len(s.response_ids) for s in ordered]
    total = sum(costs)
    mine: list[Sample] = []
    before = 0
    for sample, cost in zip(ordered, costs, strict=True):
        # Integer arithmetic: every rank computes the same cut, with no rounding to disagree on.
        if (2 * before + cost) * world_size // (2 * total) == rank:
            mine.append(sample)
        before += cost
    return mine


def sum_gradients(parameters: Sequence[torch.nn.Parameter], collective: Collective) -> None:
    """Sum every parameter's gradient over the ranks, in place. A rank that had no sample (or a parameter
    its samples did not reach) contributes zeros; a parameter no rank reached keeps no gradient, as in one
    process (the optimizer then leaves it alone). One flat buffer per dtype and device: one collective for
    all the gradients rather than one per tensor."""
    if not parameters:
        return
    reached = torch.tensor(
        [float(p.grad is not None) for p in parameters], dtype=torch.float64, device=parameters[0].device
    )
    collective.all_reduce(reached)
    for parameter in parameters:
        if parameter.grad is None:
            parameter.grad = torch.zeros_like(parameter)
    buckets: dict[tuple[torch.dtype, torch.device], list[torch.nn.Parameter]] = {}
    for parameter in parameters:
        buckets.setdefault((parameter.dtype, parameter.device), []).append(parameter)
    for members in buckets.values():
        grads = [p.grad for p in members if p.grad is not None]
        flat = torch.cat([g.reshape(-1) for g in grads])
        collective.all_reduce(flat)
        offset = 0
        for grad in grads:
            grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
            offset += grad.numel()
    for parameter, count in zip(parameters, reached.tolist(), strict=True):
        if count == 0:
            parameter.grad = None


def micro_batches(samples: Sequence[Sample], size: int) -> list[list[Sample]]:
    """`samples` in forward passes of at most `size`: the turns of one prompt together (a group's first
    turns share it, and a pass runs a shared prompt once), the turns whose prompt no other turn has pooled.
    The order does not change the gradient: each pass's loss is weighted by its share of the tokens."""
    by_prompt: dict[tuple[int, ...], list[Sample]] = {}
    for sample in samples:
        by_prompt.setdefault(sample.prompt_ids, []).append(sample)
    alone = [turns[0] for turns in by_prompt.values() if len(turns) == 1]
    together = [turns for turns in by_prompt.values() if len(turns) > 1]
    return [
        turns[first : first + size] for turns in [*together, alone] for first in range(0, len(turns), size)
    ]


def train_epochs(
    model: Any,
    optimizer: torch.optim.Optimizer,
    samples: Sequence[Sample],
    epochs: int,
    settings: TrainSettings = TrainSettings(),
    collective: Collective | None = None,
) -> list[TrainStats]:
    """`epochs` PPO-clipped passes over `samples` (one optimizer step each); the stats of every pass."""
    if epochs < 1:
        raise ValueError(f"epochs must be at least 1, not {epochs}")
    passes = range(epochs) if samples else range(0)
    return [train_step(model, optimizer, samples, settings, collective) for _ in passes]
