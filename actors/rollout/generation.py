"""The interface of a rollout backend: token-id prompts in, sampled token ids with their log-probs out.

Backends (`torch_backend`, `vllm_backend`) implement `GenerationBackend`; the LLM policy depends on this
module only, so it imports neither torch nor vllm by itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Generation:
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]  # the behaviour log-prob of each sampled token
    finish_reason: str  # "stop" (the end-of-sequence token, kept as the last token) | "length"


class GenerationBackend(Protocol):
    """Samples continuations of token-id prompts; row i draws only from a generator seeded with seeds[i]."""

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int = 0,
        seeds: Sequence[int] | None = None,
    ) -> list[Generation]: ...
