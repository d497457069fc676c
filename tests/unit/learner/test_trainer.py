from __future__ import annotations

import math

import pytest
import torch

from actors.rollout.generation import common_prefix
from learner.lora import Adaptation, adapt, trainable_parameters
from learner.step import (
    Sample,
    collate,
    first_response,
    token_logprobs,
    token_logprobs_and_entropy,
)
from learner.testing import tiny_llama
from learner.trainer import TrainSettings, train_step

PROMPT = (1, 70, 71, 72)
REWARDED, PUNISHED = (80, 81, 82), (90, 91)


def logprob(model: torch.nn.Module, response: tuple[int, ...]) -> float:
    batch = collate([Sample(PROMPT, response, (0.0,) * len(response), 0.0)])
    with torch.no_grad():
        logp = token_logprobs(model, batch.input_ids, batch.attention_mask)
    return float((logp * batch.response_mask).sum())


def on_policy(model: torch.nn.Module, response: tuple[int, ...], advantage: float) -> Sample:
    batch = collate([Sample(PROMPT, response, (0.0,) * len(response), advantage)])
    with torch.no_grad():
        logp = token_logprobs(model, batch.input_ids, batch.attention_mask)
    return Sample(
        PROMPT, response, tuple(float(x) for x in logp[0][batch.response_mask[0].bool()]), advantage
    )


def test_a_lora_step_raises_the_rewarded_response_and_lowers_the_punished_one() -> None:
    model = tiny_llama()
    adapt(model, Adaptation(rank=4))
    optimizer = torch.optim.AdamW(trainable_parameters(model), lr=5e-2)
    before = logprob(model, REWARDED), logprob(model, PUNISHED)
    samples = [on_policy(model, REWARDED, 1.0), on_policy(model, PUNISHED, -1.0)]
    stats = train_step(model, optimizer, samples, TrainSettings(micro_batch=1))
    after = logprob(model, REWARDED), logprob(model, PUNISHED)
    assert after[0] > before[0]
    assert after[1] < before[1]
    assert abs(stats.ratio_mean - 1.0) < 1e-4  # on-policy: the recorded log-probs are the model's own
    assert stats.clip_fraction == 0.0
    assert stats.samples == 2 and stats.tokens == 5


def test_micro_batches_accumulate_the_same_gradient_as_one_batch() -> None:
    grads = []
    for micro in (1, 4):
        model = tiny_llama()
        adapt(model, Adaptation(rank=0))
        samples = [on_policy(model, REWARDED, 1.0), on_policy(model, PUNISHED, -1.0)]
        optimizer = torch.optim.SGD(trainable_parameters(model), lr=0.0)  # keep the weights
        captured: list[torch.Tensor] = []

        def capture(opt: torch.optim.Optimizer, *args: object, into: list[torch.Tensor] = captured) -> None:
            into.extend(p.grad.clone() for group in opt.param_groups for p in group["params"])

        optimizer.register_step_pre_hook(capture)
        train_step(model, optimizer, samples, TrainSettings(micro_batch=micro, max_grad_norm=1e9))
        grads.append(captured)
    assert len(grads[0]) == len(grads[1]) > 0
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(grads[0], grads[1], strict=True))


def test_the_step_reports_kl_entropy_mismatch_and_advantages_an_rl_engineer_reads() -> None:
    model = tiny_llama()
    adapt(model, Adaptation(rank=4))
    optimizer = torch.optim.AdamW(trainable_parameters(model), lr=5e-2)
    exact = [on_policy(model, REWARDED, 1.0), on_policy(model, PUNISHED, -1.0)]
    first = train_step(model, optimizer, exact, TrainSettings(micro_batch=1))
    # on-policy: the learner's log-probs of the sampled tokens are the rollout's own
    assert first.logprob_gap_max < 1e-4 and first.approx_kl < 1e-6
    assert first.pg_fraction == 1.0
    assert 0.0 < first.entropy <= math.log(320) + 1e-4  # at most log(vocabulary size)
    assert (first.advantage_mean, first.advantage_min, first.advantage_max) == (0.0, -1.0, 1.0)
    assert first.advantage_std == 1.0
    # the same samples again: the weights moved, so the recorded log-probs are now off-policy
    shifted = [
        Sample(s.prompt_ids, s.response_ids, tuple(lp - 0.5 for lp in s.behaviour_logprobs), s.advantage)
        for s in exact
    ]
    second = train_step(model, optimizer, shifted, TrainSettings(micro_batch=4))
    assert second.logprob_gap_mean > 0.1 and second.logprob_gap_max >= second.logprob_gap_mean
    assert second.approx_kl > 0.0
    # the ratios rose ~e^0.5 = 1.65 above the band: the rewarded tokens lose their gradient, the
    # punished ones (advantage < 0, ratio > 1 + eps) keep it
    assert second.clip_fraction > 0.5 and 0.0 < second.pg_fraction < 1.0


