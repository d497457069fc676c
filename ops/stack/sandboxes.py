"""The Docker backend of the local stack: its engine, the default sandbox image, the stack's object store."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from ops.paths import Paths
from ops.stack import docker_engine, images
from ops.stores import open_objects
from sandbox_agent.docker_backend import DockerBackend
from schemas.blobs import ObjectStore


@contextmanager
def stack_backend(
    paths: Paths, labels: Mapping[str, str] | None = None, objects: ObjectStore | None = None
) -> Iterator[DockerBackend]:
    """A DockerBackend on the stack's engine, snapshotting into `objects` (default: the stack's store,
    `ops.stores`)."""
    client = docker_engine.require(paths).client()
    try:
        yield DockerBackend(client, objects or open_objects(paths=paths), labels=labels)
    finally:
        client.close()


def default_image() -> str:
    return str(images.sandbox_ref())
