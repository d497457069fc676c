"""Hostile commands through `trialog sandbox run --json` on the real Docker engine.

Each must end with one clean JSON result, the host unaffected and still responsive (the engine answers
and a fresh sandbox still runs at once), and the sandbox contained.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import docker
import pytest

from ops.testing import LoopbackListener
from tests.integration.sandbox.cli_helpers import sandbox_json

KEYS = {"exit_code", "stdout", "stderr", "timed_out", "oom_killed", "truncated", "duration_s", "snapshot_id"}


@pytest.fixture(autouse=True)
def host_stays_responsive(
    docker_client: docker.DockerClient, capsys: pytest.CaptureFixture[str]
) -> Iterator[None]:
    yield
    assert docker_client.ping()
    after = sandbox_json(["--timeout", "10"], ["echo", "alive"], capsys)
    assert after["stdout"] == "alive\n" and after["duration_s"] < 5


def run(capsys: pytest.CaptureFixture[str], command: str, *options: str) -> dict[str, object]:
    result: dict[str, object] = sandbox_json(list(options), ["bash", "-c", command], capsys)
    assert set(result) >= KEYS
    assert str(result["snapshot_id"]).startswith("snap-")
    return result


def test_fork_bomb(capsys: pytest.CaptureFixture[str]) -> None:
    # The shell lingers so that the bomb meets the pids quota before its process group is killed.
    result = run(capsys, ":(){ :|:& };:; sleep 3", "--pids", "64", "--timeout", "20")
    assert "Resource temporarily unavailable" in str(result["stderr"])  # the pids quota held it
    assert result["timed_out"] is False


def test_fork_bomb_that_leaves_its_process_group(capsys: pytest.CaptureFixture[str]) -> None:
    result = run(capsys, "setsid bash -c ':(){ :|:& };:' & sleep 30", "--pids", "64", "--timeout", "3")
    assert result["timed_out"] is True


def test_memory_bomb_is_oom_killed(capsys: pytest.CaptureFixture[str]) -> None:
    bomb = "python3 -c 'chunks = []\nwhile True: chunks.append(bytearray(10**7))'"
    result = run(capsys, bomb, "--memory", "128m")
    assert result["oom_killed"] is True and result["exit_code"] == 137 and result["timed_out"] is False


@pytest.mark.parametrize("folder", ["/workspace", "/tmp"])
def test_filling_the_disk_stops_at_the_quota(capsys: pytest.CaptureFixture[str], folder: str) -> None:
    fill = f"dd if=/dev/zero of={folder}/fill bs=1M count=100; stat -c %s {folder}/fill"
    result = run(capsys, fill, "--disk", "16m", "--memory", "256m")
    assert "No space left on device" in str(result["stderr"])
    assert int(str(result["stdout"]).split()[-1]) <= 16 * 1024 * 1024
    assert result["oom_killed"] is False


def test_infinite_loop_is_killed_at_the_timeout(capsys: pytest.CaptureFixture[str]) -> None:
    started = time.monotonic()
    result = run(capsys, "python3 -c 'while True: pass'", "--timeout", "2")
    assert result["timed_out"] is True and result["exit_code"] == 137
    assert 2 <= float(str(result["duration_s"])) < 4
    assert time.monotonic() - started < 8  # the whole CLI run: create, exec, snapshot, remove


def test_output_flood_is_truncated(capsys: pytest.CaptureFixture[str]) -> None:
    result = run(capsys, "head -c 50000000 /dev/zero | tr '\\0' y", "--max-output", "4k")
    assert result["truncated"] is True
    assert "[... 49995904 bytes dropped by trialog ...]" in str(result["stdout"])
    assert len(str(result["stdout"])) < 5000


def test_only_the_loopback_interface_exists(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "ls /sys/class/net")["stdout"] == "lo\n"


def test_a_port_the_host_listens_on_is_unreachable(capsys: pytest.CaptureFixture[str]) -> None:
    with LoopbackListener() as listener:
        probe = (
            f"import socket\ntry:\n socket.create_connection(('127.0.0.1', {listener.port}), timeout=3)\n"
            " print('connected')\nexcept OSError as exc:\n print(type(exc).__name__)"
        )
        result = run(capsys, f'python3 -c "{probe}"')
    assert result["stdout"] == "ConnectionRefusedError\n" and listener.accepted == []


def test_the_user_is_not_root(capsys: pytest.CaptureFixture[str]) -> None:
    result = run(capsys, "id -u; id -g")
    assert str(result["stdout"]).split() == ["1000", "1000"]


def test_no_capabilities_and_no_new_privileges(capsys: pytest.CaptureFixture[str]) -> None:
    status = dict(
        line.split(":\t")
        for line in str(run(capsys, "cat /proc/self/status")["stdout"]).splitlines()
        if ":\t" in line
    )
    for field in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(status[field], 16) == 0, field
    assert status["NoNewPrivs"] == "1"


def test_writing_outside_the_workspace_and_tmp_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    places = [
        "/",
        "/etc",
        "/usr/bin",
        "/home/agent",
        "/var/tmp",
        "/run",
        "/dev",
        "/dev/shm",
        "/opt",
        "/inputs",
    ]
    script = "for d in " + " ".join(places) + "; do touch $d/x 2>/dev/null && echo WROTE $d; done; "
    script += "touch /workspace/ok /tmp/ok && echo allowed"
    result = run(capsys, script)
    assert result["stdout"] == "allowed\n"


def test_no_docker_socket_anywhere(capsys: pytest.CaptureFixture[str]) -> None:
    script = (
        "find / \\( -path /proc -o -path /sys \\) -prune -o -type s -print 2>/dev/null; env | grep -i docker"
    )
    assert run(capsys, script)["stdout"] == ""


def test_nothing_from_the_host_is_mounted(capsys: pytest.CaptureFixture[str]) -> None:
    mounts = set(str(run(capsys, "awk '{print $5}' /proc/self/mountinfo")["stdout"]).splitlines())
    # Docker's own: the root, /proc, /dev, /sys and their standard submounts, plus the three files it
    # writes for every container; trialog's three tmpfs mounts. Nothing else from the host.
    own = {m for m in mounts if m == "/" or m.startswith(("/proc", "/dev", "/sys"))}
    expected = {"/workspace", "/tmp", "/inputs", "/etc/hosts", "/etc/hostname", "/etc/resolv.conf"}
    assert mounts - own == expected


def test_mount_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    result = run(capsys, "mount -t tmpfs none /tmp 2>&1; echo rc=$?; unshare -U -r true 2>&1; echo rc=$?")
    lines = str(result["stdout"]).splitlines()
    assert "rc=0" not in lines, lines


def test_workspace_option_copies_a_folder_without_following_links(
    capsys: pytest.CaptureFixture[str], tmp_path: pytest.TempPathFactory
) -> None:
    from pathlib import Path

    root = Path(str(tmp_path))
    outside = root / "outside-secret"
    outside.write_text("host secret")
    task = root / "task"
    (task / "pkg").mkdir(parents=True)
    (task / "pkg" / "mod.py").write_text("X = 1\n")
    (task / "escape").symlink_to(outside)
    (task / "escape-dir").symlink_to(root)
    result = run(
        capsys,
        "cat pkg/mod.py; cat escape 2>&1; ls escape-dir/ 2>&1; readlink escape",
        "--workspace",
        str(task),
    )
    out = str(result["stdout"])
    assert "X = 1" in out and "host secret" not in out and "outside-secret" in out  # the link, dangling
    assert json.dumps(result)  # one clean object


def test_the_exec_server_is_out_of_the_agents_reach(capsys: pytest.CaptureFixture[str]) -> None:
    # PID 1 runs trialog's commands: the agent (same user) can neither kill it, stop it, read or write its
    # streams, nor trace it. The snapshot taken after this command proves it still serves.
    script = (
        "kill -KILL 1; kill -STOP 1; ls /proc/1/fd 2>&1; cat /proc/1/fd/0 2>&1; echo forged > /proc/1/fd/1; "
        "python3 -c 'import ctypes; print(\"ptrace\", ctypes.CDLL(None).ptrace(16, 1, 0, 0))'; echo done"
    )
    result = run(capsys, script)
    out = str(result["stdout"])
    assert out.count("Permission denied") >= 2 and "ptrace -1" in out and out.endswith("done\n")
    assert "forged" not in out
