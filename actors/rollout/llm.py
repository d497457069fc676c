"""The language-model policy: the scaffold's chat through a tokenizer, sampled by a generation backend.

`ChatPromptEncoder` is the one place a `PolicyRequest` becomes prompt token ids. The rollout worker samples
from them and the learner rebuilds them with the same object, so both see the prompt token for token
(the learner's log-probs of the recorded tokens are conditioned on exactly what the behaviour policy saw).

The prompt is capped (`max_prompt_tokens`): when the whole chat is longer, the oldest steps are left out,
the newest kept, and the task message says how many were cut, so the model knows its view is partial.
Everything here is deterministic: the same request gives the same ids in every process.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from actors.rollout import scaffold
from actors.rollout.generation import Generation, GenerationBackend
from actors.rollout.policy import Sample
from schemas.events import StepRecord
from schemas.requests import PolicyRequest

DEFAULT_MAX_PROMPT_TOKENS = 6144


class ChatTokenizer(Protocol):
    """What the encoder needs of a Hugging Face tokenizer."""

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...

    def encode(self, text: str, **kwargs: Any) -> Any: ...


class ChatPromptEncoder:
    """A `PolicyRequest` -> the prompt's token ids (the chat template with the generation prompt)."""

    def __init__(self, tokenizer: ChatTokenizer, max_prompt_tokens: int = DEFAULT_MAX_PROMPT_TOKENS) -> None:
        if max_prompt_tokens < 1:
            raise ValueError("max_prompt_tokens must be positive")
        self.tokenizer = tokenizer
        self.max_prompt_tokens = max_prompt_tokens

    def encode(self, request: PolicyRequest) -> list[int]:
        """The prompt of `request`, at most `max_prompt_tokens` long, newest steps kept.

        Only `request.instruction` and `request.history` are read: the learner rebuilds the prompt of
        step i of a trajectory with `encode_history(trajectory.instruction, trajectory.steps[:i])`."""
        return self.encode_history(request.instruction, request.history)

    def encode_history(self, instruction: str, history: Sequence[StepRecord]) -> list[int]:
        """The prompt after the executed steps `history` of a task with `instruction` (see `encode`)."""
        head, steps = scaffold.head_messages(instruction), scaffold.step_messages(history)
        for cut in range(len(steps) + 1):
            ids = self.encode_messages(_with_cut(head, cut, self.max_prompt_tokens) + _flat(steps[cut:]))
            if len(ids) <= self.max_prompt_tokens:
                return ids
        return self._shortened_task(head, len(steps))

    def encode_messages(self, chat: Sequence[dict[str, str]]) -> list[int]:
        """Token ids of a chat, ending with the assistant's turn header (what the model continues)."""
        # Rendering to text first, then tokenizing, behaves alike across tokenizer versions (the return
        # type of apply_chat_template(tokenize=True) changed between transformers releases).
        text = self.tokenizer.apply_chat_template(list(chat), tokenize=False, add_generation_prompt=True)
        return [int(i) for i in self.tokenizer.encode(str(text), add_special_tokens=False)]

    def _shortened_task(self, head: list[dict[str, str]], cut: int) -> list[int]:
        """No step left and still too long: the instruction itself is shortened (its end is dropped)."""
        system, task = head
        content = task["content"]
        while content:
            content = content[: len(content) // 2]
            shortened = {"role": "user", "content": content + "\n(The task text is cut here.)"}
            ids = self.encode_messages(_with_cut([system, shortened], cut, self.max_prompt_tokens))
            if len(ids) <= self.max_prompt_tokens:
                return ids
        raise ValueError(f"the system prompt alone is over {self.max_prompt_tokens} tokens")


def _with_cut(head: list[dict[str, str]], cut: int, limit: int) -> list[dict[str, str]]:
    if cut == 0:
        return list(head)
    system, task = head
    note = f"\n\n(The first {cut} step(s) are not shown: the prompt is limited to {limit} tokens.)"
    return [system, {"role": task["role"], "content": task["content"] + note}]


def _flat(steps: Sequence[list[dict[str, str]]]) -> list[dict[str, str]]:
    return [message for step in steps for message in step]


# ---- the policy -------------------------------------------------------------------------------------------


class ReplyDecoder(Protocol):
    def decode(self, token_ids: Any, **kwargs: Any) -> Any: ...


def sampler_seed(seed: int, episode_id: str, step: int) -> int:
    """The sampler's seed for one request: from the episode's seed, the episode and the step only.

    The attempt is left out on purpose: a re-issued or redelivered request gets the same reply, and an
    episode's replies do not depend on which worker or batch served them."""
    text = f"trialog-llm:{seed}:{episode_id}:{step}".encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "big") & 0x7FFF_FFFF_FFFF_FFFF


