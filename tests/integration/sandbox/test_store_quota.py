"""The per-episode store quota on real Docker sandboxes: an agent writing fresh random files at every step
(the cheapest way to fill an object store) is rolled back past the quota, and the grade is not erased."""

from __future__ import annotations

from pathlib import Path

import docker

from ops.stack.images import sandbox_ref
from sandbox_agent.docker_backend import DockerBackend
from sandbox_agent.idempotent import MemoryResultStore
from sandbox_agent.pool import WarmPools
from sandbox_agent.worker import SandboxWorker
from schemas.actions import RunCommand
from schemas.blobs import LocalObjectStore
from schemas.common import Producer
from schemas.events import StepExecuted
from schemas.origin import Origin, SequentialIds, SystemClock
from tests.integration.sandbox.conftest import TEST_LABELS
from tests.unit.sandbox.requests import sandbox_request

MIB = 1024 * 1024


def _store_bytes(root: Path) -> int:
    return sum(path.stat().st_size for path in root.rglob("*") if path.is_file())


def test_an_agent_filling_the_store_is_rolled_back_past_its_episodes_quota(
    docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    store = LocalObjectStore(tmp_path / "objects")
    backend = DockerBackend(docker_client, store, labels=TEST_LABELS)
    pools = WarmPools(backend, size=0)
    origin = Origin(Producer("sandbox", "quota"), SystemClock(), SequentialIds("quota"))
    worker = SandboxWorker(backend, pools, MemoryResultStore(), store, origin, store_quota_bytes=20 * MIB)
    try:
        snapshot: str | None = None
        answers: list[StepExecuted] = []
        for step in range(6):  # 8 MiB of fresh random bytes per step: 48 MiB asked, 20 MiB allowed
            command = f"head -c {8 * MIB} /dev/urandom > junk-{step}.bin && ls"
            request = sandbox_request(
                RunCommand(command), step=step, image=str(sandbox_ref()), snapshot_id=snapshot
            )
            answer = worker.handle(request)
            assert isinstance(answer, StepExecuted), answer
            answers.append(answer)
            snapshot = answer.meta.snapshot_id
        rolled = ["rolled back to before this step" in answer.stderr.text for answer in answers]
        assert rolled == [False, False, True, True, True, True]
        assert worker.quota.used("ep-1") == 16 * MIB
        referenced = {answer.meta.snapshot_id for answer in answers[1:]}
        assert len(referenced) == 1  # every refused step left the workspace of step 1
        check = sandbox_request(RunCommand("ls"), step=6, image=str(sandbox_ref()), snapshot_id=snapshot)
        listing = worker.handle(check)
        assert isinstance(listing, StepExecuted)
        assert listing.stdout.text.split() == ["junk-0.bin", "junk-1.bin"]
        # What the refused steps put is unreferenced: the store's clean-up can take it back.
        assert _store_bytes(store.root) > 16 * MIB
    finally:
        worker.close()
        pools.close()
