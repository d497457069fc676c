from __future__ import annotations

import math

import pytest
import torch

from learner.objective import group_advantages, is_stale, ppo_clipped_loss


def test_group_advantages_against_hand_computed_values() -> None:
    # mean 0.5, population std 0.5
    assert group_advantages([1.0, 0.0, 0.0, 1.0]) == pytest.approx([1.0, -1.0, -1.0, 1.0], abs=1e-5)
    # mean 0.0, std sqrt(2/3)
    expected = [1 / math.sqrt(2 / 3), 0.0, -1 / math.sqrt(2 / 3)]
    assert group_advantages([1.0, 0.0, -1.0]) == pytest.approx(expected, abs=1e-5)


def test_a_group_with_equal_rewards_or_one_episode_is_skipped() -> None:
    assert group_advantages([0.8, 0.8, 0.8]) is None
    assert group_advantages([1.0]) is None


def test_loss_at_ratio_one_is_minus_the_mean_advantage_over_masked_tokens() -> None:
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, -0.5]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    advantages = torch.tensor([1.0, -2.0])
    # tokens counted: (A=1) x2, (A=-2) x1 -> -(1 + 1 - 2) / 3 = 0
    assert ppo_clipped_loss(logp, logp, advantages, mask).item() == pytest.approx(0.0, abs=1e-7)
    only_first = torch.tensor([[1, 1, 1], [0, 0, 0]])
    assert ppo_clipped_loss(logp, logp, advantages, only_first).item() == pytest.approx(-1.0)


def test_the_ratio_is_clipped_only_where_it_would_help_the_objective() -> None:
    old = torch.zeros(2, 1)
    new = torch.full((2, 1), 0.5)  # ratio e^0.5 = 1.6487
    mask = torch.ones(2, 1)
    ratio = math.exp(0.5)
    # A = +1: min(1.6487, 1.2) = 1.2 -> loss -1.2; A = -1: min(-1.6487, -1.2) = -1.6487 -> loss +1.6487
    positive = ppo_clipped_loss(new[:1], old[:1], torch.tensor([1.0]), mask[:1])
    negative = ppo_clipped_loss(new[1:], old[1:], torch.tensor([-1.0]), mask[1:])
    assert positive.item() == pytest.approx(-1.2)
    assert negative.item() == pytest.approx(ratio)


def test_the_gradient_raises_the_logprob_of_positive_advantage_tokens() -> None:
    new = torch.tensor([[-1.0], [-1.0]], requires_grad=True)
    loss = ppo_clipped_loss(new, new.detach(), torch.tensor([1.0, -1.0]), torch.ones(2, 1))
    loss.backward()
    assert new.grad is not None
    assert new.grad[0, 0] < 0 < new.grad[1, 0]  # descent raises the first, lowers the second


def test_an_empty_mask_gives_zero_not_nan() -> None:
    logp = torch.zeros(1, 2, requires_grad=True)
    loss = ppo_clipped_loss(logp, logp.detach(), torch.tensor([1.0]), torch.zeros(1, 2))
    assert loss.item() == 0.0


def test_staleness() -> None:
    assert not is_stale(5, 7, max_staleness=2)
    assert is_stale(4, 7, max_staleness=2)
