"""The contract every receiver of hot-swapped weights keeps (`actors.rollout.weights.WeightsTarget`), run
against each: the torch model, and the vLLM engine's adapter (`VllmWeightsTarget`).

The adapter runs here on a scripted engine, not on vLLM (no GPU, and vllm does not install on CPU). The
engine holds a real tiny Llama in a worker, takes `collective_rpc` calls as vLLM does (a callable gets the
worker), loads weights by name as vLLM's `load_weights` does, and keeps a prefix cache: a prompt it has seen
is answered from the cache until `reset_prefix_cache`. So the contract catches an adapter that loads into
nothing, or that keeps serving what the old weights computed. `vllm-real` runs the same contract on a real
engine (marker `gpu`, deselected by `make test`: `pytest -m gpu tests/unit/actors/test_weights_targets.py`).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from actors.rollout.generation import Generation
from actors.rollout.torch_backend import TorchBackend
from actors.rollout.vllm_backend import (
    BackendUnavailable,
    VllmBackend,
    VllmWeightsTarget,
    checkpoint_shapes,
)
from actors.rollout.weights import TorchModelTarget, WeightsRefused, WeightsTarget, check_tensors
from learner.testing import tiny_llama
from tests.unit.actors.test_weights import trained_weights

EOS = 2
PROMPT = (1, 70, 71, 72, 73)


class _LoadingModel:
    """vLLM's model as `load_weights` sees it: (Hugging Face name, tensor) pairs, a KeyError for a name
    the model does not have."""

    def __init__(self, model: Any) -> None:
        self.hf = model

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        state = self.hf.state_dict()
        loaded = set()
        with torch.no_grad():
            for name, tensor in weights:
                state[name].copy_(tensor)
                loaded.add(name)
        return loaded


@dataclass
class _Logprob:
    logprob: float


class ScriptedLlm:
    """vllm.LLM as the adapter uses it: generate (answered from a prefix cache when a prompt and seed come
    again), collective_rpc (a callable runs with the worker), reset_prefix_cache."""

    def __init__(self, model: Any) -> None:
        self.backend = TorchBackend(model, eos_token_id=EOS)
        self.worker = SimpleNamespace(model_runner=SimpleNamespace(model=_LoadingModel(model)))
        self.cache: dict[tuple[tuple[int, ...], int], Any] = {}

    def generate(self, inputs: list[dict[str, list[int]]], params: list[Any], use_tqdm: bool) -> list[Any]:
        outputs = []
        for prompt, p in zip(inputs, params, strict=True):
            key = (tuple(prompt["prompt_token_ids"]), p.seed)
            if key not in self.cache:
                g = self.backend.generate([key[0]], max_new_tokens=p.max_tokens, seeds=[p.seed])[0]
                completion = SimpleNamespace(
                    token_ids=list(g.token_ids),
                    logprobs=[{t: _Logprob(lp)} for t, lp in zip(g.token_ids, g.logprobs, strict=True)],
                    finish_reason=g.finish_reason,
                )
                self.cache[key] = SimpleNamespace(outputs=[completion])
            outputs.append(self.cache[key])
        return outputs

    def collective_rpc(
        self, method: Callable[..., Any], args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> list[Any]:
        return [method(self.worker, *args, **(kwargs or {}))]

    def reset_prefix_cache(self) -> bool:
        self.cache.clear()
        return True


class _Params:
    def __init__(self, **kwargs: Any) -> None:
        self.__dict__.update(kwargs)


@dataclass(frozen=True)
class Subject:
    target: WeightsTarget
    draw: Callable[[], Generation]  # the same prompt and seed each time: what the weights make of it


def _torch(tmp_path: Path) -> Subject:
    model = tiny_llama()
    backend = TorchBackend(model, eos_token_id=EOS)
    target = TorchModelTarget(model)
    return Subject(target, lambda: backend.generate([PROMPT], max_new_tokens=8, seeds=[3])[0])


def _vllm_scripted(tmp_path: Path) -> Subject:
    model = tiny_llama()
    model.save_pretrained(tmp_path, safe_serialization=True)
    llm = ScriptedLlm(model)
    backend = VllmBackend(llm, _Params, eos_token_id=EOS)
    target = VllmWeightsTarget(llm, tmp_path)
    return Subject(target, lambda: backend.generate([PROMPT], max_new_tokens=8, seeds=[3])[0])


TARGETS = [
    pytest.param(_torch, id="torch"),
    pytest.param(_vllm_scripted, id="vllm-adapter"),
    pytest.param(None, id="vllm-real", marks=pytest.mark.gpu),
]


def _vllm_real() -> Subject:
    """vLLM on the prepared SmolLM2 model: its merged q/v weights are what the demo's learner publishes."""
    from transformers import AutoTokenizer

    from actors.rollout.llm import end_of_turn
    from learner.model import prepare_model
    from ops.paths import Paths

    assert importlib.util.find_spec("vllm") is not None, "vllm-real needs vllm (pip install .[gpu])"
    model_dir = prepare_model(Paths.from_env().cache)
    eos = end_of_turn(AutoTokenizer.from_pretrained(str(model_dir)))
    backend = VllmBackend.load(model_dir, eos_token_id=eos)
    prompt = (1, 504, 3458, 314, 253)
    return Subject(
        VllmWeightsTarget(backend.llm, model_dir),
        lambda: backend.generate([prompt], max_new_tokens=16, temperature=1.0, seeds=[3])[0],
    )


