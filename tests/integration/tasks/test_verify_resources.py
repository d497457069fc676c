"""A grade's resource signals, measured in a real sandbox on crafted workspaces: a slow solution, a
memory-hungry one, one that leaves a process running, each against the honest solution graded alike.

They are measured by the sandbox's PID 1 (another uid than the tests': `sandbox_agent.exec_server`), so the
code under test can make them worse but cannot report them better: its processes are counted before they
are killed, and the memory cgroup's mark is read from a read-only mount.
"""

from __future__ import annotations

from pathlib import Path

import docker
import pytest

from actors.tasks.reward import Verdict
from actors.tasks.spec import Task, load_task
from actors.tasks.verify import Verification, verify
from ops.paths import REPO_ROOT
from ops.stack.images import sandbox_ref
from ops.testing import owned_labels
from sandbox_agent.docker_backend import DockerBackend
from sandbox_agent.limits import MIB, Quotas, SandboxSpec
from schemas.blobs import LocalObjectStore

TASK = REPO_ROOT / "examples" / "tasks" / "easy-fix-range"
SPEC = Quotas(memory_bytes=512 * MIB, cpus=1.0, pids=128, workspace_bytes=64 * MIB, tmp_bytes=64 * MIB)


@pytest.fixture(scope="module")
def task() -> Task:
    return load_task(TASK)


def _graded(
    docker_client: docker.DockerClient, task: Task, tmp_path: Path, name: str, prelude: str = ""
) -> Verification:
    """The solved task with `prelude` run first in each of its modules (imported by the tests)."""
    objects = LocalObjectStore(tmp_path / "objects")
    backend = DockerBackend(docker_client, objects, labels=owned_labels("resources"))
    workspace = task.copy_repo(tmp_path / name, solved=True)
    if prelude:
        for module in workspace.rglob("*.py"):
            module.write_text(prelude + module.read_text())
    return verify(task, workspace, backend, SandboxSpec(str(sandbox_ref()), SPEC))


def test_resource_signals_of_crafted_solutions(
    docker_client: docker.DockerClient, task: Task, tmp_path: Path
) -> None:
    honest = _graded(docker_client, task, tmp_path, "honest")
    slow = _graded(docker_client, task, tmp_path, "slow", "import time\ntime.sleep(2.0)\n")
    touch = "_HELD = bytearray(200 * 1024 * 1024)\n_HELD[::4096] = b'x' * len(_HELD[::4096])\n"
    hungry = _graded(docker_client, task, tmp_path, "hungry", touch)
    leaving = _graded(
        docker_client, task, tmp_path, "leaving",
        "import subprocess\nsubprocess.Popen(['sleep', '30'], start_new_session=True)\n",
    )  # fmt: skip
    for graded in (honest, slow, hungry, leaving):
        assert graded.grade.verdict is Verdict.PASS, graded.grade.detail  # every one still solves the task
    base = honest.resources
    assert base.test_wall_s is not None and base.memory_peak_bytes is not None
    assert base.left_running == 0 and base.change is not None and base.change.lines > 0
    assert slow.resources.test_wall_s is not None and slow.resources.test_wall_s >= base.test_wall_s + 1.8
    assert hungry.resources.memory_peak_bytes is not None
    assert hungry.resources.memory_peak_bytes >= base.memory_peak_bytes + 150 * MIB
    assert leaving.resources.left_running is not None and leaving.resources.left_running >= 1
    # The change is measured on the workspace: the preludes made it bigger, alike for each module.
    assert slow.resources.change is not None and slow.resources.change.lines > base.change.lines
