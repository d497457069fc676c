"""The synthesized task set trialog ships (examples/synth) rebuilds byte for byte from its releases, and a
sample of it is valid under the real grader. A change to how tasks are cut or written that would change
a shipped task's version fails here, not weeks later in a run that names versions nobody can rebuild."""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path

import docker
import pytest

from actors.tasks.spec import Task, load_task
from actors.tasks.synth.manifest import ManifestEntry, materialize, read_manifest
from actors.tasks.synth.project import load_project
from actors.tasks.validate import Admission, validate_task
from actors.tasks.verify import Verification, task_quotas, verify
from ops.paths import Paths
from ops.stack.images import sandbox_ref
from ops.synth_sources import fetch_project
from ops.testing import owned_labels
from sandbox_agent.docker_backend import DockerBackend
from sandbox_agent.limits import SandboxSpec
from schemas.blobs import LocalObjectStore

pytestmark = pytest.mark.integration

SHIPPED = Path(__file__).resolve().parents[3] / "examples" / "synth" / "tasks.jsonl.gz"
SAMPLE = 4  # tasks validated here (a full `--runs 5` over the set takes hours: see BENCHMARKS.md)


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Every shipped task, rebuilt from its release's sdist (fetched into the cache by `make test`'s
    set-up, ops/test.sh; the tests reach loopback only)."""
    out = tmp_path_factory.mktemp("shipped")
    by_project: dict[str, list[ManifestEntry]] = defaultdict(list)
    for entry in read_manifest(SHIPPED):
        by_project[entry.project].append(entry)
    folders = []
    for listed in by_project.values():
        name, version = listed[0].release
        project = load_project(fetch_project(name, version, Paths.from_env()), name, version)
        folders += [materialize(entry, project, out) for entry in listed]
    return folders


def test_every_shipped_task_rebuilds_as_it_was_synthesized(rebuilt: list[Path]) -> None:
    entries = {entry.task_id: entry for entry in read_manifest(SHIPPED)}
    assert len(rebuilt) == len(entries) >= 1000
    assert len({entry.project for entry in entries.values()}) >= 6
    for folder in rebuilt:
        task = load_task(folder)  # loads: the patch applies, the tests parse, the ids are frozen
        assert task.version == entries[task.id].version
        synthesis = task.spec.meta.synthesis
        assert synthesis is not None
        assert set(task.test_ids) == {
            t.partition("[")[0] for t in synthesis.fail_to_pass + synthesis.pass_to_pass
        }


def test_a_sample_of_the_shipped_tasks_is_valid(
    rebuilt: list[Path], docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    backend = DockerBackend(
        docker_client, LocalObjectStore(tmp_path / "objects"), labels=owned_labels("shipped")
    )

    def grade(task: Task, workspace: Path) -> Verification:
        spec = SandboxSpec(task.spec.image or str(sandbox_ref()), task_quotas(task))
        return verify(task, workspace, backend, spec)

    for folder in random.Random(len(rebuilt)).sample(sorted(rebuilt), SAMPLE):
        result = validate_task(folder, grade, 1)
        assert result.verdict is Admission.VALID, (folder.name, result.reasons)
