"""The vLLM rollout backend (GPU): the same interface as the torch backend, for machines with a GPU.

vllm is an optional dependency (the `gpu` extra) and is imported only when this backend is built, so the
rest of trialog works without it; without it, building one raises `BackendUnavailable` with what to do.
Prompts go in as token ids (the `ChatPromptEncoder`'s, so sampler and learner share the prompt); every row
has its own seed (`SamplingParams.seed`); `logprobs=0` returns the log-prob of each sampled token, asked
for after temperature scaling ("processed" log-probs) to match the torch backend's definition.

Hot swap (`VllmWeightsTarget`, the `WeightsTarget` of `actors.rollout.weights`): a published version's
tensors (Hugging Face names: the learner's merged weights) go to every worker of the engine through
`LLM.collective_rpc`, into the model's own `load_weights` (which maps q/k/v onto vLLM's fused projections),
and the prefix cache is reset: a cached prompt prefix holds keys and values the old weights computed. The
shapes a publication is checked against come from the model folder's safetensors headers, the names the
learner publishes, not from vLLM's fused parameters.

NOT RUN HERE: this machine has no GPU and vllm is not installed. The import guard, the pure conversion of
vLLM's outputs (`to_generation`), the checkpoint's shapes, and the backend and weights-target contracts on
a scripted engine are unit-tested (tests/unit/actors/test_backend_contract.py and test_weights_targets.py,
whose `vllm-real` cases run the same contracts on a real engine with `pytest -m gpu` where vllm is
installed).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actors.rollout.generation import Generation, row_seeds

if TYPE_CHECKING:
    import torch


class BackendUnavailable(RuntimeError):
    """The backend's library is not installed (or not usable here)."""


def import_vllm() -> Any:
    try:
        import vllm  # type: ignore[import-not-found, unused-ignore]
    except ImportError as exc:
        raise BackendUnavailable(
            f"the vllm backend needs the vllm package ({exc}); install the `gpu` extra on a machine with a "
            "GPU, or use --backend torch"
        ) from None
    return vllm


class VllmBackend:
    def __init__(self, llm: Any, sampling_params: Any, eos_token_id: int) -> None:
        self.llm = llm
        self.sampling_params = sampling_params  # vllm.SamplingParams (the class)
        self.eos = eos_token_id

    @classmethod
    def load(cls, model_dir: Path, *, eos_token_id: int, gpu_memory_utilization: float = 0.5) -> VllmBackend:
        vllm = import_vllm()
        llm = vllm.LLM(
            model=str(model_dir),
            gpu_memory_utilization=gpu_memory_utilization,
            enable_prefix_caching=True,
            logprobs_mode="processed_logprobs",
        )
        return cls(llm, vllm.SamplingParams, eos_token_id)

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int = 0,
        seeds: Sequence[int] | None = None,
    ) -> list[Generation]:
        seeded = row_seeds(prompts, seed, seeds)
        params = [
            self.sampling_params(**sampling_kwargs(max_new_tokens, temperature, top_p, s, self.eos))
            for s in seeded
        ]
        inputs = [{"prompt_token_ids": list(prompt)} for prompt in prompts]
        outputs = self.llm.generate(inputs, params, use_tqdm=False)
        return [to_generation(output.outputs[0]) for output in outputs]


def sampling_kwargs(
    max_new_tokens: int, temperature: float, top_p: float, seed: int, eos_token_id: int
) -> dict[str, Any]:
    """vllm.SamplingParams arguments for one row: its own seed, the sampled tokens' log-probs."""
    return {
        "max_tokens": max_new_tokens,
        "temperature": max(0.0, temperature),
        "top_p": top_p,
        "seed": seed & 0x7FFF_FFFF_FFFF_FFFF,
        "logprobs": 0,  # the sampled token's log-prob only
        "stop_token_ids": [eos_token_id],
        "skip_special_tokens": False,
    }


def to_generation(completion: Any) -> Generation:
    """A vLLM CompletionOutput (token_ids, logprobs: one {token id: Logprob} per token, finish_reason)."""
    token_ids = tuple(int(t) for t in completion.token_ids)
    steps: Sequence[Mapping[int, Any]] = completion.logprobs or ()
    if len(steps) != len(token_ids):
        raise ValueError(f"{len(token_ids)} tokens but {len(steps)} log-prob entries")
    logprobs = tuple(float(step[token].logprob) for step, token in zip(steps, token_ids, strict=True))
    reason = "stop" if completion.finish_reason == "stop" else "length"
    return Generation(token_ids, logprobs, reason)


class VllmWeightsTarget:
    """A running vLLM engine as the receiver of hot-swapped weights (`actors.rollout.weights`)."""

    def __init__(self, llm: Any, model_dir: Path) -> None:
        self.llm = llm
        self._shapes = checkpoint_shapes(model_dir)

    def shapes(self) -> Mapping[str, tuple[int, ...]]:
        return self._shapes

    def load(self, tensors: Mapping[str, torch.Tensor]) -> None:
        named = [(name, tensor.detach().cpu()) for name, tensor in tensors.items()]
        loaded = self.llm.collective_rpc(load_into_worker, args=(named,))
        if any(count != len(named) for count in loaded):
            raise RuntimeError(f"a worker loaded {loaded} of {len(named)} tensors")
        # Cached prefixes hold keys and values of the old weights: sampling must not reuse them.
        self.llm.reset_prefix_cache()


def load_into_worker(worker: Any, named: list[tuple[str, torch.Tensor]]) -> int:
    """Run inside each vLLM worker (`collective_rpc` calls it with the worker): the tensors into its model;
    how many were given, for the caller to check every worker took them all."""
    worker.model_runner.model.load_weights(weights=iter(named))
    return len(named)


def checkpoint_shapes(model_dir: Path) -> dict[str, tuple[int, ...]]:
    """Every tensor's name and shape in the model folder's safetensors files, read from their headers (an
    8-byte little-endian length, then JSON) without loading a weight. A tied output head is not stored, so
    it is not named: a publication naming it is refused as an unknown tensor."""
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise BackendUnavailable(f"no *.safetensors in {model_dir}: hot swap checks weights against them")
    shapes: dict[str, tuple[int, ...]] = {}
    for path in files:
        with path.open("rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(length))
        for name, entry in header.items():
            if name != "__metadata__":
                shapes[name] = tuple(int(n) for n in entry["shape"])
    return shapes
