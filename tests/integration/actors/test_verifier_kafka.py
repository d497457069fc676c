"""The verifier end to end: final workspaces snapshotted in real Docker sandboxes, graded via real Kafka."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from kafka import KafkaProducer

from actors.tasks.spec import Task, load_task
from actors.tasks.verify import task_quotas
from actors.verifier.grading import SnapshotGrader
from actors.verifier.tasks import FolderTasks
from actors.verifier.worker import ROUTE, VerifierWorker
from ops.paths import REPO_ROOT
from ops.stack.images import sandbox_ref
from ops.testing import owned_labels
from sandbox_agent.docker_backend import DockerBackend
from sandbox_agent.hosttree import read_tree
from sandbox_agent.limits import SandboxSpec
from schemas.blobs import LocalObjectStore
from schemas.common import Producer, Verdict
from schemas.events import RewardAssigned
from schemas.origin import Origin, SequentialIds, SystemClock
from schemas.topics import VERIFY_REQUESTS
from streams.kafka.request_loop import LoopSettings, RequestLoop
from tests.integration.actors.kafka_helpers import CODEC, new_run, next_records, reading
from tests.unit.actors.requests import request_meta, verify_request

EXAMPLE = REPO_ROOT / "examples" / "tasks" / "easy-fix-range"
PROTECTED = REPO_ROOT / "examples" / "tasks" / "word-count"  # protects tests/**


def _files(root: Path) -> dict[str, bytes]:
    manifest, contents = read_tree(root)
    return {entry.path: contents[entry.sha256] for entry in manifest.files}


@pytest.fixture
def backend(docker_client: docker.DockerClient, tmp_path: Path) -> DockerBackend:
    return DockerBackend(
        docker_client, LocalObjectStore(tmp_path / "objects"), labels=owned_labels("verifier")
    )


@pytest.fixture
def snapshots(backend: DockerBackend, tmp_path: Path) -> tuple[str, str]:
    """(unsolved, solved): the task's repo in a sandbox, snapshotted before and after the solution."""
    task = load_task(EXAMPLE)
    sandbox = backend.create(SandboxSpec(str(sandbox_ref()), task_quotas(task)))
    try:
        backend.write_files(sandbox, _files(task.copy_repo(tmp_path / "unsolved")))
        unsolved = backend.snapshot(sandbox)
        backend.write_files(sandbox, _files(task.copy_repo(tmp_path / "solved", solved=True)))
        solved = backend.snapshot(sandbox)
    finally:
        backend.destroy(sandbox)
    assert unsolved != solved
    return str(unsolved), str(solved)


@pytest.fixture
def verifier(kafka_bootstrap: str, backend: DockerBackend, tmp_path: Path) -> Iterator[str]:
    """A verifier serving a fresh run in a thread; yields the run's prefix."""
    run = new_run(kafka_bootstrap, "ver")
    objects = LocalObjectStore(tmp_path / "objects")
    origin = Origin(Producer("verifier", "v1"), SystemClock(), SequentialIds("v1"))
    grader = SnapshotGrader(backend, objects, str(sandbox_ref()))
    worker = VerifierWorker(FolderTasks([EXAMPLE, PROTECTED]), grader, objects, origin)
    settings = LoopSettings(kafka_bootstrap, f"{run}-verifier", run, poll_timeout_ms=200)
    loop = RequestLoop(ROUTE, worker.handle, settings, origin)
    thread = threading.Thread(target=loop.run, name="verifier", daemon=True)
    thread.start()
    yield run
    loop.stopping.set()
    thread.join(timeout=30)


def test_solved_and_unsolved_snapshots_are_graded_through_kafka(
    kafka_bootstrap: str, verifier: str, snapshots: tuple[str, str]
) -> None:
    task: Task = load_task(EXAMPLE)
    unsolved, solved = snapshots
    requests = {
        b"ep-solved": verify_request(
            request_meta(
                episode="ep-solved", task_id=task.id, task_version=task.version, step=2, snapshot_id=solved
            ),
            image=str(sandbox_ref()),
        ),
        b"ep-unsolved": verify_request(
            request_meta(
                episode="ep-unsolved",
                task_id=task.id,
                task_version=task.version,
                step=5,
                snapshot_id=unsolved,
            ),
            image=str(sandbox_ref()),
        ),
        b"ep-stale": verify_request(
            request_meta(episode="ep-stale", task_id=task.id, task_version="0" * 64, snapshot_id=solved),
            image=str(sandbox_ref()),
        ),
    }
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    try:
        with reading(kafka_bootstrap, verifier, "verify.results") as answers:
            for key, request in requests.items():
                producer.send(VERIFY_REQUESTS.of(verifier), key=key, value=CODEC.encode(request)).get(30)
            records = next_records(answers, 3, timeout_s=120)
    finally:
        producer.close()
    graded: dict[bytes, RewardAssigned] = {}
    for record in records:
        answer = CODEC.decode(record.value)
        assert isinstance(answer, RewardAssigned)
        graded[record.key] = answer
    assert set(graded) == set(requests)
    for key, answer in graded.items():
        meta, asked = answer.meta, requests[key].meta
        assert (meta.episode_id, meta.step, meta.attempt) == (asked.episode_id, asked.step, asked.attempt)
        assert (meta.prev_hash, meta.snapshot_id) == (asked.prev_hash, asked.snapshot_id)
    good, bad, stale = graded[b"ep-solved"], graded[b"ep-unsolved"], graded[b"ep-stale"]
    assert (good.verdict, good.reward, good.passed) == (Verdict.PASS, 1.0, good.total)
    assert good.total == len(task.test_ids) and good.failed_tests == ()
    assert bad.reward < 1.0 and bad.verdict in (Verdict.FAIL, Verdict.PARTIAL) and bad.failed_tests
    assert bad.tampered_paths == ()
    assert (stale.verdict, stale.reward) == (Verdict.ERROR, 0.0)


def test_a_protected_file_with_a_non_utf8_name_is_graded_tampered_through_kafka(
    kafka_bootstrap: str, verifier: str, backend: DockerBackend, tmp_path: Path
) -> None:
    """The name travels sandbox -> snapshot -> host tree -> grade -> Avro: the -1.0 must reach
    verify.results (an answer that cannot be encoded would be dead-lettered, and the tamper erased)."""
    task = load_task(PROTECTED)
    planted = os.fsdecode(b"tests/\xff.py")
    sandbox = backend.create(SandboxSpec(str(sandbox_ref()), task_quotas(task)))
    try:
        files = _files(task.copy_repo(tmp_path / "solved", solved=True))
        backend.write_files(sandbox, {**files, planted: b"def test_forged():\n    pass\n"})
        snapshot = str(backend.snapshot(sandbox))
    finally:
        backend.destroy(sandbox)
    request = verify_request(
        request_meta(episode="ep-tamper", task_id=task.id, task_version=task.version, snapshot_id=snapshot),
        image=str(sandbox_ref()),
    )
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    try:
        with reading(kafka_bootstrap, verifier, "verify.results") as answers:
            producer.send(VERIFY_REQUESTS.of(verifier), key=b"ep-tamper", value=CODEC.encode(request)).get(30)
            (record,) = next_records(answers, 1, timeout_s=120)
    finally:
        producer.close()
    answer = CODEC.decode(record.value)
    assert isinstance(answer, RewardAssigned)
    assert (answer.verdict, answer.reward) == (Verdict.TAMPERED, -1.0)
    assert answer.tampered_paths == (planted,)
    assert os.fsencode(answer.tampered_paths[0]) == b"tests/\xff.py"
