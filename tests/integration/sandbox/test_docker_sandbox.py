"""Docker-backend behaviour beyond the common contract: stragglers, OOM flags, incremental snapshots,
restoring on another host, warm pools and idempotent steps on real containers."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

import docker
import pytest

from ops.testing import CONTAINER_LABEL
from sandbox_agent.actions import invocation_for
from sandbox_agent.backend import Sandbox
from sandbox_agent.docker_backend import DockerBackend, is_running
from sandbox_agent.idempotent import ExecKey, IdempotentExecutor, RocksResultStore
from sandbox_agent.limits import MIB, ExecLimits, Quotas, SandboxSpec
from sandbox_agent.pool import WarmPool
from schemas.actions import ApplyPatch
from schemas.blobs import LocalObjectStore
from tests.integration.sandbox.conftest import TEST_LABELS, MakeSandbox, docker_backend


@pytest.fixture
def backend(docker_client: docker.DockerClient, objects: LocalObjectStore) -> DockerBackend:
    return docker_backend(docker_client, objects)


def process_names(backend: DockerBackend, sandbox: Sandbox) -> list[str]:
    out = backend.exec(sandbox, ["sh", "-c", "cat /proc/[0-9]*/comm"]).stdout
    return sorted(out.split())


def test_processes_that_left_the_group_are_killed_on_timeout(
    backend: DockerBackend, make_sandbox: MakeSandbox
) -> None:
    sandbox = make_sandbox()
    result = backend.exec(
        sandbox,
        ["sh", "-c", "setsid sleep 1000 & nohup sleep 1000 & sleep 100"],
        limits=ExecLimits(timeout_s=1),
    )
    assert result.timed_out
    assert "sleep" not in process_names(backend, sandbox)
    assert process_names(backend, sandbox) == process_names(backend, make_sandbox())  # as good as new


def test_oom_is_reported_once_per_kill(backend: DockerBackend, sandbox_spec: SandboxSpec) -> None:
    sandbox = backend.create(SandboxSpec(sandbox_spec.image, Quotas(memory_bytes=96 * MIB)))
    try:
        bomb = backend.exec(sandbox, ["python3", "-c", "a = []\nwhile True: a.append(bytearray(10**7))"])
        assert bomb.oom_killed and bomb.exit_code == 137
        later = backend.exec(sandbox, ["sh", "-c", "exit 1"])
        assert later.exit_code == 1 and not later.oom_killed
    finally:
        backend.destroy(sandbox)


def test_a_rewrite_with_its_old_size_and_mtime_still_changes_the_snapshot(
    backend: DockerBackend, make_sandbox: MakeSandbox
) -> None:
    sandbox = make_sandbox()
    backend.exec(sandbox, ["sh", "-c", "printf AAAA > f && touch -d @1000000000 f"])
    time.sleep(0.1)  # past the racy window: the first snapshot trusts what it saw
    before = backend.snapshot(sandbox)
    backend.exec(sandbox, ["sh", "-c", "printf BBBB > f && touch -d @1000000000 f"])
    after = backend.snapshot(sandbox)
    assert after != before
    assert backend.snapshots.load(after).files[0].sha256 != backend.snapshots.load(before).files[0].sha256


def test_a_snapshot_restores_on_another_host_after_a_crash(
    docker_client: docker.DockerClient, make_sandbox: MakeSandbox, backend: DockerBackend, tmp_path: Path
) -> None:
    sandbox = make_sandbox()
    backend.exec(sandbox, ["sh", "-c", "mkdir -p src && seq 1 20000 > src/data.txt && ln -s src/data.txt d"])
    snapshot = backend.snapshot(sandbox)
    docker_client.api.kill(sandbox.id)  # the host loses the sandbox
    assert not is_running(docker_client, sandbox)
    # Another host: its own backend, reading a copy of the object store (as a shared bucket would serve).
    shutil.copytree(tmp_path / "objects", tmp_path / "elsewhere")
    other = DockerBackend(docker_client, LocalObjectStore(tmp_path / "elsewhere"), labels=TEST_LABELS)
    replacement = other.create(sandbox.spec)
    try:
        other.restore(replacement, snapshot)
        assert other.snapshot(replacement) == snapshot
        assert other.exec(replacement, ["sh", "-c", "tail -1 d"]).stdout == "20000\n"
    finally:
        other.destroy(replacement)


def test_a_restored_workspace_is_known_without_fetching_it_again(
    backend: DockerBackend, make_sandbox: MakeSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, target = make_sandbox(), make_sandbox()
    backend.write_files(source, {f"f{i}.txt": str(i).encode() for i in range(20)})
    snapshot = backend.snapshot(source)
    backend.restore(target, snapshot)
    fetched: list[list[str]] = []
    real_fetch = backend._fetch
    monkeypatch.setattr(
        backend, "_fetch", lambda sandbox, paths: fetched.append(paths) or real_fetch(sandbox, paths)
    )
    assert backend.snapshot(target) == snapshot
    backend.exec(target, ["sh", "-c", "echo changed > f3.txt"])
    changed = backend.snapshot(target)
    assert fetched == [["f3.txt"]]  # only the file the step changed crossed over
    assert backend.snapshots.load(changed) != backend.snapshots.load(snapshot)


def test_inputs_are_root_owned_and_read_only_for_the_sandbox_user(
    backend: DockerBackend, make_sandbox: MakeSandbox
) -> None:
    sandbox = make_sandbox()
    inputs = backend.write_inputs(sandbox, {"tests/test_x.py": b"frozen\n"})
    frozen = f"{inputs}/tests/test_x.py"
    attacks = (
        f"echo hacked > {frozen}; rm -f {frozen}; touch {inputs}/new; chmod 777 {frozen}; "
        f"mv {inputs}/tests {inputs}/moved; stat -c '%u %a' {frozen}"
    )
    result = backend.exec(sandbox, ["sh", "-c", attacks])
    assert result.stdout == "0 444\n"
    assert backend.exec(sandbox, ["cat", f"{inputs}/tests/test_x.py"]).stdout == "frozen\n"
    backend.write_inputs(sandbox, {"tests/test_x.py": b"replaced by trialog\n"})  # trialog still can
    assert backend.exec(sandbox, ["cat", f"{inputs}/tests/test_x.py"]).stdout == "replaced by trialog\n"


def test_home_is_writable_for_tools_that_need_it(backend: DockerBackend, make_sandbox: MakeSandbox) -> None:
    sandbox = make_sandbox()
    result = backend.exec(
        sandbox, ["sh", "-c", "git config --global user.name agent && git config user.name"]
    )
    assert result.stdout == "agent\n"


def test_the_warm_pool_hands_over_started_sandboxes_and_never_reuses_them(
    backend: DockerBackend, sandbox_spec: SandboxSpec, docker_client: docker.DockerClient
) -> None:
    with WarmPool(backend, sandbox_spec, size=2) as pool:
        assert pool.wait_ready(timeout_s=60)
        first, second = pool.acquire(), pool.acquire()
        assert pool.stats().hits == 2 and first.id != second.id
        assert is_running(docker_client, first)
        assert backend.exec(first, ["echo", "ok"]).stdout == "ok\n"
        pool.release(first)
        assert pool.wait_ready(timeout_s=60)  # refilled in the background
        assert _eventually(lambda: not _exists(docker_client, first.id))
        ready = [sandbox.id for sandbox in list(pool._ready)]
        assert first.id not in ready and second.id not in ready
        pool.release(second)
    assert not any(_exists(docker_client, sandbox_id) for sandbox_id in ready)  # close removed the ready ones
    assert not _exists(docker_client, second.id)


def _exists(client: docker.DockerClient, container_id: str) -> bool:
    return bool(client.containers.list(all=True, filters={"id": container_id, "label": CONTAINER_LABEL}))


def _eventually(check: Callable[[], bool], timeout_s: float = 30.0) -> bool:
    give_up = time.monotonic() + timeout_s
    while time.monotonic() < give_up:
        if check():
            return True
        time.sleep(0.1)
    return False


def test_the_same_key_twice_runs_once(
    backend: DockerBackend, make_sandbox: MakeSandbox, tmp_path: Path
) -> None:
    sandbox = make_sandbox()
    key = ExecKey("episode-1", step=3, attempt=1)
    append = ["sh", "-c", "echo ran >> log && wc -l < log"]
    with RocksResultStore(tmp_path / "results") as results:
        executor = IdempotentExecutor(backend, results)
        first = executor.run(sandbox, key, append)
        again = executor.run(sandbox, key, append)
    assert again == first and first.result.stdout == "1\n"
    assert backend.read_file(sandbox, "log") == b"ran\n"
    with RocksResultStore(tmp_path / "results") as reopened:  # the record survives a restart
        assert IdempotentExecutor(backend, reopened).run(sandbox, key, append) == first
        retry = IdempotentExecutor(backend, reopened).run(sandbox, ExecKey("episode-1", 3, 2), append)
    assert retry.result.stdout == "2\n"  # a new attempt is a new key: it runs


def test_a_patch_action_applies_in_the_sandbox(backend: DockerBackend, make_sandbox: MakeSandbox) -> None:
    sandbox = make_sandbox()
    backend.write_files(sandbox, {"pkg/a.py": b"one\n"})
    diff = "--- a/pkg/a.py\n+++ b/pkg/a.py\n@@ -1 +1 @@\n-one\n+two\n"
    invocation = invocation_for(ApplyPatch(diff), backend.snapshots.objects)
    result = backend.exec(sandbox, invocation.argv, stdin=invocation.stdin)
    assert result.exit_code == 0, result
    assert backend.read_file(sandbox, "pkg/a.py") == b"two\n"


def test_a_background_sandbox_gets_a_small_cpu_share_and_a_normal_one_the_default(
    backend: DockerBackend, sandbox_spec: SandboxSpec, docker_client: docker.DockerClient
) -> None:
    """Process grades run in background sandboxes: on a contended CPU the episodes' own work goes first."""
    import dataclasses

    from sandbox_agent.limits import BACKGROUND_CPU_SHARES

    shares = {}
    for background in (False, True):
        sandbox = backend.create(dataclasses.replace(sandbox_spec, background=background))
        try:
            shares[background] = docker_client.api.inspect_container(sandbox.id)["HostConfig"]["CpuShares"]
        finally:
            backend.destroy(sandbox)
    assert shares == {False: 0, True: BACKGROUND_CPU_SHARES}  # 0: the engine's default weight (1024)
