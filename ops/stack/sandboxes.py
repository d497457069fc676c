"""The Docker backend of the local stack: its engine, the default sandbox image, the stack's object store."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from ops.paths import Paths
from ops.stack import docker_engine, images
from sandbox_agent.docker_backend import DockerBackend
from schemas.blobs import LocalObjectStore, ObjectStore


@contextmanager
def stack_backend(
    paths: Paths, labels: Mapping[str, str] | None = None, objects: ObjectStore | None = None
) -> Iterator[DockerBackend]:
    """A DockerBackend on the stack's engine, snapshotting into `objects` (default: the stack's store)."""
    client = docker_engine.require(paths).client()
    try:
        yield DockerBackend(client, objects or LocalObjectStore(paths.objects), labels=labels)
    finally:
        client.close()


def default_image() -> str:
    return str(images.sandbox_ref())
