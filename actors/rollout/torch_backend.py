"""The torch rollout backend: batched sampling that returns each token with its behaviour log-probability.

The log-probability recorded for a sampled token is log softmax(logits / temperature) at that position:
the distribution the token was drawn from, before top-p truncation (the learner recomputes the same
quantity, so an on-policy ratio is exactly 1). Prompts are left-padded into one batch; a sequence ends at
the model's end-of-sequence token ("stop") or at `max_new_tokens` ("length"). Runs on CPU or GPU unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Generation:
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: str  # "stop" | "length"


class TorchBackend:
    def __init__(self, model: Any, eos_token_id: int, pad_token_id: int | None = None) -> None:
        self.model = model
        self.eos = eos_token_id
        self.pad = eos_token_id if pad_token_id is None else pad_token_id

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device  # type: ignore[no-any-return]

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int = 0,
    ) -> list[Generation]:
        input_ids, attention = self._left_pad(prompts)
        generator_state = torch.random.get_rng_state()
        torch.manual_seed(seed)  # the sampler's randomness comes from the request's seed: reproducible
        try:
            with torch.no_grad():
                out = self.model.generate(
                    input_ids=input_ids,
                    attention_mask=attention,
                    max_new_tokens=max_new_tokens,
                    do_sample=temperature > 0,
                    temperature=temperature if temperature > 0 else None,
                    top_p=top_p if temperature > 0 else None,
                    top_k=None,
                    output_logits=True,
                    return_dict_in_generate=True,
                    pad_token_id=self.pad,
                    eos_token_id=self.eos,
                )
        finally:
            torch.random.set_rng_state(generator_state)
        new_tokens = out.sequences[:, input_ids.shape[1] :]
        logits = torch.stack(out.logits, dim=1).float()  # [B, steps, vocab]
        scale = temperature if temperature > 0 else 1.0
        logprobs = torch.log_softmax(logits / scale, dim=-1).gather(-1, new_tokens.unsqueeze(-1)).squeeze(-1)
        return [self._trim(new_tokens[row], logprobs[row]) for row in range(len(prompts))]

    def _left_pad(self, prompts: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, prompt in enumerate(prompts):
            ids[row, width - len(prompt) :] = torch.tensor(list(prompt))
            attention[row, width - len(prompt) :] = 1
        return ids.to(self.device), attention.to(self.device)

    def _trim(self, tokens: torch.Tensor, logprobs: torch.Tensor) -> Generation:
        ids = tokens.tolist()
        if self.eos in ids:
            end = ids.index(self.eos) + 1  # the end-of-sequence token is the policy's own action too
            return Generation(tuple(ids[:end]), tuple(logprobs[:end].tolist()), "stop")
        return Generation(tuple(ids), tuple(logprobs.tolist()), "length")
