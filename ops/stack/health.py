"""A component's health as `trialog status` reports it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Health:
    healthy: bool
    detail: str
    endpoint: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
