"""The sandbox worker's logic on the local process backend (the Kafka loop is tested in integration)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_agent.idempotent import ExecKey, MemoryResultStore
from sandbox_agent.local_backend import LocalProcessBackend
from sandbox_agent.pool import WarmPools
from sandbox_agent.worker import SandboxWorker
from schemas.actions import ApplyPatch, RunCommand, WriteFile
from schemas.blobs import MemoryObjectStore
from schemas.codec import default_codec
from schemas.common import FailureClass, Producer
from schemas.events import EpisodeFailed, StepExecuted
from schemas.origin import FixedClock, Origin, SequentialIds
from tests.unit.sandbox.requests import sandbox_request


class Cluster:
    """Workers sharing one object store, each with its own backend, pool and record of steps."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.objects = MemoryObjectStore()
        self.workers: list[SandboxWorker] = []
        self.pools: list[WarmPools] = []

    def worker(self, name: str, max_episodes: int = 8) -> SandboxWorker:
        backend = LocalProcessBackend(self.objects, self.root / name)
        pools = WarmPools(backend, size=1)
        origin = Origin(Producer("sandbox", name), FixedClock(), SequentialIds(name))
        worker = SandboxWorker(backend, pools, MemoryResultStore(), self.objects, origin, max_episodes)
        self.workers.append(worker)
        self.pools.append(pools)
        return worker

    def close(self) -> None:
        for worker in self.workers:
            worker.close()
        for pools in self.pools:
            pools.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    made = Cluster(tmp_path)
    yield made
    made.close()


def test_an_answer_echoes_the_request_and_carries_the_new_snapshot(cluster: Cluster) -> None:
    request = sandbox_request(RunCommand("echo hello; echo oops >&2; exit 4"), step=0, attempt=2)
    answer = cluster.worker("a").handle(request)
    assert (answer.exit_code, answer.stdout.text, answer.stderr.text) == (4, "hello\n", "oops\n")
    assert answer.stdout.total_bytes == 6 and not answer.stdout.truncated
    meta, asked = answer.meta, request.meta
    assert (meta.episode_id, meta.step, meta.attempt, meta.prev_hash) == (
        asked.episode_id, asked.step, asked.attempt, asked.prev_hash,
    )  # fmt: skip
    assert meta.producer == Producer("sandbox", "a") and meta.event_id != asked.event_id
    assert meta.snapshot_id is not None and meta.snapshot_id.startswith("snap-")
    assert default_codec().decode_as(default_codec().encode(answer), StepExecuted) == answer


def test_a_redelivered_request_is_answered_without_running_again(cluster: Cluster) -> None:
    worker = cluster.worker("a")
    request = sandbox_request(RunCommand("echo ran >> log; wc -l < log"))
    first, again = worker.handle(request), worker.handle(request)
    assert first.stdout.text.strip() == again.stdout.text.strip() == "1"
    assert first.meta.snapshot_id == again.meta.snapshot_id


def test_an_episode_continues_on_another_worker_from_its_last_snapshot(cluster: Cluster) -> None:
    first_worker, second_worker = cluster.worker("a"), cluster.worker("b")
    step0 = first_worker.handle(sandbox_request(WriteFile("notes/plan.txt", b"step zero\n"), step=0))
    assert step0.exit_code == 0
    first_worker.close()  # the first worker is gone, with its sandbox
    step1 = second_worker.handle(
        sandbox_request(RunCommand("cat notes/plan.txt"), step=1, snapshot_id=step0.meta.snapshot_id)
    )
    assert step1.stdout.text == "step zero\n"


def test_a_retried_step_starts_again_from_the_previous_snapshot(cluster: Cluster) -> None:
    worker = cluster.worker("a")
    step0 = worker.handle(sandbox_request(RunCommand("echo base > f"), step=0))
    worker.handle(
        sandbox_request(RunCommand("echo attempt1 >> f"), step=1, snapshot_id=step0.meta.snapshot_id)
    )
    # The owner gave up on attempt 1 (say, its answer was lost) and retries from the snapshot after step 0.
    retry = worker.handle(
        sandbox_request(
            RunCommand("echo attempt2 >> f; cat f"), step=1, attempt=2, snapshot_id=step0.meta.snapshot_id
        )
    )
    assert retry.stdout.text == "base\nattempt2\n"


