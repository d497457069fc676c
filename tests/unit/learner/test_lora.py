from __future__ import annotations

import pytest
import torch

from learner.lora import (
    Adaptation,
    LoRALinear,
    adapt,
    load_trainable_state,
    merged_weights,
    trainable_parameters,
    trainable_state,
)
from learner.testing import tiny_llama

IDS = torch.tensor([[1, 40, 41, 42, 43, 44, 45]])


def logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        out: torch.Tensor = model(input_ids=IDS).logits
    return out


def perturb(model: torch.nn.Module) -> None:
    """A LoRA update as training would leave it (B starts at zero; make it non-zero)."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, LoRALinear):
                module.lora_b.copy_(torch.randn(module.lora_b.shape, generator=generator) * 0.1)


def test_lora_wraps_only_the_target_layers_and_starts_equal_to_the_base() -> None:
    base, adapted = tiny_llama(), tiny_llama()
    names = adapt(adapted, Adaptation(rank=4))
    assert names == [f"model.layers.{i}.self_attn.{p}" for i in range(2) for p in ("q_proj", "v_proj")]
    trainable = trainable_state(adapted)
    assert set(trainable) == {f"{n}.{ab}" for n in names for ab in ("lora_a", "lora_b")}
    assert torch.equal(logits(base), logits(adapted))


def test_the_merged_weights_give_the_same_outputs_as_the_adapted_model() -> None:
    adapted = tiny_llama()
    adapt(adapted, Adaptation(rank=4, alpha=8.0))
    perturb(adapted)
    merged = merged_weights(adapted)
    assert set(merged) == {
        f"model.layers.{i}.self_attn.{p}.weight" for i in range(2) for p in ("q_proj", "v_proj")
    }
    plain = tiny_llama()
    assert not torch.allclose(logits(plain), logits(adapted))
    _, unexpected = plain.load_state_dict(merged, strict=False)
    assert unexpected == []
    assert torch.allclose(logits(plain), logits(adapted), atol=1e-5)


def test_full_fine_tuning_trains_and_publishes_every_parameter() -> None:
    model = tiny_llama()
    assert adapt(model, Adaptation(rank=0)) == []
    everything = dict(model.named_parameters())
    assert len(trainable_parameters(model)) == len(everything)
    assert set(merged_weights(model)) == set(everything)


def test_trainable_state_round_trips_and_refuses_a_foreign_one() -> None:
    source, target = tiny_llama(), tiny_llama()
    adapt(source, Adaptation(rank=4))
    adapt(target, Adaptation(rank=4))
    perturb(source)
    load_trainable_state(target, trainable_state(source))
    assert torch.equal(logits(source), logits(target))
    with pytest.raises(ValueError, match="do not match"):
        load_trainable_state(target, {"nope": torch.zeros(1)})
