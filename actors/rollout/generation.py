"""The interface of a rollout backend: token-id prompts in, sampled token ids with their log-probs out.

Backends (`torch_backend`, `vllm_backend`) implement `GenerationBackend`; the LLM policy depends on this
module only, so it imports neither torch nor vllm by itself. The shared-prompt rule (`shared_prompt_prefix`)
is here too: the rollout's prefill and the learner's pass run the same prefix once.
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


def row_seeds(prompts: Sequence[Sequence[int]], seed: int, seeds: Sequence[int] | None) -> list[int]:
    """Each row's sampling seed: `seeds[i]`, or `seed` for every row when `seeds` is None."""
    rows = [seed] * len(prompts) if seeds is None else list(seeds)
    if len(rows) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(rows)} seeds")
    return rows


# Below this many common prompt tokens a separate prefix pass costs more than it saves.
MIN_SHARED_PREFIX = 16


def common_prefix(prompts: Sequence[Sequence[int]]) -> int:
    """How many leading tokens all `prompts` share, leaving every prompt at least its last token (the
    position the first reply token is sampled at, or scored from, must run in the row's own pass)."""
    limit = min(len(p) for p in prompts) - 1
    first = prompts[0]
    for index in range(max(limit, 0)):
        token = first[index]
        if any(p[index] != token for p in prompts[1:]):
            return index
    return max(limit, 0)


def shared_prompt_prefix(prompts: Sequence[Sequence[int]]) -> int:
    """The prompt tokens worth running once for every row (the rollout's prefill, the learner's pass): the
    common prefix of two or more prompts, 0 when it is too short to pay for a pass of its own."""
    if len(prompts) < 2:
        return 0
    shared = common_prefix(prompts)
    return shared if shared >= MIN_SHARED_PREFIX else 0
