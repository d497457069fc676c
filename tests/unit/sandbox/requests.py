"""Sandbox requests as an episode's owner issues them, for worker tests."""

from __future__ import annotations

from schemas.actions import SandboxAction
from schemas.common import EventMeta, Producer
from schemas.requests import ResourceLimits, SandboxRequest


def sandbox_request(
    action: SandboxAction,
    *,
    episode: str = "ep-1",
    step: int = 0,
    attempt: int = 1,
    snapshot_id: str | None = None,
    image: str = "local",
    timeout_s: float = 30.0,
    output_limit: int = 4096,
) -> SandboxRequest:
    meta = EventMeta(
        event_id=f"req-{episode}-{step}-{attempt}",
        occurred_at_us=1_700_000_000_000_000 + step,
        producer=Producer("streams", "streams-0"),
        run_id="run-test",
        episode_id=episode,
        task_id="task-1",
        task_version="v1",
        step=step,
        attempt=attempt,
        policy_version=3,
        snapshot_id=snapshot_id,
        prev_hash=f"{step:064x}",
        traceparent=None,
    )
    limits = ResourceLimits(cpus=1.0, memory_mb=512, pids=128, disk_mb=64)
    return SandboxRequest(meta, image, action, timeout_s, output_limit, limits)
