"""Requests as an episode's owner issues them, and fixed origins, for the actor tests."""

from __future__ import annotations

from schemas.common import EventMeta, Producer
from schemas.origin import FixedClock, Origin, SequentialIds
from schemas.requests import PolicyRequest, ResourceLimits, SamplingParams, VerifyRequest

SNAPSHOT = f"snap-{'ab' * 32}-120"


def fixed_origin(kind: str = "rollout", instance: str = "w0") -> Origin:
    return Origin(Producer(kind, instance), FixedClock(), SequentialIds(instance))


def request_meta(
    *,
    episode: str = "ep-1",
    task_id: str = "task-1",
    task_version: str = "v1",
    step: int = 0,
    attempt: int = 1,
    snapshot_id: str | None = None,
) -> EventMeta:
    return EventMeta(
        event_id=f"req-{episode}-{step}-{attempt}",
        occurred_at_us=1_700_000_000_000_000 + step,
        producer=Producer("streams", "streams-0"),
        run_id="run-test",
        episode_id=episode,
        task_id=task_id,
        task_version=task_version,
        step=step,
        attempt=attempt,
        policy_version=3,
        snapshot_id=snapshot_id,
        prev_hash=f"{step + 1:064x}",
        traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    )


def policy_request(
    *, seed: int = 7, instruction: str = "Fix it.", meta: EventMeta | None = None
) -> PolicyRequest:
    return PolicyRequest(meta or request_meta(), instruction, (), SamplingParams(seed=seed))


def verify_request(meta: EventMeta | None = None, *, image: str = "sandbox-image") -> VerifyRequest:
    limits = ResourceLimits(cpus=1.0, memory_mb=512, pids=128, disk_mb=64)
    return VerifyRequest(meta or request_meta(snapshot_id=SNAPSHOT), image, 30.0, limits)
