"""The contract every rollout backend keeps (`actors.rollout.generation.GenerationBackend`), run against
each: the torch backend on a real (tiny) Llama, and the vLLM backend's adapter.

The vLLM adapter runs here on a scripted engine, not on vLLM: this machine has no GPU and vllm does not
install on CPU. The engine draws each row's tokens from its own seeded generator and reports them as
vLLM's `CompletionOutput`s do (token ids, one {token: Logprob} per token, a finish reason), so the test
checks everything of the adapter but the engine's numerics. On a machine with vllm installed, `vllm-real`
runs the same contract on a real engine (marker `gpu`, deselected by `make test`:
`pytest -m gpu tests/unit/actors/test_backend_contract.py`).
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from actors.rollout.generation import Generation, GenerationBackend
from actors.rollout.torch_backend import TorchBackend
from actors.rollout.vllm_backend import VllmBackend

EOS = 2
VOCAB = 24


def _torch() -> GenerationBackend:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=64, eos_token_id=EOS, bos_token_id=1,
    )  # fmt: skip
    return TorchBackend(LlamaForCausalLM(config).eval(), eos_token_id=EOS)


@dataclass
class _Logprob:
    logprob: float


@dataclass
class _Completion:
    token_ids: list[int]
    logprobs: list[dict[int, _Logprob]]
    finish_reason: str


@dataclass
class _Output:
    outputs: list[_Completion]


class _Params:
    def __init__(self, **kwargs: Any) -> None:
        self.__dict__.update(kwargs)


class ScriptedEngine:
    """vllm.LLM's `generate` as the adapter calls it: per row, draws from a generator seeded with the
    row's seed, stops at a stop token or after max_tokens, reports the sampled tokens' log-probs."""

    def generate(
        self, inputs: list[dict[str, list[int]]], params: list[Any], use_tqdm: bool
    ) -> list[_Output]:
        outputs = []
        for prompt, p in zip(inputs, params, strict=True):
            generator = torch.Generator().manual_seed(p.seed + sum(prompt["prompt_token_ids"]))
            tokens: list[int] = []
            while len(tokens) < p.max_tokens and (not tokens or tokens[-1] not in p.stop_token_ids):
                tokens.append(int(torch.randint(1, VOCAB, (1,), generator=generator)))
            reason = "stop" if tokens[-1] in p.stop_token_ids else "length"
            logprobs = [{t: _Logprob(-math.log(VOCAB - 1))} for t in tokens]
            outputs.append(_Output([_Completion(tokens, logprobs, reason)]))
        return outputs


def _vllm_scripted() -> GenerationBackend:
    return VllmBackend(ScriptedEngine(), _Params, eos_token_id=EOS)


BACKENDS = [
    pytest.param(_torch, id="torch"),
    pytest.param(_vllm_scripted, id="vllm-adapter"),
    pytest.param(None, id="vllm-real", marks=pytest.mark.gpu),
]


def _vllm_real() -> tuple[GenerationBackend, int]:
    """vLLM on the prepared SmolLM2 model (`trialog model prepare`), its end-of-turn token as EOS."""
    from transformers import AutoTokenizer

    from actors.rollout.llm import end_of_turn
    from learner.model import prepare_model
    from ops.paths import Paths

    assert importlib.util.find_spec("vllm") is not None, "vllm-real needs vllm (pip install .[gpu])"
    model_dir = prepare_model(Paths.from_env().cache)
    eos = end_of_turn(AutoTokenizer.from_pretrained(str(model_dir)))
    return VllmBackend.load(model_dir, eos_token_id=eos), eos


@dataclass(frozen=True)
class Subject:
    backend: GenerationBackend
    eos: int

    def generate(self, prompts: Any, **kwargs: Any) -> list[Generation]:
        return self.backend.generate(prompts, **kwargs)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Iterator[Subject]:
    if request.param is None:  # only selected with -m gpu, on a machine that has vllm
        yield Subject(*_vllm_real())
    else:
        yield Subject(request.param(), EOS)


PROMPTS = [(1, 5, 6, 7), (1, 9), (1, 4, 4, 4, 4)]
SEEDS = [11, 12, 13]


def test_one_generation_per_prompt_each_token_with_its_logprob(backend: Subject) -> None:
    out = backend.generate(PROMPTS, max_new_tokens=6, seeds=SEEDS)
    assert len(out) == len(PROMPTS)
    for generation in out:
        assert isinstance(generation, Generation)
        assert 1 <= len(generation.token_ids) <= 6
        assert len(generation.logprobs) == len(generation.token_ids)
        assert all(lp <= 0.0 and math.isfinite(lp) for lp in generation.logprobs)


def test_a_generation_stops_at_the_end_token_and_keeps_it_or_runs_out_of_length(
    backend: Subject,
) -> None:
    for generation in backend.generate(PROMPTS * 4, max_new_tokens=12, seeds=range(12)):
        ends = generation.token_ids[-1] == backend.eos
        assert generation.finish_reason == ("stop" if ends else "length")
        assert backend.eos not in generation.token_ids[:-1]
        if not ends:
            assert len(generation.token_ids) == 12


def test_a_row_is_its_seeds_alone_or_in_any_batch(backend: Subject) -> None:
    batched = backend.generate(PROMPTS, max_new_tokens=6, seeds=SEEDS)
    again = backend.generate(PROMPTS, max_new_tokens=6, seeds=SEEDS)
    reordered = backend.generate(PROMPTS[::-1], max_new_tokens=6, seeds=SEEDS[::-1])[::-1]
    alone = [
        backend.generate([p], max_new_tokens=6, seeds=[s])[0] for p, s in zip(PROMPTS, SEEDS, strict=True)
    ]
    for one, two, three, four in zip(batched, again, reordered, alone, strict=True):
        assert one.token_ids == two.token_ids == three.token_ids == four.token_ids
        assert one.logprobs == pytest.approx(four.logprobs, abs=1e-5)


def test_rows_with_different_seeds_draw_differently(backend: Subject) -> None:
    draws = backend.generate([(1, 5)] * 6, max_new_tokens=8, seeds=range(6))
    assert len({d.token_ids for d in draws}) > 1


def test_a_prompt_list_and_a_seed_list_must_agree(backend: Subject) -> None:
    with pytest.raises(ValueError, match="seeds"):
        backend.generate(PROMPTS, max_new_tokens=4, seeds=[1])
