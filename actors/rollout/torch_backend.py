"""The torch rollout backend: batched sampling that returns each token with its behaviour log-probability.

The log-probability recorded for a sampled token is log softmax(logits / temperature) at that position:
the distribution the token was drawn from, before top-p truncation (the learner recomputes the same
quantity, so an on-policy ratio is exactly 1). A sequence ends at the model's end-of-sequence token
("stop") or at `max_new_tokens` ("length"). Runs on CPU or GPU unchanged.

Every row has its own seed and its own `torch.Generator`, and the decoding loop is ours (a KV cache, left
padding with matching position ids): a row's draws come only from its own generator, so a request gets the
same tokens alone or batched with any others (up to float rounding of the batched matmuls), and a
redelivered request is answered alike. The global torch RNG is never touched.

The prompts' common prefix (the scaffold's instructions; the whole prompt but its last token when a batch
is one task's group) is run once with batch 1, and every row decodes on a copy of that key/value cache:
a group of 8 then pays one prompt's prefill, not eight.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from actors.rollout.generation import Generation, row_seeds, shared_prompt_prefix

__all__ = ["Generation", "TorchBackend"]


class TorchBackend:
    def __init__(self, model: Any, eos_token_id: int, pad_token_id: int | None = None) -> None:
        self.model = model
        self.eos = eos_token_id
        self.pad = eos_token_id if pad_token_id is None else pad_token_id
        self.prefill_tokens = 0  # prompt tokens run through the model (a shared prefix counts once)

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
        seeds: Sequence[int] | None = None,
    ) -> list[Generation]:
        """One generation per prompt; row i draws from a generator seeded with `seeds[i]` (else `seed`)."""
        seeded = row_seeds(prompts, seed, seeds)
        shared = shared_prompt_prefix(prompts)
        generators = [self._generator(s) for s in seeded]
        with torch.no_grad():
            past, input_ids, attention = self._prefill_shared(prompts, shared)
            tokens, logprobs = self._decode(
                input_ids, attention, past, shared, generators, max_new_tokens, temperature, top_p
            )
        return [self._trim(tokens[row], logprobs[row]) for row in range(len(prompts))]

    def _prefill_shared(
        self, prompts: Sequence[Sequence[int]], shared: int
    ) -> tuple[Any, torch.Tensor, torch.Tensor]:
        """The key/value cache of the first `shared` tokens (run once, copied to every row; None when
        nothing is shared), the rows' remaining tokens left-padded, and the attention mask over both."""
        suffixes, attention = self._left_pad([p[shared:] for p in prompts])
        self.prefill_tokens += shared + int(attention.sum())
        if not shared:
            return None, suffixes, attention
        prefix = torch.tensor([list(prompts[0][:shared])], dtype=torch.long, device=self.device)
        past = self.model(input_ids=prefix, use_cache=True, logits_to_keep=1).past_key_values
        past.reorder_cache(torch.zeros(len(prompts), dtype=torch.long, device=self.device))
        ones = attention.new_ones((len(prompts), shared))
        return past, suffixes, torch.cat([ones, attention], dim=-1)

    def _generator(self, seed: int) -> torch.Generator:
        generator = torch.Generator(device=self.device)
        generator.manual_seed(seed & 0xFFFF_FFFF_FFFF_FFFF)
        return generator

    def _decode(
        self,
        input_ids: torch.Tensor,
        attention: torch.Tensor,
        past: Any,
        shared: int,
        generators: list[torch.Generator],
        max_new_tokens: int,
        temperature: float,
        top_p: float,
    ) -> tuple[list[list[int]], list[list[float]]]:
        """Sampling from `input_ids` on, after the `shared` tokens already in `past` (`attention` covers
        both): a row's positions count only its own tokens, so left padding moves nothing."""
        rows = input_ids.shape[0]
        positions = (attention.cumsum(-1) - 1).clamp(min=0)[:, shared:]
        tokens: list[list[int]] = [[] for _ in range(rows)]
        logprobs: list[list[float]] = [[] for _ in range(rows)]
        done = [False] * rows
        step_ids, step_positions = input_ids, positions
        for _ in range(max_new_tokens):
            out = self.model(
                input_ids=step_ids,
                attention_mask=attention,
                position_ids=step_positions,
                past_key_values=past,
                use_cache=True,
                logits_to_keep=1,  # only the last position is sampled: no vocabulary matmul elsewhere
            )
            past = out.past_key_values
            logits = out.logits[:, -1, :].float()
            chosen = self._choose(logits, generators, done, temperature, top_p)
            scale = temperature if temperature > 0 else 1.0
            logp = torch.log_softmax(logits / scale, dim=-1).gather(-1, chosen.unsqueeze(-1)).squeeze(-1)
            for row in range(rows):
                if not done[row]:
                    tokens[row].append(int(chosen[row]))
                    logprobs[row].append(float(logp[row]))
                    done[row] = int(chosen[row]) == self.eos
            if all(done):
                break
            step_ids = chosen.unsqueeze(-1)
            step_positions = step_positions[:, -1:] + 1
            attention = torch.cat([attention, attention.new_ones((rows, 1))], dim=-1)
        return tokens, logprobs

    def _choose(
        self,
        logits: torch.Tensor,
        generators: list[torch.Generator],
        done: list[bool],
        temperature: float,
        top_p: float,
    ) -> torch.Tensor:
        if temperature <= 0:
            return logits.argmax(dim=-1)
        probs = _nucleus(torch.softmax(logits / temperature, dim=-1), top_p)
        chosen = torch.full((logits.shape[0],), self.pad, dtype=torch.long, device=logits.device)
        for row, generator in enumerate(generators):
            if not done[row]:  # a finished row draws nothing: its generator's stream stays its own
                chosen[row] = torch.multinomial(probs[row], 1, generator=generator)[0]
        return chosen

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

    def _trim(self, tokens: list[int], logprobs: list[float]) -> Generation:
        # The end-of-sequence token is kept: it is the policy's own action too (ending its turn).
        reason = "stop" if tokens and tokens[-1] == self.eos else "length"
        return Generation(tuple(tokens), tuple(logprobs), reason)


def _nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """`probs` restricted to the smallest set of tokens whose mass reaches `top_p`, renormalised."""
    if top_p >= 1.0:
        return probs
    ordered, order = probs.sort(dim=-1, descending=True)
    outside = ordered.cumsum(dim=-1) - ordered > top_p  # the mass before a token already reaches top_p
    ordered = ordered.masked_fill(outside, 0.0)
    kept = torch.zeros_like(probs).scatter(-1, order, ordered)
    return kept / kept.sum(dim=-1, keepdim=True)
