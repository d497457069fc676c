"""Task difficulty on a real broker: the scheduler process draws by the difficulties on the tasks topic, and
`trialog tasks difficulty` measures tasks through the real pipeline (scripted policy, Docker sandboxes) and
records what it found on the training run's tasks topic."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import docker
from kafka import KafkaProducer

from actors.tasks.publish import publish_tasks
from actors.tasks.spec import load_task
from ops.paths import REPO_ROOT, Paths
from ops.stack.images import sandbox_ref
from schemas.blobs import LocalObjectStore
from schemas.codec import default_codec
from schemas.common import Producer, RecordMeta
from schemas.difficulty import TaskDifficulty, difficulty_key
from schemas.publications import TaskPublished
from schemas.topics import TASKS
from streams.kafka.reader import read_records
from streams.kafka.topics import ensure_topics
from tests.integration.test_run_end_to_end import EXAMPLES, _commands, _wait_for

SOLVED, OTHER = EXAMPLES  # easy-fix-add, easy-fix-range


def _always(task_dir: Path, version: str | None = None) -> TaskDifficulty:
    task = load_task(task_dir)
    meta = RecordMeta(uuid.uuid4().hex, int(time.time() * 1e6), Producer("tasks-difficulty", "test"))
    return TaskDifficulty(meta, task.id, version or task.version, 0, 4, 4, 1.0, "always", "difficulty-test")


def test_the_scheduler_starts_a_task_measured_always_only_on_retest_groups(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    run = f"dif{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka_bootstrap, run)
    paths = Paths(tmp_path / "home", tmp_path / "cache")
    publish_tasks(
        [SOLVED, OTHER], kafka_bootstrap, LocalObjectStore(paths.objects), str(sandbox_ref()), run=run
    )
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    codec = default_codec()
    try:
        # A measurement of an older version of the other task: it does not apply (the task is unmeasured).
        for record in (_always(SOLVED), _always(OTHER, version="0" * 64)):
            producer.send(TASKS.of(run), key=difficulty_key(record.task_id), value=codec.encode(record)).get(
                30
            )
    finally:
        producer.close()
    argv = [
        sys.executable, "-m", "ops.cli", "worker", "scheduler", "--run", run, "--episodes", "8",
        "--capacity", "8", "--retest-every", "4", "--bootstrap", kafka_bootstrap,
    ]  # fmt: skip
    log = tmp_path / "scheduler.log"
    with log.open("wb") as out:
        scheduler = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_for("8 StartEpisode", lambda: len(_commands(kafka_bootstrap, run)) == 8)
        _wait_for("the progress line", lambda: "groups on retired tasks 2" in log.read_text())
    finally:
        scheduler.kill()
        scheduler.wait(timeout=30)
    commands = _commands(kafka_bootstrap, run)
    by_group = {c.group_id: c for c in commands}
    solved = load_task(SOLVED)
    retests = {f"{run}/g{g:06d}" for g in (3, 7)}
    assert {g for g, c in by_group.items() if c.task_id == solved.id} == retests, log.read_text()
    assert all(c.task_version == load_task(EXAMPLES[c.task_id != solved.id]).version for c in commands)
    assert "retired tasks 1/2, groups on retired tasks 2" in log.read_text()
    # The publications survive beside the difficulties (keyed apart, so compaction keeps both).
    records = list(read_records(kafka_bootstrap, [TASKS.of(run)]))
    kinds = {(r.key, type(codec.decode(r.value)).__name__) for r in records}
    assert (solved.id.encode(), TaskPublished.__name__) in kinds
    assert (difficulty_key(solved.id), TaskDifficulty.__name__) in kinds


def test_tasks_difficulty_measures_through_the_pipeline_and_records_for_the_training_run(
    kafka_bootstrap: str, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    train = f"train{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "TRIALOG_HOME": str(tmp_path / "home"), "PYTHONUNBUFFERED": "1"}
    argv = [
        sys.executable, "-m", "ops.cli", "tasks", "difficulty", *map(str, EXAMPLES), "--policy", "0",
        "--samples", "2", "--rollout", "scripted", "--for-run", train, "--json",
        "--bootstrap", kafka_bootstrap,
    ]  # fmt: skip
    started = time.monotonic()
    result = subprocess.run(
        argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=240, check=False
    )
    took = time.monotonic() - started
    logs = "\n".join(
        p.read_text(errors="replace")[-3000:] for p in (tmp_path / "home").glob("runs/*/logs/*.log")
    )
    assert result.returncode == 0, f"{result.stderr}\n{logs}"
    print(f"tasks difficulty: {took:.1f} s\n{result.stderr}")
    document = json.loads(result.stdout)
    assert document["for_run"] == train and document["topic"] == TASKS.of(train)
    assert document["measured_by"].startswith("difficulty-")
    # The scripted policy plays each task's reference solution: every episode passes.
    assert [
        (t["task_id"], t["samples"], t["passes"], t["pass_rate"], t["bucket"]) for t in document["tasks"]
    ] == [
        ("easy-fix-add", 2, 2, 1.0, "always"),
        ("easy-fix-range", 2, 2, 1.0, "always"),
    ]
    records = [
        (r.key, default_codec().decode(r.value)) for r in read_records(kafka_bootstrap, [TASKS.of(train)])
    ]
    written = {key: value for key, value in records if isinstance(value, TaskDifficulty)}
    assert set(written) == {difficulty_key("easy-fix-add"), difficulty_key("easy-fix-range")}
    for value in written.values():
        task = load_task(REPO_ROOT / "examples" / "tasks" / value.task_id)
        assert value.task_version == task.version and value.policy_version == 0
        assert (value.samples, value.passes, value.measured_by) == (2, 2, document["measured_by"])
