from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from actors.rollout.generation import common_prefix
from actors.rollout.torch_backend import TorchBackend
from learner.step import Sample, collate, token_logprobs

EOS = 2


def tiny_model() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=24,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        eos_token_id=EOS,
        bos_token_id=1,
    )
    return LlamaForCausalLM(config).eval()


def test_sampling_is_reproducible_from_the_seed() -> None:
    backend = TorchBackend(tiny_model(), eos_token_id=EOS)
    prompts = [(1, 5, 6, 7), (1, 9)]
    first = backend.generate(prompts, max_new_tokens=6, seed=7)
    again = backend.generate(prompts, max_new_tokens=6, seed=7)
    assert first == again
    assert len(first) == 2
    for generation in first:
        assert 1 <= len(generation.token_ids) <= 6
        assert len(generation.logprobs) == len(generation.token_ids)
        assert all(lp <= 0.0 for lp in generation.logprobs)
        assert generation.finish_reason == ("stop" if generation.token_ids[-1] == EOS else "length")


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_recorded_logprobs_equal_what_the_learner_recomputes(temperature: float) -> None:
    # On-policy, the PPO ratio must be exactly 1: sampler and learner agree on every token's log-prob.
    model = tiny_model()
    backend = TorchBackend(model, eos_token_id=EOS)
    prompts = [(1, 5, 6, 7, 8), (1, 9)]  # different lengths: left padding must not change anything
    generations = backend.generate(prompts, max_new_tokens=5, seed=3, temperature=temperature)
    for prompt, generation in zip(prompts, generations, strict=True):
        batch = collate([Sample(prompt, generation.token_ids, generation.logprobs, 0.0)])
        with torch.no_grad():
            logp = token_logprobs(model, batch.input_ids, batch.attention_mask, temperature)
        recomputed = logp[0][batch.response_mask[0].bool()]
        assert recomputed.tolist() == pytest.approx(list(generation.logprobs), abs=1e-4)


@pytest.mark.parametrize("top_p", [1.0, 0.9])
def test_a_row_gets_the_same_tokens_alone_or_in_any_batch(top_p: float) -> None:
    backend = TorchBackend(tiny_model(), eos_token_id=EOS)
    prompts = [(1, 5, 6, 7, 8, 9, 10), (1, 9), (1, 4, 4)]
    seeds = [11, 12, 13]
    alone = [
        backend.generate([p], max_new_tokens=8, seeds=[s], top_p=top_p)[0]
        for p, s in zip(prompts, seeds, strict=True)
    ]
    batched = backend.generate(prompts, max_new_tokens=8, seeds=seeds, top_p=top_p)
    reordered = backend.generate(prompts[::-1], max_new_tokens=8, seeds=seeds[::-1], top_p=top_p)[::-1]
    for one, two, three in zip(alone, batched, reordered, strict=True):
        assert one.token_ids == two.token_ids == three.token_ids
        assert two.logprobs == pytest.approx(one.logprobs, abs=1e-5)
        assert one.finish_reason == two.finish_reason


def test_rows_with_different_seeds_draw_differently_and_the_global_rng_is_untouched() -> None:
    backend = TorchBackend(tiny_model(), eos_token_id=EOS)
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    draws = backend.generate([(1, 5)] * 4, max_new_tokens=10, seeds=[1, 2, 3, 4])
    assert len({d.token_ids for d in draws}) > 1
    assert torch.equal(before, torch.random.get_rng_state())


def test_greedy_decoding_takes_the_most_likely_token() -> None:
    model = tiny_model()
    backend = TorchBackend(model, eos_token_id=EOS)
    (generation,) = backend.generate([(1, 5, 6)], max_new_tokens=1, temperature=0.0)
    with torch.no_grad():
        logits = model(torch.tensor([[1, 5, 6]])).logits[0, -1]
    assert generation.token_ids == (int(logits.argmax()),)


@pytest.mark.parametrize("shape", ["one prompt", "a common head"])
def test_a_shared_prompt_prefix_runs_once_and_changes_no_row(shape: str) -> None:
    head = (1, *range(3, 23))  # 21 tokens, above MIN_SHARED_PREFIX
    tails = [(), (), ()] if shape == "one prompt" else [(5, 6, 7), (9,), (4, 4)]
    prompts = [(*head, *tail) for tail in tails]
    seeds = [11, 12, 13]
    backend = TorchBackend(tiny_model(), eos_token_id=EOS)
    alone = [
        backend.generate([p], max_new_tokens=8, seeds=[s])[0] for p, s in zip(prompts, seeds, strict=True)
    ]
    run_alone = backend.prefill_tokens
    batched = backend.generate(prompts, max_new_tokens=8, seeds=seeds)
    assert backend.prefill_tokens - run_alone < run_alone - len(head) + 2  # the head ran once, not 3 times
    for one, two in zip(alone, batched, strict=True):
        assert one.token_ids == two.token_ids
        assert two.logprobs == pytest.approx(one.logprobs, abs=1e-5)
    assert common_prefix(prompts) == (len(head) - 1 if shape == "one prompt" else len(head))


def test_the_common_prefix_leaves_every_prompt_its_last_token() -> None:
    assert common_prefix([(1, 2, 3), (1, 2, 3)]) == 2
    assert common_prefix([(1, 2, 3), (1, 2)]) == 1
    assert common_prefix([(1, 2, 3), (4, 2, 3)]) == 0
    assert common_prefix([(7,), (7,)]) == 0
