"""The engine's OCI runtimes: crun's flag, and the cgroup controllers crun needs on a hybrid host."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ops.stack import runtimes
from streams.errors import StackError

HYBRID_MOUNTS = """\
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,cpuacct 0 0
cgroup /sys/fs/cgroup/net_cls,net_prio cgroup rw,net_cls,net_prio 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
cgroup /sys/fs/cgroup/systemd cgroup rw,relatime,name=systemd 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
"""
PURE_V2_MOUNTS = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime 0 0\n"


def test_v1_mounts_are_read_with_every_controller_a_mount_carries() -> None:
    mounted = runtimes.v1_mounted(HYBRID_MOUNTS)
    assert {"cpu", "cpuacct", "net_cls", "net_prio", "memory"} <= mounted
    assert "cgroup2" not in mounted and "mode=755" not in mounted
    assert runtimes.v1_mounted(PURE_V2_MOUNTS) == set()


def test_controllers_left_on_a_hybrid_hosts_v2_hierarchy_are_stranded() -> None:
    assert runtimes.stranded_controllers("hugetlb\n", HYBRID_MOUNTS) == ["hugetlb"]
    assert runtimes.stranded_controllers("memory hugetlb pids", HYBRID_MOUNTS) == ["hugetlb", "pids"]
    assert runtimes.stranded_controllers("", HYBRID_MOUNTS) == []
    # A pure v2 host has every controller on v2, as it should: nothing to mount.
    assert runtimes.stranded_controllers("cpu memory hugetlb", PURE_V2_MOUNTS) == []


def test_nothing_is_mounted_without_a_v2_hierarchy_beside_v1(tmp_path: Path) -> None:
    mounts = tmp_path / "mounts"
    mounts.write_text(HYBRID_MOUNTS)
    assert runtimes.mount_missing_controllers(tmp_path / "no-unified", mounts) == []


def test_crun_is_registered_only_where_it_is_installed() -> None:
    assert runtimes.dockerd_flags(Path("/usr/bin/crun")) == ["--add-runtime=crun=/usr/bin/crun"]
    assert runtimes.dockerd_flags(None) == []


class _Engine:
    def info(self) -> dict[str, Any]:
        return {"DefaultRuntime": "runc", "Runtimes": {"io.containerd.runc.v2": {}, "runc": {}, "crun": {}}}


class _RuncOnly:
    def info(self) -> dict[str, Any]:
        return {"DefaultRuntime": "runc", "Runtimes": {"runc": {}}}


def test_a_worker_asks_only_for_a_runtime_the_engine_has() -> None:
    assert runtimes.registered(_Engine()) == ["runc", "crun", "io.containerd.runc.v2"]
    runtimes.require_registered(_Engine(), "crun")
    with pytest.raises(StackError, match="no runtime 'crun' \\(it has runc\\)") as refused:
        runtimes.require_registered(_RuncOnly(), "crun")
    assert "trialog up" in refused.value.hint


def test_crun_is_registered_only_when_asked_for() -> None:
    assert not runtimes.crun_wanted({})
    assert not runtimes.crun_wanted({"TRIALOG_CRUN": "0"}) and not runtimes.crun_wanted(
        {"TRIALOG_CRUN": "no"}
    )
    assert runtimes.crun_wanted({"TRIALOG_CRUN": "1"}) and runtimes.crun_wanted({"TRIALOG_CRUN": " Yes "})
    with pytest.raises(StackError, match="TRIALOG_CRUN"):
        runtimes.crun_wanted({"TRIALOG_CRUN": "maybe"})
