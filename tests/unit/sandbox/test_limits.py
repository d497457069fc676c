from __future__ import annotations

import pytest

from sandbox_agent.limits import GIB, KIB, MIB, ExecLimits, Quotas, parse_size
from schemas.requests import ResourceLimits


@pytest.mark.parametrize(
    ("text", "size"),
    [("1024", 1024), ("64k", 64 * KIB), ("512m", 512 * MIB), ("1g", GIB), ("1.5G", 3 * GIB // 2),
     ("2GiB", 2 * GIB), ("10MB", 10 * MIB), ("7b", 7)],
)  # fmt: skip
def test_sizes_read_in_binary_units(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "lots", "-1m", "1x", "m"])
def test_nonsense_sizes_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a size"):
        parse_size(text)


def test_quotas_refuse_what_cannot_run() -> None:
    with pytest.raises(ValueError, match="memory"):
        Quotas(memory_bytes=MIB)
    with pytest.raises(ValueError, match="positive"):
        Quotas(pids=0)
    with pytest.raises(ValueError, match="positive"):
        ExecLimits(timeout_s=0)


def test_a_request_s_limits_become_quotas() -> None:
    quotas = Quotas.from_resource_limits(ResourceLimits(cpus=2.0, memory_mb=1024, pids=99, disk_mb=100))
    assert quotas == Quotas(
        memory_bytes=1024 * MIB, cpus=2.0, pids=99, workspace_bytes=100 * MIB, tmp_bytes=100 * MIB
    )
    big = Quotas.from_resource_limits(ResourceLimits(disk_mb=4096))
    assert big.workspace_bytes == 4 * GIB and big.tmp_bytes == Quotas().tmp_bytes


@pytest.mark.parametrize("text", ["0.3k", "1.1g", "0.5b"])
def test_a_size_that_is_not_whole_bytes_is_refused_not_rounded(text: str) -> None:
    with pytest.raises(ValueError, match="whole number of bytes"):
        parse_size(text)
