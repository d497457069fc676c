"""A tiny language model built in memory (no download): a byte-level tokenizer with a ChatML template and a
randomly initialised llama, for tests of the LLM policy, the prompt encoder and the torch backend."""

from __future__ import annotations

from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def byte_tokenizer() -> Any:
    """One token per byte (ids 0-255), then <|im_start|> (256) and <|im_end|> (257, end of turn)."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {char: index for index, char in enumerate(sorted(alphabet, key=_byte_of))}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=IM_END, pad_token=IM_END)
    fast.add_special_tokens({"additional_special_tokens": [IM_START]})
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _byte_of(char: str) -> int:
    return _BYTES[char]


def _bytes_to_unicode() -> dict[str, int]:
    # GPT-2's reversible byte <-> printable character map, which the ByteLevel pre-tokenizer uses.
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = list(printable), 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


_BYTES = _bytes_to_unicode()


def tiny_llama(vocab_size: int = 258, eos: int = 257, seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        eos_token_id=eos,
        bos_token_id=eos,
        pad_token_id=eos,
    )
    return LlamaForCausalLM(config).eval()
