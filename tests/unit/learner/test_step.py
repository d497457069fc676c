from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from learner.step import Sample, collate, learner_step, token_logprobs

PROMPT = (1, 2, 3)
REWARDED, PUNISHED = (7, 8), (9, 10)


def tiny_model() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=16,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=16,
    )
    return LlamaForCausalLM(config)


def response_logprob(model: LlamaForCausalLM, response: tuple[int, ...]) -> float:
    sample = Sample(PROMPT, response, (0.0,) * len(response), 0.0)
    batch = collate([sample])
    with torch.no_grad():
        logp = token_logprobs(model, batch.input_ids, batch.attention_mask)
    return float((logp * batch.response_mask).sum())


def on_policy(model: LlamaForCausalLM, response: tuple[int, ...], advantage: float) -> Sample:
    batch = collate([Sample(PROMPT, response, (0.0,) * len(response), advantage)])
    with torch.no_grad():
        logp = token_logprobs(model, batch.input_ids, batch.attention_mask)
    behaviour = tuple(float(x) for x in logp[0][batch.response_mask[0].bool()])
    return Sample(PROMPT, response, behaviour, advantage)


def test_the_mask_selects_exactly_the_response_tokens() -> None:
    batch = collate([Sample((1, 2), (3,), (-0.5,), 1.0), Sample((1, 2, 3), (4, 5), (-1.0, -2.0), -1.0)])
    assert batch.input_ids.tolist() == [[1, 2, 3, 0, 0], [1, 2, 3, 4, 5]]
    assert batch.response_mask.tolist() == [[0, 1, 0, 0], [0, 0, 1, 1]]
    assert batch.behaviour.tolist() == [[0, -0.5, 0, 0], [0, 0, -1.0, -2.0]]


def test_one_step_raises_the_rewarded_response_and_lowers_the_punished_one() -> None:
    model = tiny_model()
    before = response_logprob(model, REWARDED), response_logprob(model, PUNISHED)
    weights = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    learner_step(model, optimizer, [on_policy(model, REWARDED, 1.0), on_policy(model, PUNISHED, -1.0)])
    after = response_logprob(model, REWARDED), response_logprob(model, PUNISHED)
    assert any(not torch.equal(w, p) for w, p in zip(weights, model.parameters(), strict=True))
    assert after[0] > before[0]
    assert after[1] < before[1]