def test_a_lost_sandbox_is_answered_as_a_crash_and_the_next_attempt_restores_the_snapshot(
    cluster: Cluster,
) -> None:
    worker = cluster.worker("a")
    step0 = worker.handle(sandbox_request(RunCommand("echo kept > f"), step=0))
    assert isinstance(step0, StepExecuted)
    held = worker.sandboxes._held["ep-1"].sandbox
    worker.sandboxes.backend.destroy(held)  # lost behind the worker's back (host crash, OOM of the engine)
    request = sandbox_request(RunCommand("cat f"), step=1, snapshot_id=step0.meta.snapshot_id)
    crash = worker.handle(request)
    assert isinstance(crash, EpisodeFailed) and crash.failure is FailureClass.SANDBOX_CRASH
    assert (crash.meta.step, crash.meta.attempt, crash.meta.prev_hash) == (1, 1, request.meta.prev_hash)
    again = worker.handle(request)  # redelivered: the same answer, nothing run
    assert isinstance(again, EpisodeFailed) and again.reason == crash.reason
    retry = worker.handle(dataclasses.replace(request, meta=dataclasses.replace(request.meta, attempt=2)))
    assert isinstance(retry, StepExecuted) and retry.stdout.text == "kept\n"


def test_a_redelivered_crash_is_not_run_again(cluster: Cluster) -> None:
    worker = cluster.worker("a")
    request = sandbox_request(RunCommand("echo ran >> log"))
    worker.crashes[ExecKey("ep-1", 0, 1)] = "sandbox lost: killed"
    answer = worker.handle(request)
    assert isinstance(answer, EpisodeFailed) and answer.reason == "sandbox lost: killed"
    assert "ep-1" not in worker.sandboxes._held  # nothing ran


def test_writing_outside_the_workspace_fails_the_episode_as_an_invalid_action(cluster: Cluster) -> None:
    answer = cluster.worker("a").handle(sandbox_request(WriteFile("../../etc/passwd", b"x")))
    assert isinstance(answer, EpisodeFailed) and answer.failure is FailureClass.INVALID_ACTION
    assert "refused" in answer.reason and answer.meta.step == 0
    assert default_codec().decode_as(default_codec().encode(answer), EpisodeFailed) == answer


def test_a_patch_that_does_not_apply_is_an_invalid_action_one_that_applies_a_step(cluster: Cluster) -> None:
    worker = cluster.worker("a")
    step0 = worker.handle(sandbox_request(RunCommand("printf 'a\\nb\\n' > f && git init -q ."), step=0))
    assert isinstance(step0, StepExecuted) and step0.exit_code == 0
    good = "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n"
    applied = worker.handle(sandbox_request(ApplyPatch(good), step=1, snapshot_id=step0.meta.snapshot_id))
    assert isinstance(applied, StepExecuted) and applied.exit_code == 0
    bad = "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n x\n-y\n+z\n"
    refused = worker.handle(sandbox_request(ApplyPatch(bad), step=2, snapshot_id=applied.meta.snapshot_id))
    assert isinstance(refused, EpisodeFailed) and refused.failure is FailureClass.INVALID_ACTION
    assert "does not apply" in refused.reason


def test_large_payloads_come_from_the_object_store(cluster: Cluster) -> None:
    content = b"x" * 200_000
    ref = cluster.objects.put(content)
    worker = cluster.worker("a")
    step0 = worker.handle(sandbox_request(WriteFile("big.bin", ref), step=0))
    step1 = worker.handle(
        sandbox_request(RunCommand("wc -c < big.bin"), step=1, snapshot_id=step0.meta.snapshot_id)
    )
    assert step1.stdout.text.strip() == "200000"


def test_output_is_bounded_by_the_request(cluster: Cluster) -> None:
    answer = cluster.worker("a").handle(sandbox_request(RunCommand("seq 1 100000"), output_limit=100))
    assert answer.stdout.truncated and answer.stdout.total_bytes == 588895
    assert len(answer.stdout.text) < 200 and answer.stdout.text.endswith("100000\n")


