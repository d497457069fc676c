"""A tiny language model built in memory (no download): a byte-level tokenizer with a ChatML template and a
randomly initialised llama, for tests of the LLM policy, the prompt encoder and the torch backend."""

from __future__ import annotations

from typing import Any

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from learner.testing import tiny_chat_llama

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


def tiny_llama(seed: int = 0) -> Any:
    """A randomly initialised llama on `byte_tokenizer`'s vocabulary (`learner.testing.tiny_chat_llama`)."""
    return tiny_chat_llama(byte_tokenizer(), seed=seed).eval()
