"""Steps are isolated: attacks by a policy that runs several steps in one sandbox (as a worker runs an
episode), on the real Docker engine, through the exec server and through the `docker exec` fallback.

What each attack scored before the defences (base 7d13a22): a detached process lived on into later steps
and wrote text into their output; `kill -INT 1` stopped the sandbox (PID 1 had the agent's uid and Python's
SIGINT handler), so the next step found it gone and a fail grade became grading_failed; the engine's
default ulimits (core files, a million open files) and seccomp profile applied.
"""

from __future__ import annotations

import time

import docker
import pytest

from sandbox_agent.backend import Sandbox
from sandbox_agent.docker_backend import NOFILE_LIMIT, DockerBackend, is_running
from sandbox_agent.docker_exec import ByteSink, run_exec
from sandbox_agent.exec_server import SWEEP_SIGNAL
from sandbox_agent.limits import ExecLimits
from schemas.blobs import LocalObjectStore
from tests.integration.sandbox.conftest import MakeSandbox, docker_backend

pytestmark = pytest.mark.integration

PID_1_CAPS = (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8)  # CAP_KILL, CAP_SETGID, CAP_SETUID, CAP_SETPCAP

# Every way a shell leaves a process behind that is not in the command's process group or session.
DETACHED = {
    "setsid": "setsid sleep 1000 &",
    "nohup": "nohup sleep 1000 >/dev/null 2>&1 &",
    "double-fork": "(sleep 1000 &) &",
    "disown": "sleep 1000 & disown;",
    "setsid-daemon": (
        "setsid sh -c 'trap \"\" HUP TERM INT; while :; do sleep 1; done' >/dev/null 2>&1 </dev/null &"
    ),
}
# A straggler that writes into the stdout and stderr of every other process it can reach, as fast as it can.
FORGER = (
    "setsid sh -c 'while :; do for f in /proc/[0-9]*/fd/1 /proc/[0-9]*/fd/2; do "
    "echo FORGED > $f; done 2>/dev/null; done' >/dev/null 2>&1 < /dev/null &"
)


@pytest.fixture(params=["channel", "docker-exec"])
def backend(
    request: pytest.FixtureRequest, docker_client: docker.DockerClient, objects: LocalObjectStore
) -> DockerBackend:
    return docker_backend(docker_client, objects, exec_channel=request.param == "channel")


def sh(backend: DockerBackend, sandbox: Sandbox, script: str, timeout_s: float = 20) -> tuple[int, str, str]:
    result = backend.exec(sandbox, ["bash", "-c", script], limits=ExecLimits(timeout_s=timeout_s))
    return result.exit_code, result.stdout, result.stderr


def agent_processes(backend: DockerBackend, sandbox: Sandbox) -> list[str]:
    """Commands of the agent's uid other than this probe (its own shell and awk)."""
    probe = (
        'for d in /proc/[0-9]*; do [ "$(stat -c %u $d 2>/dev/null)" = 1000 ] && '
        "[ ${d#/proc/} != $$ ] && cat $d/cmdline 2>/dev/null | tr '\\0' ' ' && echo; done; true"
    )
    _, out, _ = sh(backend, sandbox, probe)
    return [line for line in out.splitlines() if line.strip() and "/proc/[0-9]" not in line]


@pytest.mark.parametrize("how", sorted(DETACHED))
def test_a_detached_process_ends_with_its_step(backend: DockerBackend, sandbox: Sandbox, how: str) -> None:
    code, _, _ = sh(backend, sandbox, f"{DETACHED[how]} echo started")
    assert code == 0
    assert agent_processes(backend, sandbox) == []


def test_a_survivor_cannot_write_into_a_later_steps_output(backend: DockerBackend, sandbox: Sandbox) -> None:
    sh(backend, sandbox, FORGER + " sleep 0.5")
    for _ in range(3):
        code, out, err = sh(backend, sandbox, "sleep 0.3; echo mine")
        assert (code, out, err) == (0, "mine\n", "")


def test_a_snapshot_is_right_with_a_hostile_straggler(backend: DockerBackend, sandbox: Sandbox) -> None:
    backend.write_files(sandbox, {"a.txt": b"a", "sub/b.txt": b"b"})
    clean = backend.snapshot(sandbox)
    racer = "setsid sh -c 'while :; do touch race; rm -f race; done' >/dev/null 2>&1 < /dev/null &"
    sh(backend, sandbox, FORGER + racer + " sleep 0.5")
    taken = {backend.snapshot(sandbox) for _ in range(3)}  # no ListingError from forged output
    assert len(taken) == 1  # nothing changes the workspace between them: the racer is dead
    paths = {entry.path for entry in backend.snapshots.load(taken.pop()).entries}
    assert paths - {"race"} == {entry.path for entry in backend.snapshots.load(clean).entries}


@pytest.mark.parametrize(
    "attack", ["kill -INT 1", "kill -TERM 1", "kill -HUP 1", "kill -QUIT 1", "kill -9 1", "kill -9 -1"]
)
def test_signals_to_pid_1_do_not_stop_the_sandbox(
    backend: DockerBackend, sandbox: Sandbox, docker_client: docker.DockerClient, attack: str
) -> None:
    sh(backend, sandbox, f"{attack}; sleep 0.5")
    time.sleep(0.5)
    assert is_running(docker_client, sandbox)
    assert sh(backend, sandbox, "echo 1 failed; exit 1") == (1, "1 failed\n", "")  # a fail is still a fail
    assert backend.snapshot(sandbox).sha256


