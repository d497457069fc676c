"""Shared fixtures. Tests under tests/unit are marked `unit`, those under tests/integration `integration`.

Integration fixtures use the real components prepared by `trialog prepare` (which `make test` runs): the
Docker engine, the locally built images, the cached Kafka jars and the Jaeger binary. Nothing is mocked and
nothing is skipped: a missing component is an error that says how to prepare it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import docker
import docker.errors
import pytest

from ops.paths import Paths
from ops.testing import CONTAINER_LABEL, JaegerProcess, KafkaContainer, use_stack_engine

TESTS_ROOT = Path(__file__).parent
STRAY_AFTER_S = 3 * 3600.0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        kind = Path(str(item.fspath)).relative_to(TESTS_ROOT).parts[0]
        if kind in ("unit", "integration"):
            item.add_marker(getattr(pytest.mark, kind))


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
    """Remove the test containers left behind: stopped ones, and running ones older than STRAY_AFTER_S.
    A running one younger than that may belong to another test session on the same engine (a second
    checkout): removing it would kill that session's Kafka or sandboxes under it."""
    now = time.time()
    for container in client.containers.list(all=True, filters={"label": CONTAINER_LABEL}):
        # Another session may be removing it at the same time (NotFound, or 409 "already in progress").
        with contextlib.suppress(docker.errors.APIError):
            state = container.attrs.get("State", {})
            created = _unix_time(container.attrs.get("Created", ""))
            if state.get("Running") and now - created < STRAY_AFTER_S:
                continue
            container.remove(force=True)


def _unix_time(docker_time: str) -> float:
    """Docker's RFC 3339 time (nanoseconds, "Z") as seconds since the epoch; 0 when unreadable."""
    try:
        return datetime.fromisoformat(docker_time[:26].rstrip("Z") + "+00:00").timestamp()
    except ValueError:
        return 0.0


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
