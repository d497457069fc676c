"""Shared fixtures. Tests under tests/unit are marked `unit`, those under tests/integration `integration`.

Integration fixtures use the real components prepared by `trialog prepare` (which `make test` runs): the
Docker engine, the locally built images, the cached Kafka jars and the Jaeger, SeaweedFS and Toxiproxy
binaries. Nothing is mocked and nothing is skipped: a missing component is an error that says how to
prepare it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import docker.errors
import pytest
from hypothesis import settings

from ops import process
from ops.paths import Paths
from ops.stack.seaweedfs import SeaweedServer
from ops.testing import (
    CONTAINER_LABEL,
    LEGACY_LABEL,
    JaegerProcess,
    KafkaContainer,
    SeaweedProcess,
    ToxiproxyProcess,
    leftover,
    use_stack_engine,
)

TESTS_ROOT = Path(__file__).parent

# Property tests check behaviour, not speed: a 2-core CI machine running Kafka and Docker beside them must
# not fail an example for taking longer than hypothesis' default 200 ms.
settings.register_profile("trialog", deadline=None)
settings.load_profile("trialog")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        kind = Path(str(item.fspath)).relative_to(TESTS_ROOT).parts[0]
        # A `gpu` test needs a GPU machine (vLLM): it is neither unit nor integration, so `make test`
        # (-m "unit or integration") leaves it out by selection, not by a skip; `-m gpu` runs it there.
        if kind in ("unit", "integration") and item.get_closest_marker("gpu") is None:
            item.add_marker(getattr(pytest.mark, kind))


@pytest.fixture
def closed_port() -> Iterator[Callable[[], int]]:
    """Gives loopback ports that refuse every connection until the test ends (`ops.process.closed_port`):
    "nothing listens there" stays true while other tests, in this process or a concurrent one, start
    servers on free ports."""
    with contextlib.ExitStack() as held:

        def one() -> int:
            return held.enter_context(process.closed_port())

        yield one


@pytest.fixture(scope="session")
def stack_paths() -> Paths:
    return Paths.from_env()


@pytest.fixture(scope="session")
def docker_client(stack_paths: Paths) -> Iterator[docker.DockerClient]:
    engine = use_stack_engine(stack_paths)
    client = engine.client()
    _remove_test_containers(client)
    yield client
    _remove_test_containers(client)
    client.close()


def _remove_test_containers(client: docker.DockerClient) -> None:
    """This session's containers and those left by sessions that are gone, never another session's."""
    for container in client.containers.list(all=True, filters={"label": CONTAINER_LABEL}):
        if leftover(container.labels):
            _remove(container)
    for container in client.containers.list(all=True, filters={"label": LEGACY_LABEL}):
        if container.status != "running":
            _remove(container)


def _remove(container: docker.models.containers.Container) -> None:
    # Another test session on the same engine (a second checkout) may remove it first (NotFound, or 409
    # "removal already in progress").
    with contextlib.suppress(docker.errors.APIError):
        container.remove(force=True)


@pytest.fixture(scope="session")
def kafka_container(docker_client: docker.DockerClient, stack_paths: Paths) -> Iterator[KafkaContainer]:
    container = KafkaContainer(stack_paths).start()
    yield container
    container.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_container: KafkaContainer) -> str:
    return kafka_container.bootstrap


@pytest.fixture(scope="session")
def jaeger_process(stack_paths: Paths) -> Iterator[JaegerProcess]:
    with JaegerProcess(stack_paths) as running:
        yield running


@pytest.fixture(scope="session")
def seaweedfs_server(stack_paths: Paths) -> Iterator[SeaweedServer]:
    """A real S3 server (SeaweedFS) on loopback with one empty bucket, `trialog-test`; tests share it, so
    each writes under its own key prefix."""
    with SeaweedProcess(stack_paths) as server:
        yield server


@pytest.fixture(scope="session")
def toxiproxy_process(stack_paths: Paths) -> Iterator[ToxiproxyProcess]:
    """One Toxiproxy server on loopback for the session; each test names its own proxies (a
    `KafkaCluster(..., proxy=...)` gives its proxies a name of their own and deletes them when stopped)."""
    with ToxiproxyProcess(stack_paths) as running:
        yield running