def test_pid_1_is_not_the_agents_and_cannot_be_traced_or_read(
    backend: DockerBackend, sandbox: Sandbox
) -> None:
    script = (
        "stat -c 'uid %u' /proc/1; cat /proc/1/mem 2>&1 | head -c 0; cat /proc/1/environ >/dev/null 2>&1 "
        "|| echo environ refused; ls /proc/1/fd >/dev/null 2>&1 || echo fd refused; "
        "python3 -c 'import ctypes; print(\"attach\", ctypes.CDLL(None).ptrace(16, 1, 0, 0))'; "
        "id -u; id -g; id -G"
    )
    _, out, _ = sh(backend, sandbox, script)
    assert out.splitlines() == ["uid 0", "environ refused", "fd refused", "attach -1", "1000", "1000", "1000"]


def test_the_agent_has_no_capabilities_even_with_pid_1s(
    backend: DockerBackend, sandbox: Sandbox, request: pytest.FixtureRequest
) -> None:
    _, out, _ = sh(backend, sandbox, "grep -E '^(Cap...|NoNewPrivs)' /proc/self/status")
    fields = {name: int(value, 16) for name, value in (line.split(":\t") for line in out.splitlines())}
    bounding = fields.pop("CapBnd")
    assert fields == {"CapInh": 0, "CapPrm": 0, "CapEff": 0, "CapAmb": 0, "NoNewPrivs": 1}
    if request.node.callspec.params["backend"] == "channel":
        assert bounding == 0  # the server emptied the bounding set its commands inherit
    else:  # runc gives a `docker exec` the container's bounding set; under no-new-privileges it is inert
        assert bounding & ~PID_1_CAPS == 0


def test_a_detached_fork_bomb_is_contained_and_ends_with_its_step(
    backend: DockerBackend, sandbox: Sandbox
) -> None:
    bomb = "setsid bash -c ':(){ :|:& };:' >/dev/null 2>&1 < /dev/null & sleep 2; echo bombed"
    code, out, _ = sh(backend, sandbox, bomb)
    assert out.endswith("bombed\n") or code != 0  # the shell itself may meet the pids quota
    assert agent_processes(backend, sandbox) == []
    assert sh(backend, sandbox, "echo fine") == (0, "fine\n", "")


def test_pid_1_kills_the_agents_processes_when_the_host_signals_it(
    backend: DockerBackend, sandbox: Sandbox, docker_client: docker.DockerClient
) -> None:
    """The host's fallback when a fork bomb leaves no pid for its sweep's `docker exec`: a signal to PID 1.
    The stragglers are started by a bare exec (no sweep after it), then only the signal kills them."""
    started = run_exec(
        docker_client.api, sandbox.id, ["sh", "-c", DETACHED["setsid-daemon"] + DETACHED["nohup"]],
        stdout=ByteSink(1024), stderr=ByteSink(1024), deadline_s=10, user="1000:1000",
    )  # fmt: skip
    assert started.exit_code == 0
    assert raw_agent_processes(docker_client, sandbox) != []
    docker_client.api.kill(sandbox.id, signal=SWEEP_SIGNAL.name)
    deadline = time.monotonic() + 10
    while raw_agent_processes(docker_client, sandbox) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert raw_agent_processes(docker_client, sandbox) == []
    assert is_running(docker_client, sandbox)
    assert sh(backend, sandbox, "echo fine") == (0, "fine\n", "")


def raw_agent_processes(docker_client: docker.DockerClient, sandbox: Sandbox) -> list[str]:
    """The agent's processes, listed by a root exec that sweeps nothing afterwards (unlike backend.exec)."""
    probe = (
        'for d in /proc/[0-9]*; do [ "$(stat -c %u $d 2>/dev/null)" = 1000 ] && '
        "cat $d/cmdline 2>/dev/null | tr '\\0' ' ' && echo; done; true"
    )
    out = ByteSink(64 * 1024)
    err = ByteSink(1024)
    run_exec(docker_client.api, sandbox.id, ["sh", "-c", probe], stdout=out, stderr=err, deadline_s=10)
    return [line for line in bytes(out.data).decode().splitlines() if line.strip()]


def test_ulimits_are_pinned(backend: DockerBackend, sandbox: Sandbox) -> None:
    _, out, _ = sh(backend, sandbox, "ulimit -c; ulimit -Hc; ulimit -n; ulimit -Hn")
    assert out.split() == ["0", "0", str(NOFILE_LIMIT), str(NOFILE_LIMIT)]


SYSCALLS = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def attempt(name, call):
    rc = call()
    print(name, "refused" if rc == -1 else f"ALLOWED {rc}")
attempt("unshare-user", lambda: libc.unshare(0x10000000))
attempt("keyctl", lambda: libc.syscall(250, 0, -3, 0))
attempt("ptrace-traceme", lambda: libc.ptrace(0, 0, 0, 0))
attempt("mount", lambda: libc.mount(b"none", b"/tmp", b"tmpfs", 0, None))
attempt("process_vm_readv", lambda: libc.syscall(310, os.getpid(), 0, 0, 0, 0, 0))
"""


def test_the_pinned_seccomp_profile_denies_what_it_lists(backend: DockerBackend, sandbox: Sandbox) -> None:
    backend.write_files(sandbox, {"probe.py": SYSCALLS.encode()})
    _, out, err = sh(backend, sandbox, "python3 probe.py")
    assert out.splitlines() == [
        "unshare-user refused",
        "keyctl refused",
        "ptrace-traceme refused",
        "mount refused",
        "process_vm_readv refused",
    ], err


def test_later_steps_still_run_after_every_attack(backend: DockerBackend, make_sandbox: MakeSandbox) -> None:
    sandbox = make_sandbox()
    for attack in [*DETACHED.values(), FORGER, "kill -INT 1", "kill -9 -1"]:
        sh(backend, sandbox, f"{attack} true")
    assert sh(backend, sandbox, "echo last") == (0, "last\n", "")
    assert agent_processes(backend, sandbox) == []
