"""Quotas of a sandbox (fixed when it is created) and limits of one exec (chosen per call).

Sizes are bytes; `parse_size` reads the human forms the CLI accepts ("512m", "1g", "64KiB"), in binary
units as Docker does. The workspace and /tmp are tmpfs mounts, so what is written there is charged to the
sandbox's memory as well: keep `memory_bytes` above what the command needs plus what it writes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the CLI builds its parser from this module: keep it light
    from schemas.requests import ResourceLimits

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB

_UNITS = {"": 1, "b": 1, "k": KIB, "m": MIB, "g": GIB, "t": 1024 * GIB}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)

# Docker refuses memory limits under 6 MiB; below 16 MiB not even the sandbox's init process fits.
MIN_MEMORY_BYTES = 16 * MIB
DEFAULT_TMP_BYTES = 256 * MIB


def parse_size(text: str) -> int:
    """Bytes from "1024", "64k", "512m", "1.5g", "2GiB" (binary units). A size that is not a whole number
    of bytes ("0.3k") is refused rather than rounded: a quota must be what was asked for."""
    match = _SIZE.match(text)
    if match is None:
        raise ValueError(f"not a size: {text!r} (examples: 512m, 1g, 64KiB)")
    number, unit = match.groups()
    whole, _, decimals = number.partition(".")
    # Exact arithmetic: float would round "1.1g" to a figure nobody typed.
    numerator = int(whole + decimals) * _UNITS[unit.lower()]
    denominator: int = 10 ** len(decimals)
    if numerator % denominator:
        raise ValueError(f"not a size: {text!r} is not a whole number of bytes (use a smaller unit)")
    return numerator // denominator


@dataclass(frozen=True, slots=True)
class Quotas:
    """What one sandbox may use at most, fixed when it is created."""

    memory_bytes: int = 2 * GIB  # swap is always off: memory+swap is set to the same figure
    cpus: float = 1.0
    pids: int = 256
    workspace_bytes: int = 1 * GIB
    tmp_bytes: int = DEFAULT_TMP_BYTES

    def __post_init__(self) -> None:
        if self.memory_bytes < MIN_MEMORY_BYTES:
            raise ValueError(f"memory must be at least {MIN_MEMORY_BYTES // MIB} MiB")
        if self.cpus <= 0 or self.pids <= 0 or self.workspace_bytes <= 0 or self.tmp_bytes <= 0:
            raise ValueError("cpus, pids and disk quotas must be positive")

    @classmethod
    def from_resource_limits(cls, limits: ResourceLimits) -> Quotas:
        """The quotas a `SandboxRequest` asks for (its disk figure applies to the workspace and to /tmp)."""
        disk = limits.disk_mb * MIB
        return cls(limits.memory_mb * MIB, limits.cpus, limits.pids, disk, min(disk, DEFAULT_TMP_BYTES))


@dataclass(frozen=True, slots=True)
class ExecLimits:
    """Limits of one exec: wall time (the whole process group is killed) and kept output per stream."""

    timeout_s: float = 60.0
    output_bytes: int = 64 * KIB

    def __post_init__(self) -> None:
        if self.timeout_s <= 0 or self.output_bytes < 0:
            raise ValueError("timeout must be positive and the output cap not negative")


BACKGROUND_CPU_SHARES = 64  # against the default 1024: a sixteenth of a contended CPU


@dataclass(frozen=True, slots=True)
class SandboxSpec:
    """What a sandbox is made from: sandboxes with equal specs are interchangeable (one warm pool each)."""

    image: str
    quotas: Quotas = field(default_factory=Quotas)
    # Work nothing waits for (a process grade): its processes get a small share of a contended CPU, so the
    # episodes' own steps and grades go first; alone on a core it runs at full speed all the same.
    background: bool = False
