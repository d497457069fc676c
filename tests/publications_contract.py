"""The contract every `Publications` source meets, run against the memory fake (unit) and Kafka
(integration): announcements come back once, in order, including other runs' (the watcher filters)."""

from __future__ import annotations

from collections.abc import Callable

from actors.rollout.weights import Publications
from schemas.blobs import BlobRef
from schemas.common import Producer, RecordMeta
from schemas.publications import PolicyPublished


def announcement(version: int, run_id: str = "run-c") -> PolicyPublished:
    meta = RecordMeta(f"pub-{run_id}-{version}", 1_700_000_000_000_000 + version, Producer("learner", "l0"))
    ref = BlobRef(f"{version:064x}", 100 + version)
    return PolicyPublished(meta, run_id, version, version - 1, f"sha256:{ref.sha256}", ref, 4)


def check_publications_contract(source: Publications, publish: Callable[[PolicyPublished], None]) -> None:
    assert source.poll() == []
    publish(announcement(1))
    publish(announcement(2))
    assert [p.version for p in source.poll()] == [1, 2]
    assert source.poll() == []  # each announcement is returned once
    publish(announcement(3))
    publish(announcement(1, run_id="other-run"))
    assert [(p.run_id, p.version) for p in source.poll()] == [("run-c", 3), ("other-run", 1)]
    assert source.poll() == []
