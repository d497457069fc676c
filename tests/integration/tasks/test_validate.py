"""`tasks validate` in real sandboxes: each admission rule on a task built to break it."""

from __future__ import annotations

import shutil
from pathlib import Path

import docker
import pytest

from actors.tasks.spec import Task
from actors.tasks.validate import Admission, validate_all
from actors.tasks.verify import Verification, verify
from ops.paths import REPO_ROOT
from ops.stack.images import sandbox_ref
from ops.testing import owned_labels
from sandbox_agent.docker_backend import DockerBackend
from sandbox_agent.limits import MIB, Quotas, SandboxSpec
from schemas.blobs import LocalObjectStore

SOURCE = REPO_ROOT / "examples" / "tasks" / "easy-fix-range"
RANDOM_TESTS = "".join(
    f"def test_coin_{i}():\n    import os\n    assert os.urandom(1)[0] % 2\n\n" for i in range(8)
)


def _variant(root: Path, name: str) -> Path:
    folder = root / name
    shutil.copytree(SOURCE, folder)
    toml = folder / "task.toml"
    toml.write_text(toml.read_text().replace('id = "easy-fix-range"', f'id = "{name}"'))
    return folder


def _tasks(root: Path) -> dict[str, Path]:
    folders = {name: _variant(root, name) for name in ("valid", "passing", "gold", "flaky", "slow", "broken")}
    (folders["passing"] / "tests" / "test_counting.py").write_text("def test_ok():\n    assert True\n")
    with (folders["gold"] / "tests" / "test_counting.py").open("a") as tests:
        tests.write("\n\ndef test_impossible():\n    assert 1 == 2\n")
    (folders["flaky"] / "tests" / "test_coins.py").write_text(RANDOM_TESTS)
    toml = folders["slow"] / "task.toml"
    toml.write_text(toml.read_text().replace("timeout_s = 30", "timeout_s = 4"))
    (folders["slow"] / "tests" / "test_slow.py").write_text(
        "import time\n\ndef test_slow():\n    time.sleep(60)\n"
    )
    toml = folders["broken"] / "task.toml"
    toml.write_text(toml.read_text().replace("timeout_s = 30", 'timeout_s = "soon"'))
    return folders


def test_each_admission_rule(docker_client: docker.DockerClient, tmp_path: Path) -> None:
    backend = DockerBackend(
        docker_client, LocalObjectStore(tmp_path / "objects"), labels=owned_labels("validate")
    )
    spec = SandboxSpec(str(sandbox_ref()), Quotas(memory_bytes=512 * MIB, pids=128))

    def verifier(task: Task, workspace: Path) -> Verification:
        return verify(task, workspace, backend, spec)

    folders = _tasks(tmp_path / "tasks")
    seen: list[str] = []
    results = validate_all(
        list(folders.values()), verifier, runs=2, jobs=2, on_done=lambda r: seen.append(r.path)
    )
    verdicts = {Path(r.path).name: r.verdict for r in results}
    assert verdicts == {
        "valid": Admission.VALID,
        "passing": Admission.ALREADY_PASSING,
        "gold": Admission.GOLD_FAILS,
        "flaky": Admission.FLAKY,
        "slow": Admission.TIMEOUT,
        "broken": Admission.INVALID_SPEC,
    }
    assert len(seen) == len(folders)
    broken = next(r for r in results if r.verdict is Admission.INVALID_SPEC)
    assert "timeout_s" in broken.reasons[0]
    valid = next(r for r in results if r.verdict is Admission.VALID)
    assert len(valid.runs) == 2 and valid.to_json()["version"]


@pytest.mark.parametrize("name", ["easy-fix-add", "word-count"])
def test_example_tasks_are_admitted(docker_client: docker.DockerClient, tmp_path: Path, name: str) -> None:
    backend = DockerBackend(
        docker_client, LocalObjectStore(tmp_path / "objects"), labels=owned_labels("validate")
    )
    spec = SandboxSpec(str(sandbox_ref()))
    results = validate_all(
        [REPO_ROOT / "examples" / "tasks" / name],
        lambda task, workspace: verify(task, workspace, backend, spec),
        runs=1,
    )
    assert [r.verdict for r in results] == [Admission.VALID]