def _group(model: torch.nn.Module) -> list[Sample]:
    """A group's turns: one long prompt shared by every reply (as a task's first turn is), replies of
    different lengths, and one turn with another prompt to show the sort keeps groups together."""
    prompt = (1, *range(100, 140))  # 41 tokens: above MIN_SHARED_PREFIX
    replies = [((80, 81, 82), 1.0), ((90, 91), -1.0), ((83,), 0.5), ((84, 85, 86, 87), -0.5)]
    samples = []
    for reply, advantage in replies:
        batch = collate([Sample(prompt, reply, (0.0,) * len(reply), advantage)])
        with torch.no_grad():
            logp = token_logprobs(model, batch.input_ids, batch.attention_mask)
        behaviour = tuple(float(x) - 0.05 for x in logp[0][batch.response_mask[0].bool()])
        samples.append(Sample(prompt, reply, behaviour, advantage))
    other = (1, 70, 71, 72)
    samples.append(Sample(other, (80, 81), (-3.0, -3.0), 0.25))
    return samples


def test_a_shared_prompt_runs_once_with_the_gradient_and_stats_of_running_every_row_whole() -> None:
    results = []
    for share in (True, False):
        model = tiny_llama()
        adapt(model, Adaptation(rank=0))
        samples = _group(model)
        optimizer = torch.optim.SGD(trainable_parameters(model), lr=0.0)
        captured: list[torch.Tensor] = []

        def capture(opt: torch.optim.Optimizer, *args: object, into: list[torch.Tensor] = captured) -> None:
            into.extend(p.grad.clone() for group in opt.param_groups for p in group["params"])

        optimizer.register_step_pre_hook(capture)
        calls: list[int] = []
        model.register_forward_pre_hook(
            lambda _m, _a, kwargs, seen=calls: seen.append(kwargs["input_ids"].numel()), with_kwargs=True
        )
        settings = TrainSettings(micro_batch=8 if share else 1, max_grad_norm=1e9)
        stats = train_step(model, optimizer, samples, settings)
        results.append((captured, stats, calls))
    (shared_grads, shared_stats, shared_calls), (whole_grads, whole_stats, whole_calls) = results
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(shared_grads, whole_grads, strict=True))
    assert math.isclose(shared_stats.loss, whole_stats.loss, rel_tol=1e-5, abs_tol=1e-7)
    assert math.isclose(shared_stats.approx_kl, whole_stats.approx_kl, rel_tol=1e-4, abs_tol=1e-7)
    assert math.isclose(shared_stats.entropy, whole_stats.entropy, rel_tol=1e-5)
    assert math.isclose(shared_stats.logprob_gap_max, whole_stats.logprob_gap_max, rel_tol=1e-4)
    # the shared pass: a 41-token prompt once plus the rows' suffixes, far fewer tokens than 5 whole rows
    assert sum(shared_calls) < sum(whole_calls) / 2
    assert shared_stats.tokens == whole_stats.tokens == 12


def test_positions_before_the_first_response_token_are_not_scored() -> None:
    model = tiny_llama()
    samples = _group(model)[:2]
    batch = collate(samples)
    with torch.no_grad():
        whole = token_logprobs(model, batch.input_ids, batch.attention_mask)
        start = first_response(samples)
        late, _entropy = token_logprobs_and_entropy(
            model,
            batch.input_ids,
            batch.attention_mask,
            start=start,
            shared=common_prefix([s.prompt_ids for s in samples]),
        )
    assert late.shape == (2, whole.shape[1] - start)
    assert torch.allclose(late, whole[:, start:], atol=1e-5)
    with pytest.raises(ValueError, match="shared"):
        token_logprobs_and_entropy(model, batch.input_ids, batch.attention_mask, start=3, shared=5)
