"""The learning objective: group-relative advantages (GRPO-style) and the PPO-clipped policy loss.

Advantages: within a group of episodes on the same task, A_i = (r_i - mean(r)) / (std(r) + eps), with the
population standard deviation (the group is all there is, not a sample of something larger). A group whose
rewards are all equal teaches nothing about which behaviour was better: it gets no advantages and is
skipped (and counted by the caller).

Loss: per token t of the policy's own output, ratio_t = exp(logp_new - logp_behaviour), and
loss = -mean over those tokens of min(ratio_t * A, clip(ratio_t, 1 - eps, 1 + eps) * A). Only the policy's
own tokens count (the mask): prompts and observations are conditioning, not actions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

ADVANTAGE_EPS = 1e-6


def group_advantages(rewards: Sequence[float], eps: float = ADVANTAGE_EPS) -> list[float] | None:
    """Each episode's advantage within its group; None when the rewards are all equal (nothing to learn)."""
    if len(rewards) < 2 or max(rewards) == min(rewards):
        return None
    mean = sum(rewards) / len(rewards)
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
    return [(r - mean) / (std + eps) for r in rewards]


def ppo_clipped_loss(
    new_logprobs: torch.Tensor,
    behaviour_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_eps: float = 0.2,
) -> torch.Tensor:
    """Mean clipped surrogate loss over the masked tokens.

    Shapes: logprobs and mask [batch, tokens]; advantages [batch] (one per sequence, broadcast to its
    tokens). Returns a scalar; zero (with a gradient path) when the mask selects nothing.
    """
    ratio = torch.exp(new_logprobs - behaviour_logprobs)
    adv = advantages.unsqueeze(-1)
    surrogate = torch.minimum(ratio * adv, torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * adv)
    weights = mask.to(surrogate.dtype)
    return -(surrogate * weights).sum() / weights.sum().clamp(min=1.0)


def is_stale(trajectory_version: int, current_version: int, max_staleness: int) -> bool:
    """A trajectory sampled more than `max_staleness` policy versions ago is dropped, not learned from."""
    return current_version - trajectory_version > max_staleness