@pytest.fixture(params=TARGETS)
def subject(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Subject]:
    yield _vllm_real() if request.param is None else request.param(tmp_path)


def _perturbed(shapes: Mapping[str, tuple[int, ...]], seed: int) -> dict[str, torch.Tensor]:
    """New values for every attention projection the target names: what a learner's merged LoRA gives."""
    generator = torch.Generator().manual_seed(seed)
    return {
        name: torch.randn(shape, generator=generator) * 0.5
        for name, shape in shapes.items()
        if name.endswith(("q_proj.weight", "v_proj.weight"))
    }


def test_the_target_names_the_tensors_a_learner_publishes(subject: Subject) -> None:
    shapes = subject.target.shapes()
    projections = [name for name in shapes if name.endswith(("q_proj.weight", "v_proj.weight"))]
    assert projections, "no attention projection named: nothing a learner publishes could be checked"
    check_tensors(_perturbed(shapes, 0), shapes)  # accepted as they are


def test_loaded_weights_decide_the_next_draw_and_the_old_ones_come_back(subject: Subject) -> None:
    shapes = subject.target.shapes()
    before = subject.draw()
    old = _perturbed(shapes, 1)
    # Hold the old values to load them back: the perturbed ones first, then a second set on top.
    subject.target.load(old)
    with_old = subject.draw()
    subject.target.load(_perturbed(shapes, 2))
    with_new = subject.draw()
    subject.target.load(old)
    assert subject.draw().token_ids == with_old.token_ids  # a cache of the new weights' answers is not kept
    assert (with_old.token_ids, with_old.logprobs) != (with_new.token_ids, with_new.logprobs)
    assert (before.token_ids, before.logprobs) != (with_old.token_ids, with_old.logprobs)


def test_checkpoint_shapes_come_from_the_safetensors_headers(tmp_path: Path) -> None:
    model = tiny_llama()
    model.save_pretrained(tmp_path, safe_serialization=True)
    state = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    shapes = checkpoint_shapes(tmp_path)
    # Every stored tensor as the model has it; a tied output head is not stored.
    assert shapes == {name: shape for name, shape in state.items() if name in shapes}
    assert set(state) - set(shapes) <= {"lm_head.weight"}
    # The adapter checks publications against these, not vLLM's fused parameters: a learner's merged
    # weights pass, a tensor of another shape does not.
    weights = trained_weights(5)
    check_tensors(weights, shapes)
    name = next(iter(weights))
    with pytest.raises(WeightsRefused, match="shape"):
        check_tensors({**weights, name: torch.zeros(3, 3)}, shapes)


def test_a_model_folder_without_safetensors_is_refused_clearly(tmp_path: Path) -> None:
    with pytest.raises(BackendUnavailable, match="safetensors"):
        checkpoint_shapes(tmp_path)


def test_a_worker_that_loads_fewer_tensors_is_an_error(tmp_path: Path) -> None:
    model = tiny_llama()
    model.save_pretrained(tmp_path, safe_serialization=True)

    class Partial(ScriptedLlm):
        def collective_rpc(self, method: Any, args: Any = (), kwargs: Any = None) -> list[Any]:
            return [*super().collective_rpc(method, args, kwargs), 0]  # a second worker that took none

    target = VllmWeightsTarget(Partial(model), tmp_path)
    with pytest.raises(RuntimeError, match="loaded"):
        target.load(trained_weights(5))