def test_the_least_recently_used_episode_gives_its_sandbox_back(cluster: Cluster) -> None:
    worker = cluster.worker("a", max_episodes=1)
    worker.handle(sandbox_request(RunCommand("true"), episode="ep-1"))
    first = worker.sandboxes._held["ep-1"].sandbox
    worker.handle(sandbox_request(RunCommand("true"), episode="ep-2"))
    assert list(worker.sandboxes._held) == ["ep-2"]
    cluster.pools[0].close()  # waits for released sandboxes to be destroyed
    assert not (cluster.root / "a" / first.id).exists()


def test_an_ended_episode_releases_its_sandbox_and_forgets_its_steps(cluster: Cluster) -> None:
    worker = cluster.worker("a")
    ended = sandbox_request(RunCommand("echo ran >> log; wc -l < log"), episode="ep-done")
    running = sandbox_request(RunCommand("echo ran >> log; wc -l < log"), episode="ep-running")
    worker.handle(ended)
    worker.handle(running)
    results = worker.executor.results
    assert len(results) == 2
    worker.episode_ended("ep-done")
    assert results.get(ExecKey("ep-done", 0, 1)) is None
    assert results.get(ExecKey("ep-running", 0, 1)) is not None
    assert worker.sandboxes.episodes() == ["ep-running"]
    # A late redelivery runs again, in a fresh sandbox (the owner drops that answer of an ended episode).
    again = worker.handle(ended)
    assert isinstance(again, StepExecuted) and again.stdout.text.strip() == "1"


def test_a_step_past_the_episodes_store_quota_is_rolled_back_and_says_so(tmp_path: Path) -> None:
    """An agent that writes fresh bytes at every step would fill the object store: past the per-episode
    quota its step's files are not kept (the workspace is the one before the step) and stderr says why."""
    objects = MemoryObjectStore()
    backend = LocalProcessBackend(objects, tmp_path / "w")
    pools = WarmPools(backend, size=1)
    origin = Origin(Producer("sandbox", "w"), FixedClock(), SequentialIds("w"))
    worker = SandboxWorker(backend, pools, MemoryResultStore(), objects, origin, store_quota_bytes=300_000)
    try:
        write = "head -c 120000 /dev/urandom > blob-$STEP && ls"
        snapshot: str | None = None
        answers = []
        for step in range(4):
            request = sandbox_request(RunCommand(write.replace("$STEP", str(step))), step=step)
            request = dataclasses.replace(
                request, meta=dataclasses.replace(request.meta, snapshot_id=snapshot)
            )
            answer = worker.handle(request)
            assert isinstance(answer, StepExecuted)
            answers.append(answer)
            snapshot = answer.meta.snapshot_id
        kept, refused = answers[:2], answers[2:]
        assert all("quota" not in a.stderr.text for a in kept)
        assert all("over its quota of 0.3 MiB" in a.stderr.text for a in refused)
        assert all("rolled back to before this step" in a.stderr.text for a in refused)
        assert refused[0].meta.snapshot_id == refused[1].meta.snapshot_id == kept[1].meta.snapshot_id
        assert worker.quota.used("ep-1") == 240_000
        # The workspace really is the one before: the next step sees blob-0 and blob-1 only.
        ls = sandbox_request(RunCommand("ls"), step=4, snapshot_id=snapshot)
        listing = worker.handle(ls)
        assert isinstance(listing, StepExecuted) and listing.stdout.text.split() == ["blob-0", "blob-1"]
        # A redelivered refused step is answered as it was recorded (rolled back), not run again.
        again = worker.handle(
            dataclasses.replace(
                sandbox_request(RunCommand(write.replace("$STEP", "2")), step=2),
                meta=dataclasses.replace(refused[0].meta, snapshot_id=kept[1].meta.snapshot_id),
            )
        )
        assert isinstance(again, StepExecuted) and again.meta.snapshot_id == refused[0].meta.snapshot_id
        worker.episode_ended("ep-1")
        assert worker.quota.used("ep-1") == 0
    finally:
        worker.close()
        pools.close()
