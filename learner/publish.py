"""Publishing a policy version: its weights into the object store, a `PolicyPublished` on `policy.versions`.

The weights are a safetensors file (tensors sorted by name, so the same tensors give the same bytes),
stored by content (sha256). The learner's order is: train, put the weights, checkpoint (with the
announcement inside), announce. A learner that dies after its checkpoint but before the announcement sends
the checkpointed announcement when it restarts, unless `policy.versions` already holds that version:
the same version is never announced with two different weights, and never twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import torch
from safetensors.torch import save as safetensors_save

from schemas.blobs import OCTET_STREAM, BlobRef, Locating, ObjectStore
from schemas.origin import Origin
from schemas.publications import PolicyPublished

SAFETENSORS = OCTET_STREAM  # BlobRef media types are free text; safetensors has no registered type


class Announcer(Protocol):
    """Where announcements go (`policy.versions`), and what is there already."""

    def announced_versions(self, run_id: str) -> set[int]:
        """The versions already announced for `run_id` (read to the end of the topic)."""
        ...

    def announce(self, published: PolicyPublished) -> None: ...


class MemoryAnnouncer:
    def __init__(self) -> None:
        self.published: list[PolicyPublished] = []

    def announced_versions(self, run_id: str) -> set[int]:
        return {p.version for p in self.published if p.run_id == run_id}

    def announce(self, published: PolicyPublished) -> None:
        self.published.append(published)


def weights_bytes(tensors: Mapping[str, torch.Tensor]) -> bytes:
    ordered = {name: tensors[name].detach().contiguous().cpu() for name in sorted(tensors)}
    data: bytes = safetensors_save(ordered, metadata={"format": "pt"})
    return data


def blob_uri(store: ObjectStore, ref: BlobRef) -> str:
    """Where the blob is: its file in a local store, its key in an S3 one, else a content address."""
    if isinstance(store, Locating):
        return store.uri_of(ref)
    return f"sha256:{ref.sha256}"


def store_weights(
    store: ObjectStore,
    tensors: Mapping[str, torch.Tensor],
    *,
    origin: Origin,
    run_id: str,
    version: int,
    trajectories: int,
) -> PolicyPublished:
    """Put the weights of `version` in the store; the announcement to checkpoint, then send."""
    ref = store.put(weights_bytes(tensors), SAFETENSORS)
    return PolicyPublished(
        meta=origin.record_meta(),
        run_id=run_id,
        version=version,
        base_version=version - 1,
        weights_uri=blob_uri(store, ref),
        weights=ref,
        trajectories=trajectories,
    )


def announce_once(announcer: Announcer, published: PolicyPublished, store: ObjectStore) -> bool:
    """Announce `published` unless its version already is; True when it was sent now.

    The weights must be in the store (they were put before the checkpoint); a missing blob is an error,
    not something to announce."""
    if published.version in announcer.announced_versions(published.run_id):
        return False
    if not store.contains(published.weights.sha256, published.weights.media_type):
        raise FileNotFoundError(
            f"weights of version {published.version} ({published.weights.sha256}) missing"
        )
    announcer.announce(published)
    return True
