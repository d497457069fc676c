"""Signalling the grading sandbox's PID 1 from the code under test does not erase a grade.

Before PID 1 ran as another uid with default-handled signals, `kill -INT 1` from the agent's code stopped
the sandbox, and the verifier's answer became an infrastructure error (verdict `error`, not trained on):
any fail or partial grade could be turned into no grade at all.
"""

from __future__ import annotations

from pathlib import Path

import docker
import pytest

from actors.tasks.reward import Verdict
from actors.tasks.spec import Task, load_task
from actors.tasks.verify import verify
from ops.paths import REPO_ROOT
from ops.stack.images import sandbox_ref
from ops.testing import owned_labels
from sandbox_agent.docker_backend import DockerBackend
from sandbox_agent.limits import MIB, Quotas, SandboxSpec
from schemas.blobs import LocalObjectStore

TASK = REPO_ROOT / "examples" / "tasks" / "easy-fix-range"
SPEC = Quotas(memory_bytes=512 * MIB, cpus=1.0, pids=128, workspace_bytes=64 * MIB, tmp_bytes=64 * MIB)
SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGKILL")


@pytest.mark.parametrize("how", ["os.kill", "kill -1"])
def test_killing_pid_1_from_the_tests_leaves_the_unsolved_grade(
    docker_client: docker.DockerClient, tmp_path: Path, how: str
) -> None:
    task: Task = load_task(TASK)
    objects = LocalObjectStore(tmp_path / "objects")
    backend = DockerBackend(docker_client, objects, labels=owned_labels("pid1"))
    spec = SandboxSpec(str(sandbox_ref()), SPEC)
    honest = verify(task, task.copy_repo(tmp_path / "honest", solved=False), backend, spec).grade
    workspace = task.copy_repo(tmp_path / "attack", solved=False)
    if how == "os.kill":
        payload = "".join(
            f"try:\n    os.kill(1, signal.{name})\nexcept OSError:\n    pass\n" for name in SIGNALS
        )
    else:  # every process the agent's uid may signal, PID 1 included if it could
        payload = "try:\n    os.kill(-1, signal.SIGKILL)\nexcept OSError:\n    pass\n"
    for module in workspace.rglob("*.py"):
        module.write_text("import os, signal\n" + payload + module.read_text())
    attacked = verify(task, workspace, backend, spec).grade
    assert attacked.verdict is not Verdict.ERROR, attacked.detail
    assert attacked.verdict in (Verdict.FAIL, Verdict.PARTIAL, Verdict.TAMPERED)
    assert attacked.reward <= honest.reward < 1.0
