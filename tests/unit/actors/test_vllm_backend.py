"""The vLLM backend's guard and pure parts. vllm itself is not installed here and was never run."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

import pytest

from actors.rollout.generation import Generation
from actors.rollout.vllm_backend import (
    BackendUnavailable,
    VllmBackend,
    import_vllm,
    sampling_kwargs,
    to_generation,
)


def test_without_vllm_building_the_backend_says_what_to_do() -> None:
    assert importlib.util.find_spec("vllm") is None  # this machine: the guard is what runs
    with pytest.raises(BackendUnavailable, match="--backend torch"):
        import_vllm()


@dataclass
class Logprob:
    logprob: float


@dataclass
class Completion:
    token_ids: list[int]
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str | None


def test_a_completion_becomes_a_generation_with_the_sampled_tokens_logprobs() -> None:
    completion = Completion(
        [5, 9, 2], [{5: Logprob(-0.5), 7: Logprob(-0.1)}, {9: Logprob(-1.5)}, {2: Logprob(-0.25)}], "stop"
    )
    assert to_generation(completion) == Generation((5, 9, 2), (-0.5, -1.5, -0.25), "stop")
    assert to_generation(Completion([4], [{4: Logprob(-2.0)}], "length")).finish_reason == "length"
    with pytest.raises(ValueError, match="log-prob"):
        to_generation(Completion([4, 5], None, "stop"))


def test_each_row_gets_its_own_seed_and_asks_for_the_sampled_tokens_logprobs() -> None:
    made: list[dict[str, object]] = []

    class Params:
        def __init__(self, **kwargs: object) -> None:
            made.append(kwargs)

    class Engine:
        def generate(
            self, inputs: list[dict[str, list[int]]], params: list[Params], use_tqdm: bool
        ) -> list[object]:
            assert [i["prompt_token_ids"] for i in inputs] == [[1, 2], [3]]

            @dataclass
            class Out:
                outputs: list[Completion]

            return [Out([Completion([7], [{7: Logprob(-0.5)}], "length")]) for _ in inputs]

    backend = VllmBackend(Engine(), Params, eos_token_id=2)
    out = backend.generate([[1, 2], [3]], max_new_tokens=4, temperature=0.7, seeds=[11, 12])
    assert out == [Generation((7,), (-0.5,), "length")] * 2
    assert [m["seed"] for m in made] == [11, 12]
    assert made[0] == sampling_kwargs(4, 0.7, 1.0, 11, 2) and made[0]["logprobs"] == 0
