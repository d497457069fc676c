"""Fresh sandboxes for the audit side (`audit --recheck`, `reproduce`), and the store they write into.

They run on the local stack's Docker engine, labelled so that they can be told apart from a run's own.
What a re-execution snapshots goes to an `OverlayStore`: read through to the audited store, written to
memory, so that auditing a run never adds to (or changes) the store it audits.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ops.paths import Paths
from sandbox_agent.docker_backend import DockerBackend
from schemas.blobs import OCTET_STREAM, BlobRef, MemoryObjectStore, ObjectStore

AUDIT_LABEL = "dev.trialog.audit"


class OverlayStore:
    """Reads `base`, then what was put here; writes only here."""

    def __init__(self, base: ObjectStore) -> None:
        self.base = base
        self.scratch = MemoryObjectStore()

    def put(self, data: bytes, media_type: str = OCTET_STREAM) -> BlobRef:
        if self.base.contains(BlobRef.of(data).sha256, media_type):
            return BlobRef.of(data, media_type)
        return self.scratch.put(data, media_type)

    def get(self, ref: BlobRef) -> bytes:
        if self.scratch.contains(ref.sha256, ref.media_type):
            return self.scratch.get(ref)
        return self.base.get(ref)

    def contains(self, sha256: str, media_type: str = OCTET_STREAM) -> bool:
        return self.scratch.contains(sha256, media_type) or self.base.contains(sha256, media_type)


@contextmanager
def audit_backend(objects: ObjectStore, paths: Paths | None = None) -> Iterator[DockerBackend]:
    """A DockerBackend on the stack's engine whose snapshots go to `objects`, labelled as the audit's."""
    from ops.stack.sandboxes import stack_backend

    with stack_backend(paths or Paths.from_env(), labels={AUDIT_LABEL: "1"}, objects=objects) as backend:
        yield backend


def default_image() -> str:
    from ops.stack.sandboxes import default_image as stack_image

    return stack_image()
