"""Low-rank adaptation, written by hand: what makes training a 135M-parameter policy practical on CPU.

A target linear layer W (out x in) stays frozen; beside it two small matrices A (r x in) and B (out x r)
are trained, and the layer computes W x + (alpha / r) B A x. B starts at zero, so the adapted model starts
exactly equal to the base. For publication the update is folded in: W' = W + (alpha / r) B A, a plain
weight the rollout workers load into an unmodified model (`merged_weights`).

Rank 0 means full fine-tuning: every parameter is trained and published.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from learner.defaults import DEFAULT_RANK, DEFAULT_TARGETS

WRAPPED = ".base"  # the frozen layer's attribute inside a LoRALinear


class LoRALinear(nn.Module):
    def __init__(self, base: nn.Linear, rank: int, alpha: float) -> None:
        super().__init__()
        self.base = base
        self.scale = alpha / rank
        dtype, device = base.weight.dtype, base.weight.device
        self.lora_a = nn.Parameter(torch.empty(rank, base.in_features, dtype=dtype, device=device))
        self.lora_b = nn.Parameter(torch.zeros(base.out_features, rank, dtype=dtype, device=device))
        nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))  # as nn.Linear initialises its weight
        base.weight.requires_grad_(False)
        if base.bias is not None:
            base.bias.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        update = (x @ self.lora_a.t()) @ self.lora_b.t()
        out: torch.Tensor = self.base(x) + self.scale * update
        return out

    def merged_weight(self) -> torch.Tensor:
        with torch.no_grad():
            return self.base.weight + self.scale * (self.lora_b @ self.lora_a)


@dataclass(frozen=True, slots=True)
class Adaptation:
    """How the model is trained: LoRA of `rank` on the `targets` layers, or everything when rank is 0."""

    rank: int = DEFAULT_RANK
    alpha: float = 16.0
    targets: tuple[str, ...] = DEFAULT_TARGETS

    @property
    def full(self) -> bool:
        return self.rank == 0


def adapt(model: nn.Module, adaptation: Adaptation) -> list[str]:
    """Prepare `model` for training as `adaptation` says; returns the names of the adapted layers."""
    if adaptation.full:
        for parameter in model.parameters():
            parameter.requires_grad_(True)
        return []
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    names = [
        name
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and name.rsplit(".", 1)[-1] in adaptation.targets
    ]
    if not names:
        raise ValueError(f"no linear layer named {', '.join(adaptation.targets)} in the model")
    for name in names:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, LoRALinear(getattr(parent, child), adaptation.rank, adaptation.alpha))
    return names


def trainable_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The trained tensors by name (what a checkpoint stores): LoRA's A and B, or every parameter."""
    return {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}


def load_trainable_state(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    params = dict(model.named_parameters())
    expected = {name for name, p in params.items() if p.requires_grad}
    if set(state) != expected:
        missing, unknown = sorted(expected - set(state)), sorted(set(state) - expected)
        raise ValueError(f"trainable tensors do not match: missing {missing[:3]}, unknown {unknown[:3]}")
    with torch.no_grad():
        for name, tensor in state.items():
            params[name].copy_(tensor)


def merged_weights(model: nn.Module) -> dict[str, torch.Tensor]:
    """The weights to publish, named as in the unadapted model: each adapted layer's merged weight, or,
    with full fine-tuning, every parameter (tied ones once)."""
    adapted = {name: m for name, m in model.named_modules() if isinstance(m, LoRALinear)}
    if adapted:
        return {f"{name}.weight": m.merged_weight().contiguous().cpu() for name, m in adapted.items()}
    return {name: p.detach().contiguous().cpu().clone() for name, p in model.named_parameters()}


def trainable_parameters(model: nn.Module) -> Sequence[nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]
