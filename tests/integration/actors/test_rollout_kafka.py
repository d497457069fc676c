"""`trialog worker rollout` end to end: a real process on real Kafka answers policy requests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from kafka import KafkaProducer

from ops.paths import REPO_ROOT
from schemas.actions import ApplyPatch, Submit
from schemas.deadletter import DeadLetter
from schemas.events import ActionProposed
from schemas.topics import DEADLETTER, POLICY_REQUESTS, POLICY_RESULTS
from tests.integration.actors.kafka_helpers import CODEC, new_run, next_records, reading
from tests.unit.actors.requests import policy_request, request_meta

EXAMPLES = REPO_ROOT / "examples" / "tasks"


def test_a_rollout_process_answers_requests_and_dead_letters_garbage(kafka_bootstrap: str) -> None:
    run = new_run(kafka_bootstrap, "rol")
    command = [
        sys.executable, "-m", "ops.cli", "worker", "rollout", "--policy", "scripted",
        "--solutions", str(EXAMPLES / "easy-fix-range"), "--bootstrap", kafka_bootstrap,
        "--run", run, "--group", f"{run}-rollout", "--instance", "r1",
    ]  # fmt: skip
    worker = subprocess.Popen(command, cwd=REPO_ROOT, stderr=subprocess.PIPE, text=True)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    try:
        with reading(kafka_bootstrap, run, "policy.results", "deadletter") as answers:
            requests = POLICY_REQUESTS.of(run)
            first = policy_request(meta=request_meta(episode="ep-a", task_id="easy-fix-range", step=0))
            second = policy_request(
                meta=request_meta(episode="ep-a", task_id="easy-fix-range", step=1, attempt=2)
            )
            producer.send(requests, key=b"ep-a", value=CODEC.encode(first)).get(30)
            producer.send(requests, key=b"ep-a", value=CODEC.encode(second)).get(30)
            producer.send(requests, key=b"ep-a", value=b"not a trialog record").get(30)
            records = next_records(answers, 3, timeout_s=60)
        by_topic: dict[str, list[object]] = {}
        for record in records:
            by_topic.setdefault(record.topic, []).append((record.key, CODEC.decode(record.value)))
        results = by_topic[POLICY_RESULTS.of(run)]
        assert [key for key, _ in results] == [b"ep-a", b"ep-a"]
        patch, submit = (answer for _, answer in results)
        assert isinstance(patch, ActionProposed) and isinstance(patch.action, ApplyPatch)
        assert isinstance(submit, ActionProposed) and isinstance(submit.action, Submit)
        for answer, request in ((patch, first), (submit, second)):
            echoed = (answer.meta.episode_id, answer.meta.step, answer.meta.attempt, answer.meta.prev_hash)
            assert echoed == (
                request.meta.episode_id,
                request.meta.step,
                request.meta.attempt,
                request.meta.prev_hash,
            )
            assert answer.meta.producer.instance == "r1"
        ((_, letter),) = by_topic[DEADLETTER.of(run)]
        assert (
            isinstance(letter, DeadLetter)
            and letter.value == b"not a trialog record"
            and letter.reason == "wrong_magic"
        )
    finally:
        producer.close()
        os.kill(worker.pid, signal.SIGTERM)
        _, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
