"""A snapshot's memory is bounded by its largest file, not by its workspace (real sandbox, real store).

Before (base 7d13a22) the fetched tar was held three times over (the stream's buffer, a copy of it, every
file's body taken out of it): a 64 MiB workspace of 8 MiB files peaked at 129 MiB of Python
allocations in the host's process. Now each file is hashed and stored as it streams in: about 26 MiB.
"""

from __future__ import annotations

import tracemalloc

import docker
import pytest

from sandbox_agent.docker_backend import SNAPSHOT_IN_FLIGHT_BYTES, DockerBackend
from sandbox_agent.limits import MIB, Quotas, SandboxSpec
from schemas.blobs import LocalObjectStore
from tests.integration.sandbox.conftest import docker_backend

pytestmark = pytest.mark.integration

FILES, FILE_MIB = 8, 8
# What may be live at once: the file being read (and its joined copy), the puts in flight, the stream's
# queue and the channel's buffers. The workspace itself (64 MiB) is well above it.
BOUND = 2 * FILE_MIB * MIB + SNAPSHOT_IN_FLIGHT_BYTES + 8 * MIB


@pytest.fixture
def backend(docker_client: docker.DockerClient, objects: LocalObjectStore) -> DockerBackend:
    return docker_backend(docker_client, objects)


def test_a_large_workspace_snapshot_keeps_memory_under_the_bound(
    backend: DockerBackend, sandbox_spec: SandboxSpec
) -> None:
    quotas = Quotas(memory_bytes=768 * MIB, pids=128, workspace_bytes=160 * MIB, tmp_bytes=32 * MIB)
    sandbox = backend.create(SandboxSpec(sandbox_spec.image, quotas))
    try:
        make = f"for i in $(seq {FILES}); do head -c {FILE_MIB}M /dev/urandom > f$i; done"
        assert backend.exec(sandbox, ["sh", "-c", make]).exit_code == 0
        tracemalloc.start()
        try:
            snapshot = backend.snapshot(sandbox)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        files = backend.snapshots.load(snapshot).files
        assert [entry.size for entry in files] == [FILE_MIB * MIB] * FILES  # all of it, hashed and stored
        assert all(backend.snapshots.objects.contains(entry.sha256) for entry in files)
        assert peak < BOUND, f"peak {peak / MIB:.0f} MiB, bound {BOUND / MIB:.0f} MiB"
    finally:
        backend.destroy(sandbox)
