"""Fixtures for sandbox tests: backends (parametrized: every backend passes the same contract), specs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest

from ops.stack.images import sandbox_ref
from ops.testing import owned_labels
from sandbox_agent.backend import Sandbox, SandboxBackend
from sandbox_agent.docker_backend import DockerBackend
from sandbox_agent.limits import MIB, Quotas, SandboxSpec
from sandbox_agent.local_backend import LocalProcessBackend
from schemas.blobs import LocalObjectStore

TEST_LABELS = owned_labels("sandbox")
SMALL = Quotas(memory_bytes=512 * MIB, cpus=1.0, pids=128, workspace_bytes=64 * MIB, tmp_bytes=32 * MIB)

MakeSandbox = Callable[[], Sandbox]


@pytest.fixture(scope="session")
def sandbox_spec() -> SandboxSpec:
    return SandboxSpec(str(sandbox_ref()), SMALL)


@pytest.fixture
def objects(tmp_path: Path) -> LocalObjectStore:
    return LocalObjectStore(tmp_path / "objects")


def docker_backend(
    client: docker.DockerClient, objects: LocalObjectStore, *, exec_channel: bool = True
) -> DockerBackend:
    return DockerBackend(client, objects, labels=TEST_LABELS, exec_channel=exec_channel)


@pytest.fixture(params=["docker", "docker-exec", "local"])
def backend(request: pytest.FixtureRequest, objects: LocalObjectStore, tmp_path: Path) -> SandboxBackend:
    """Each backend in turn; add a backend here and it must pass every contract test.

    "docker" runs commands through each sandbox's exec server, "docker-exec" through `docker exec` (the
    path taken when a sandbox's exec channel is unavailable)."""
    if request.param.startswith("docker"):
        client = request.getfixturevalue("docker_client")
        return docker_backend(client, objects, exec_channel=request.param == "docker")
    return LocalProcessBackend(objects, tmp_path / "local-sandboxes")


@pytest.fixture
def make_sandbox(backend: SandboxBackend, sandbox_spec: SandboxSpec) -> Iterator[MakeSandbox]:
    made: list[Sandbox] = []

    def make() -> Sandbox:
        made.append(backend.create(sandbox_spec))
        return made[-1]

    yield make
    for sandbox in made:
        backend.destroy(sandbox)


@pytest.fixture
def sandbox(make_sandbox: MakeSandbox) -> Sandbox:
    return make_sandbox()
