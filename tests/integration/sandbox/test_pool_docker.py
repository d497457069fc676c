"""Warm pools on real Docker: a spec no longer used keeps no containers."""

from __future__ import annotations

import time

import docker

from sandbox_agent.docker_backend import DockerBackend
from sandbox_agent.limits import SandboxSpec
from sandbox_agent.pool import WarmPools
from schemas.blobs import LocalObjectStore
from tests.integration.sandbox.conftest import TEST_LABELS


def containers_of(client: docker.DockerClient, run: str) -> list[str]:
    # The low-level list: `containers.list` inspects each container after listing, and one the pool
    # removes in between would raise NotFound.
    found = client.api.containers(all=True, filters={"label": f"dev.trialog.pool-test={run}"})
    return [str(c["Id"]) for c in found]


def test_an_idle_pool_is_closed_and_its_warm_containers_removed(
    docker_client: docker.DockerClient, sandbox_spec: SandboxSpec, objects: LocalObjectStore
) -> None:
    run = f"idle-{time.monotonic_ns()}"
    backend = DockerBackend(docker_client, objects, labels={**TEST_LABELS, "dev.trialog.pool-test": run})
    pools = WarmPools(backend, size=2, idle_s=2.0)
    try:
        pool = pools.pool(sandbox_spec)
        assert pool.wait_ready(timeout_s=120)
        assert len(containers_of(docker_client, run)) == 2
        give_up = time.monotonic() + 60
        while containers_of(docker_client, run) and time.monotonic() < give_up:
            time.sleep(0.5)
        assert containers_of(docker_client, run) == []
        assert pools.specs() == []
        used_again = pools.acquire(sandbox_spec)  # a later use of the spec is served by a new pool
        assert used_again.id in containers_of(docker_client, run)
        pools.release(used_again)
    finally:
        pools.close()
    assert containers_of(docker_client, run) == []
