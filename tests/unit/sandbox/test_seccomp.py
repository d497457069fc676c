"""The pinned seccomp profile (sandbox_agent/seccomp.json): Docker 20.10.24's default, less ptrace and
io_uring (derived by removing those names from its unconditional allow rules)."""

from __future__ import annotations

import json

import pytest

from sandbox_agent.docker_backend import SECCOMP_PROFILE, ULIMITS

pytestmark = pytest.mark.unit

PROFILE = json.loads(SECCOMP_PROFILE)


def allowed_without_capabilities() -> set[str]:
    names: set[str] = set()
    for rule in PROFILE["syscalls"]:
        if rule["action"] == "SCMP_ACT_ALLOW" and not rule.get("includes", {}).get("caps"):
            names.update(rule["names"])
    return names


def test_anything_not_listed_is_refused() -> None:
    assert PROFILE["defaultAction"] == "SCMP_ACT_ERRNO"


def test_what_trialog_removed_from_dockers_default_is_not_allowed() -> None:
    allowed = allowed_without_capabilities()
    for name in ("ptrace", "io_uring_setup", "io_uring_enter", "io_uring_register"):
        assert name not in allowed, name


def test_what_dockers_default_refuses_stays_refused() -> None:
    allowed = allowed_without_capabilities()
    for name in ("keyctl", "add_key", "request_key", "unshare", "mount", "setns", "bpf", "kexec_load"):
        assert name not in allowed, name


def test_what_ordinary_programs_need_is_allowed() -> None:
    needed = {"read", "write", "openat", "execve", "wait4", "mmap", "futex", "kill", "pipe2", "setsid"}
    assert needed <= allowed_without_capabilities()
    # clone (fork) is allowed for any flags but those that make namespaces, as in Docker's default
    assert any("clone" in rule["names"] and rule.get("args") for rule in PROFILE["syscalls"])


def test_ulimits_are_pinned_with_no_core_files() -> None:
    by_name = {limit["Name"]: (limit["Soft"], limit["Hard"]) for limit in ULIMITS}
    assert by_name["core"] == (0, 0)
    assert set(by_name) == {"core", "nofile", "nproc"}