@dataclass
class LlmPolicy:
    """A language model behind the scaffold: encode the chat, sample a reply, parse it into an action.

    A reply that is no action becomes an `InvalidReply` (a step whose observation is the error), never an
    exception. `policy_version` is the version of the loaded weights, recorded in every ActionProposed."""

    encoder: ChatPromptEncoder
    backend: GenerationBackend
    decoder: ReplyDecoder
    policy_version: int | None = None
    max_new_tokens: int = 512
    name: str = "llm"

    def sample(self, request: PolicyRequest) -> Sample:
        return self.sample_batch([request])[0]

    def sample_batch(self, requests: Sequence[PolicyRequest]) -> list[Sample]:
        """One sample per request, generated together; each is what it would be alone.

        Requests are grouped by their sampling parameters (temperature, top-p, token budget): each
        group is one batched generate."""
        prompts = [self.encoder.encode(request) for request in requests]
        samples: dict[int, Sample] = {}
        for key, rows in _groups(requests, self.max_new_tokens).items():
            temperature, top_p, budget = key
            generations = self.backend.generate(
                [prompts[i] for i in rows],
                max_new_tokens=budget,
                temperature=temperature,
                top_p=top_p,
                seeds=[_seed_of(requests[i]) for i in rows],
            )
            for row, generation in zip(rows, generations, strict=True):
                samples[row] = self._sample(generation, len(prompts[row]))
        return [samples[row] for row in range(len(requests))]

    def _sample(self, generation: Generation, prompt_tokens: int) -> Sample:
        reply = str(self.decoder.decode(list(generation.token_ids), skip_special_tokens=True))
        parsed = scaffold.parse_reply(reply)
        action = scaffold.invalid_reply(reply, parsed) if isinstance(parsed, scaffold.ReplyError) else parsed
        return Sample(
            action,
            reply,
            generation.token_ids,
            generation.logprobs,
            prompt_tokens,
            generation.finish_reason,
            self.policy_version,
        )


def _seed_of(request: PolicyRequest) -> int:
    return sampler_seed(request.sampling.seed, request.meta.episode_id, request.meta.step)


def _groups(
    requests: Sequence[PolicyRequest], max_new_tokens: int
) -> dict[tuple[float, float, int], list[int]]:
    groups: dict[tuple[float, float, int], list[int]] = {}
    for index, request in enumerate(requests):
        sampling = request.sampling
        key = (sampling.temperature, sampling.top_p, max(1, min(sampling.max_tokens, max_new_tokens)))
        groups.setdefault(key, []).append(index)
    return groups


# ---- loading ----------------------------------------------------------------------------------------------


def load_llm_policy(
    model_dir: Path,
    *,
    backend: str = "torch",
    device: str = "cpu",
    max_new_tokens: int = 512,
    max_prompt_tokens: int = DEFAULT_MAX_PROMPT_TOKENS,
    policy_version: int | None = None,
) -> LlmPolicy:
    """The LLM policy on the model folder (safetensors + tokenizer + chat template), nothing downloaded.

    Raises ValueError for an unknown backend, `BackendUnavailable` when vllm is not installed."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    eos = end_of_turn(tokenizer)
    generation: GenerationBackend
    if backend == "torch":
        generation = _torch_backend(model_dir, device, eos, tokenizer.pad_token_id)
    elif backend == "vllm":
        from actors.rollout.vllm_backend import VllmBackend

        generation = VllmBackend.load(model_dir, eos_token_id=eos)
    else:
        raise ValueError(f"unknown backend {backend!r} (torch or vllm)")
    encoder = ChatPromptEncoder(tokenizer, max_prompt_tokens)
    return LlmPolicy(encoder, generation, tokenizer, policy_version, max_new_tokens)


END_OF_TURN = "<|im_end|>"  # ChatML's end of a message, which SmolLM2's chat template uses


def end_of_turn(tokenizer: Any) -> int:
    """The token that ends the assistant's turn: ChatML's `<|im_end|>` when the vocabulary has it, else the
    tokenizer's end-of-sequence token. (The tokenizer converted from SmolLM2's GGUF file names
    `<|im_start|>` as its eos token; stopping there would let the model run on past its turn.)"""
    vocab = tokenizer.get_vocab()
    if END_OF_TURN in vocab:
        return int(vocab[END_OF_TURN])
    if tokenizer.eos_token_id is None:
        raise ValueError("the tokenizer has neither <|im_end|> nor an end-of-sequence token")
    return int(tokenizer.eos_token_id)


def _torch_backend(model_dir: Path, device: str, eos: int, pad: int | None) -> GenerationBackend:
    import torch
    from transformers import AutoModelForCausalLM

    from actors.rollout.torch_backend import TorchBackend

    model: Any = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    model = model.to(torch.device(device)).eval()
    return TorchBackend(model, eos_token_id=eos, pad_token_id=pad)
