"""Measuring tasks' difficulty through the real pipeline (`trialog tasks difficulty`).

A measurement is a run of its own: its tasks published on its topics, one group of K episodes per task
(round robin, so every task gets exactly K) with the given policy version, run by one worker of each kind
(`ops.run_workers`, no guard: nothing is trained on it) until every episode ended. Its trajectories are
then tallied (`actors.scheduler.difficulty.tally`: reward == PASS_REWARD is a pass; an episode that ended
without a grade is not a sample) and one `TaskDifficulty` per task is written to the tasks topic of the run
that will train on the tasks (`for_run`), keyed `difficulty/<task id>`, where its scheduler reads it.

The measuring run's id is derived from what is measured (`measuring_run`), so a measurement interrupted
and started again resumes: its scheduler reads back the episodes already started and starts no more.
"""

from __future__ import annotations

import hashlib
import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from actors.scheduler.difficulty import Tally, tally
from schemas.difficulty import TaskDifficulty, difficulty_key
from schemas.origin import Origin
from schemas.publications import TaskPublished
from schemas.topics import TASKS, TRAJECTORIES
from schemas.trajectories import TrajectoryCompleted, TrajectoryFailed
from streams.errors import StackError


@dataclass(frozen=True, slots=True)
class Measured:
    """One task's measurement, as written and as reported."""

    tally: Tally
    record: TaskDifficulty

    def to_json(self) -> dict[str, Any]:
        t = self.tally
        return {
            "task_id": t.task_id,
            "task_version": t.task_version,
            "samples": t.samples,
            "passes": t.passes,
            "unfinished": t.unfinished,
            "pass_rate": t.pass_rate,
            "bucket": t.bucket.value,
        }

    def line(self) -> str:
        t = self.tally
        extra = f", {t.unfinished} unfinished" if t.unfinished else ""
        return f"{t.task_id}: {t.passes}/{t.samples} passed ({t.pass_rate:.2f}) -> {t.bucket.value}{extra}"


def measuring_run(versions: Iterable[tuple[str, str]], policy_version: int, samples: int) -> str:
    """`difficulty-<hash>` of the task versions, the policy version and K: the same measurement, the same
    run (a restart resumes it), another one, another run."""
    text = "\n".join(f"{task}@{version}" for task, version in sorted(versions))
    digest = hashlib.sha256(f"{text}\npolicy={policy_version}\nsamples={samples}".encode()).hexdigest()
    return f"difficulty-{digest[:10]}"


def read_trajectories(bootstrap: str, run: str) -> list[TrajectoryCompleted | TrajectoryFailed]:
    from streams.kafka.reader import read_to_end

    found = read_to_end(bootstrap, [topic.of(run) for topic in TRAJECTORIES])
    return [v for _topic, v in found if isinstance(v, (TrajectoryCompleted, TrajectoryFailed))]


def read_published(bootstrap: str, run: str) -> dict[str, TaskPublished]:
    """The run's published tasks by id (the newest of each)."""
    from streams.kafka.reader import read_to_end

    return {
        v.task_id: v for _topic, v in read_to_end(bootstrap, [TASKS.of(run)]) if isinstance(v, TaskPublished)
    }


def measurements(
    trajectories: Sequence[TrajectoryCompleted | TrajectoryFailed],
    measured_by: str,
    policy_version: int,
    origin: Origin,
    versions: Mapping[str, str] | None = None,
) -> list[Measured]:
    """One measurement per task version in `measured_by`'s trajectories, sorted by task id; with
    `versions` (task id -> version), exactly those tasks, a task without trajectories unmeasured."""
    counts = dict(tally(trajectories, measured_by))
    if versions is not None:
        counts = {key: value for key, value in counts.items() if versions.get(key[0]) == key[1]}
        for task_id, version in versions.items():
            counts.setdefault((task_id, version), Tally(task_id, version))
    found = []
    for key in sorted(counts):
        t = counts[key]
        record = TaskDifficulty(
            meta=origin.record_meta(),
            task_id=t.task_id,
            task_version=t.task_version,
            policy_version=policy_version,
            samples=t.samples,
            passes=t.passes,
            pass_rate=t.pass_rate,
            bucket=t.bucket.value,
            measured_by=measured_by,
            unfinished=t.unfinished,
        )
        found.append(Measured(t, record))
    return found


def write_difficulties(bootstrap: str, for_run: str, records: Sequence[TaskDifficulty]) -> str:
    """Each record on `for_run`'s tasks topic (created if missing), acknowledged; returns the topic."""
    from kafka.errors import KafkaError

    from schemas.codec import default_codec
    from streams.kafka import clients
    from streams.kafka.topics import ensure_topics

    topic = TASKS.of(for_run)
    codec = default_codec()
    try:
        ensure_topics(bootstrap, for_run)
        producer = clients.producer(bootstrap)
        try:
            for record in records:
                producer.send(topic, key=difficulty_key(record.task_id), value=codec.encode(record)).get(30)
        finally:
            producer.close()
    except KafkaError as exc:
        raise StackError(
            f"could not write difficulties on {topic}: {exc!r}", "check the stack: trialog status"
        ) from None
    return topic


def origin() -> Origin:
    return Origin.system("tasks-difficulty", socket.gethostname())
