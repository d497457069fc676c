"""Static signals in a real grading sandbox: the lint findings and type errors a change adds, measured with
the image's own ruff and mypy, and the ways a policy would try to hide them.

Each attack is the same bad change (an unused import, an undefined name, a function returning the wrong
type) plus one way of hiding it: checker configuration files in the workspace, suppression comments, or
code that rewrites its own files clean while the tests run. Each must still count.
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
BAD = '\n\nimport os\n\n\ndef _unused() -> int:\n    return undefined_name + "text"\n'
# Run when the tests import the module: it rewrites its own file without the bad part.
CLEAN_COPY = (
    "import pathlib\n_here = pathlib.Path(__file__)\n"
    "_here.write_text(_here.read_text().split('\\n\\nimport os')[0] + '\\n')\n"
)


@pytest.fixture(scope="module")
def task() -> Task:
    return load_task(TASK)


def _graded(
    docker_client: docker.DockerClient, task: Task, tmp_path: Path, name: str, how: str
) -> Verification:
    backend = DockerBackend(
        docker_client, LocalObjectStore(tmp_path / "objects"), labels=owned_labels("static")
    )
    workspace = task.copy_repo(tmp_path / name, solved=True)
    module = workspace / "counting.py"
    if how != "honest":
        bad = BAD.replace("import os", "import os  # noqa") if how == "noqa" else BAD
        if how == "noqa":
            bad = bad.replace('"text"', '"text"  # type: ignore  # noqa')
        module.write_text(module.read_text() + bad)
    if how == "configs":
        (workspace / "ruff.toml").write_text('exclude = ["*"]\n[lint]\nignore = ["ALL"]\n')
        (workspace / "pyproject.toml").write_text(
            '[tool.ruff]\nexclude = ["*"]\n[tool.mypy]\nignore_errors = true\n'
        )
        (workspace / "mypy.ini").write_text("[mypy]\nignore_errors = True\n")
        (workspace / "setup.cfg").write_text("[mypy]\nignore_errors = True\n[flake8]\nignore = E,F,W\n")
    if how == "rewrites":
        module.write_text(CLEAN_COPY + module.read_text())
    return verify(task, workspace, backend, SandboxSpec(str(sandbox_ref()), SPEC), static=True)


def test_added_findings_are_counted_however_the_change_hides_them(
    docker_client: docker.DockerClient, task: Task, tmp_path: Path
) -> None:
    honest = _graded(docker_client, task, tmp_path, "honest", "honest")
    assert honest.grade.verdict is Verdict.PASS
    assert (honest.resources.lint_new, honest.resources.types_new) == (0, 0), honest.resources
    plain = _graded(docker_client, task, tmp_path, "plain", "plain")
    assert plain.resources.lint_new is not None and plain.resources.lint_new >= 2  # F401, F821
    assert plain.resources.types_new is not None and plain.resources.types_new >= 1
    for how in ("configs", "noqa", "rewrites"):
        hidden = _graded(docker_client, task, tmp_path, how, how).resources
        assert hidden.lint_new is not None and hidden.lint_new >= 2, (how, hidden)
        assert hidden.types_new is not None and hidden.types_new >= 1, (how, hidden)
