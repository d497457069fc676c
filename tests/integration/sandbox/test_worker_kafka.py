"""`trialog worker sandbox` end to end: requests through Kafka, steps in Docker sandboxes, answers back.

An episode starts on one worker, that worker crashes (its sandboxes vanish with it), and the episode
continues on another worker of the same consumer group from its last snapshot.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from kafka import KafkaConsumer, KafkaProducer

from ops.stack.images import sandbox_ref
from sandbox_agent.docker_backend import DockerBackend
from sandbox_agent.idempotent import RocksResultStore
from sandbox_agent.pool import WarmPools
from sandbox_agent.worker import ROUTE, SandboxWorker
from schemas.actions import ApplyPatch, RunCommand, WriteFile
from schemas.blobs import LocalObjectStore
from schemas.codec import default_codec
from schemas.common import FailureClass, Producer
from schemas.deadletter import DeadLetter
from schemas.events import EpisodeFailed, StepExecuted
from schemas.origin import Origin, SequentialIds, SystemClock
from schemas.requests import SandboxRequest
from schemas.topics import DEADLETTER, SANDBOX_REQUESTS, SANDBOX_RESULTS
from streams.kafka.request_loop import LoopSettings, RequestLoop
from streams.kafka.serving import METADATA_MAX_AGE_MS
from streams.kafka.topics import ensure_topics
from tests.integration.sandbox.conftest import TEST_LABELS
from tests.unit.sandbox.requests import sandbox_request

CODEC = default_codec()


class RunningWorker:
    def __init__(
        self, name: str, client: docker.DockerClient, objects: Path, state: Path, settings: LoopSettings
    ):
        store = LocalObjectStore(objects)
        self.backend = DockerBackend(client, store, labels={**TEST_LABELS, "dev.trialog.worker": name})
        self.pools = WarmPools(self.backend, size=1)
        self.results = RocksResultStore(state)
        origin = Origin(Producer("sandbox", name), SystemClock(), SequentialIds(name))
        self.worker = SandboxWorker(self.backend, self.pools, self.results, store, origin)
        self.loop = RequestLoop(ROUTE, self.worker.handle, settings, origin)
        self.thread = threading.Thread(target=self.loop.run, name=f"worker-{name}", daemon=True)
        self.thread.start()

    def crash(self, client: docker.DockerClient, name: str) -> None:
        """Stop serving, and lose every sandbox this worker had, as a dead host would."""
        self.loop.stopping.set()
        self.thread.join(timeout=30)
        for container in client.containers.list(all=True, filters={"label": f"dev.trialog.worker={name}"}):
            container.remove(force=True)
        self.pools.close()
        self.results.close()

    def stop(self) -> None:
        self.loop.stopping.set()
        self.thread.join(timeout=30)
        self.worker.close()
        self.pools.close()
        self.results.close()


@pytest.fixture
def run_prefix(kafka_bootstrap: str) -> str:
    run = f"sbx{uuid.uuid4().hex[:6]}"
    ensure_topics(kafka_bootstrap, run)
    return run


@pytest.fixture
def answers(kafka_bootstrap: str, run_prefix: str) -> Iterator[KafkaConsumer]:
    consumer = KafkaConsumer(
        SANDBOX_RESULTS.of(run_prefix),
        DEADLETTER.of(run_prefix),
        bootstrap_servers=kafka_bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        metadata_max_age_ms=METADATA_MAX_AGE_MS,  # a topic missed at subscription is picked up soon
    )
    yield consumer
    consumer.close()


def next_record(consumer: KafkaConsumer, timeout_s: float = 60.0) -> object:
    give_up = time.monotonic() + timeout_s
    while time.monotonic() < give_up:
        for records in consumer.poll(timeout_ms=200, max_records=1).values():
            return CODEC.decode(records[0].value)
    raise AssertionError("no answer within the timeout")


def test_an_episode_survives_its_worker(
    docker_client: docker.DockerClient,
    kafka_bootstrap: str,
    run_prefix: str,
    answers: KafkaConsumer,
    tmp_path: Path,
) -> None:
    image = str(sandbox_ref())
    settings = LoopSettings(kafka_bootstrap, f"{run_prefix}-sandbox", run_prefix, poll_timeout_ms=200)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    requests = SANDBOX_REQUESTS.of(run_prefix)

    def ask(request: SandboxRequest) -> None:
        producer.send(requests, key=b"ep-k", value=CODEC.encode(request)).get(30)

    first = RunningWorker("w1", docker_client, tmp_path / "objects", tmp_path / "w1", settings)
    step0 = sandbox_request(WriteFile("src/app.py", b"print('v1')\n"), episode="ep-k", image=image)
    ask(step0)
    answer0 = next_record(answers)
    assert isinstance(answer0, StepExecuted) and answer0.exit_code == 0
    count = sandbox_request(
        RunCommand("echo ran >> .log; wc -l < .log"), episode="ep-k", step=1, image=image,
        snapshot_id=answer0.meta.snapshot_id,
    )  # fmt: skip
    ask(count)
    ask(count)  # delivered twice
    answer1, again = next_record(answers), next_record(answers)
    assert isinstance(answer1, StepExecuted) and isinstance(again, StepExecuted)
    assert answer1.stdout.text == again.stdout.text == "1\n"  # ran once
    assert again.meta.snapshot_id == answer1.meta.snapshot_id

    first.crash(docker_client, "w1")
    second = RunningWorker("w2", docker_client, tmp_path / "objects", tmp_path / "w2", settings)
    try:
        ask(sandbox_request(
            RunCommand("cat src/app.py .log"), episode="ep-k", step=2, image=image,
            snapshot_id=answer1.meta.snapshot_id,
        ))  # fmt: skip
        answer2 = next_record(answers, timeout_s=90)
        assert isinstance(answer2, StepExecuted)
        assert answer2.stdout.text == "print('v1')\nran\n" and answer2.meta.producer.instance == "w2"

        producer.send(requests, key=b"ep-k", value=b"not a record").get(30)
        letter = next_record(answers)
        assert isinstance(letter, DeadLetter) and letter.value == b"not a record"

        # A patch that does not apply is answered, not dead-lettered: the episode fails as invalid_action.
        ask(sandbox_request(
            ApplyPatch("--- a/src/gone.py\n+++ b/src/gone.py\n@@ -1 +1 @@\n-x\n+y\n"), episode="ep-k",
            step=3, image=image, snapshot_id=answer2.meta.snapshot_id,
        ))  # fmt: skip
        refused = next_record(answers)
        assert isinstance(refused, EpisodeFailed) and refused.failure is FailureClass.INVALID_ACTION
        assert "does not apply" in refused.reason and refused.meta.step == 3
    finally:
        second.stop()
        producer.close()
