"""The whole pipeline with a tiny model, the learner killed with SIGKILL mid-run and started again.

Real Kafka, real Docker sandboxes, every worker an OS process started by the demo's own orchestration
(`ops.demo.run`: the scheduler, streams, sandbox, verifier, rollout with `--policy llm --versions-run RUN`
and `trialog worker learner`), on toy tasks imported and validated as the demo does. The policy is a tiny
random llama on SmolLM2's tokenizer, taught to answer each task's first turn with either the right file or
`submit` about equally often (`learner.testing.taught_tiny_model`): episodes of one group then get
different rewards, so the learner trains, publishes and the rollout hot-swaps, in seconds on a CPU.

Once the learner has published a version, and while episodes are still running, it is killed; it is
started again once more trajectories have arrived without it. When the first part of the episodes has
ended and the restarted learner has published a version, the run goes on with the rest (the scheduler
reads the log back). When every episode has ended and the learner has caught up, the test reads the
topics, the object store and the learner's checkpoint back and checks: every completed trajectory was
consumed once and accounted for once (trained, or dropped as stale / skipped with a count), the published
versions are 1, 2, 3, ... with no gap or repeat, the rollout answered with published versions only (in
the second part, versions of the restarted learner), and `trialog audit` finds the run healthy.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import docker
import pytest
from kafka import KafkaConsumer, TopicPartition

from actors.rollout.weights import KafkaPublications
from actors.tasks.spec import load_task
from actors.tasks.toy import ToyTask, import_toy
from learner import checkpoint
from learner.model import prepare_model
from learner.testing import Taught, taught_tiny_model
from ops.demo.run import DemoSettings, Stage, schedule, start_training, training_target
from ops.paths import Paths
from ops.run_workers import Workers, validate_tasks
from schemas.blobs import LocalObjectStore
from schemas.codec import default_codec
from schemas.commands import StartEpisode
from schemas.events import ActionProposed
from schemas.publications import PolicyPublished
from schemas.topics import (
    EPISODE_COMMANDS,
    EPISODE_EVENTS,
    POLICY_VERSIONS,
    TRAJECTORIES_COMPLETED,
    TRAJECTORIES_FAILED,
    topic_name,
)
from schemas.trajectories import TrajectoryCompleted, TrajectoryFailed
from streams.kafka.reader import read_to_end
from tests.integration.fault_helpers import audited_healthy

CODEC = default_codec()
TOY_TASKS = 2
# Once the workers are up, episodes end in a burst (~2 a second here): the first version comes with most of
# the first part still to run. The second part starts once the restarted learner has published a version.
FIRST_PART, EPISODES = 64, 96
GROUP_SIZE = 4
RESTART_AFTER = 1  # trajectories that end while the learner is down before it is started again
DOWN_AT_MOST_S = 60.0
CATCH_UP_S = (
    180.0  # generous: a loaded 2-core machine, and groups with a failed member wait for their timeout
)
SETTINGS = DemoSettings(
    name="pipeline-kill",
    toy_count=TOY_TASKS,
    holdout_every=0,
    group_size=GROUP_SIZE,
    capacity=8,
    max_steps=2,
    max_new_tokens=24,
    lora_rank=4,
    group_timeout_s=20.0,
    lr=1e-3,
    temperature=1.0,  # the taught replies' probabilities as they are
)


def solution_reply(task: ToyTask) -> str:
    return f"```python\n# {task.name}.py\ndef {task.name}():\n    return {task.target}\n```"


@pytest.fixture(scope="module")
def toy_tasks(tmp_path_factory: pytest.TempPathFactory, docker_client: docker.DockerClient) -> list[Path]:
    """`trialog tasks import toy` and `trialog tasks validate --runs 1`, as the demo prepares them."""
    split = import_toy(tmp_path_factory.mktemp("toy"), count=TOY_TASKS)
    validate_tasks(split.train)
    return split.train


@pytest.fixture(scope="module")
def taught_model(tmp_path_factory: pytest.TempPathFactory, toy_tasks: list[Path]) -> Taught:
    lessons = {
        load_task(folder).spec.instruction: [solution_reply(ToyTask(index)), "submit"]
        for index, folder in enumerate(toy_tasks)
    }
    tokenizer = prepare_model(Paths.from_env().cache)  # only its tokenizer and chat template are used
    return taught_tiny_model(tmp_path_factory.mktemp("tiny-model"), tokenizer, lessons)


class Ended:
    """The run's ended episodes (completed or failed), read up to the topics' ends at each call."""

    def __init__(self, bootstrap: str, run: str) -> None:
        self.consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        topics = [topic_name(run, base) for base in ("trajectories.completed", "trajectories.failed")]
        self.partitions = [
            TopicPartition(topic, p)
            for topic in topics
            for p in self.consumer.partitions_for_topic(topic) or ()
        ]
        self.consumer.assign(self.partitions)
        self.consumer.seek_to_beginning(*self.partitions)
        self.episodes: set[str] = set()

    def count(self) -> int:
        ends = self.consumer.end_offsets(self.partitions)
        give_up = time.monotonic() + 30.0
        while any(self.consumer.position(p) < ends[p] for p in self.partitions):
            assert time.monotonic() < give_up, "could not read the trajectories to their end"
            for records in self.consumer.poll(timeout_ms=200).values():
                for record in records:
                    value = CODEC.decode(record.value)
                    if isinstance(value, TrajectoryCompleted | TrajectoryFailed):
                        self.episodes.add(value.meta.episode_id)
        return len(self.episodes)

    def close(self) -> None:
        self.consumer.close()


@dataclass
class KillTheLearner:
    """The schedule's watch: kill the learner once it has published a version, start it again later."""

    argv: list[str]
    ended: Ended
    versions: KafkaPublications
    published: list[int] = field(default_factory=list)
    killed_at: tuple[int, int] | None = None  # (episodes ended, versions published) at the kill
    down_since: float = 0.0
    restarted_at: int | None = None  # episodes ended at the restart

    def __call__(self, workers: Workers) -> None:
        self.published += [p.version for p in self.versions.poll()]
        if self.killed_at is None and self.published:
            ended = self.ended.count()
            workers.kill("learner")
            self.killed_at, self.down_since = (ended, len(self.published)), time.monotonic()
        elif self.killed_at is not None and self.restarted_at is None:
            ended = self.ended.count()
            if (
                ended >= self.killed_at[0] + RESTART_AFTER
                or time.monotonic() - self.down_since > DOWN_AT_MOST_S
            ):
                workers.start({"learner": self.argv})
                self.restarted_at = ended


@pytest.fixture
def run_id(kafka_bootstrap: str) -> str:
    return f"plk{uuid.uuid4().hex[:8]}"


@pytest.fixture
def stage(tmp_path: Path, kafka_bootstrap: str, taught_model: Taught) -> Stage:
    # Run-time state (logs, learner checkpoint, object store) under the test's folder; the cache is shared.
    paths = Paths(tmp_path / "home", Paths.from_env().cache)
    return Stage(paths, kafka_bootstrap, taught_model.folder, SETTINGS, say=print)


@pytest.fixture
def training(stage: Stage, run_id: str, toy_tasks: list[Path]) -> Iterator[Workers]:
    workers = start_training(stage, run_id, toy_tasks)
    try:
        yield workers
    finally:
        workers.stop()


def _logs(stage: Stage, run: str) -> str:
    folder = stage.paths.component("runs") / run / "logs"
    return "\n".join(
        f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}" for log in sorted(folder.glob("*.log"))
    )


def _end_offsets(bootstrap: str, topic: str) -> int:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        return sum(consumer.end_offsets(partitions).values())
    finally:
        consumer.close()


def _commands(bootstrap: str, run: str) -> list[StartEpisode]:
    found = read_to_end(bootstrap, [EPISODE_COMMANDS.of(run)])
    return [v for _t, v in found if isinstance(v, StartEpisode)]


def _caught_up(folder: Path, records: int) -> checkpoint.Checkpoint | None:
    """The learner's checkpoint once it accounts for all `records` and holds no trajectory back."""
    saved = checkpoint.load(folder)
    if saved is None or sum(saved.planner.offsets.values()) < records or saved.planner.waiting:
        return None
    return saved


def test_the_pipeline_trains_every_trajectory_once_across_a_learner_kill(
    stage: Stage, run_id: str, training: Workers, taught_model: Taught, kafka_bootstrap: str
) -> None:
    run, started = run_id, time.monotonic()
    print(f"taught the tiny model in {taught_model.steps} steps: {taught_model.probabilities}")
    argv = stage.learner_command(run)
    ended, versions = Ended(kafka_bootstrap, run), KafkaPublications(kafka_bootstrap, run)
    killer = KillTheLearner(argv, ended, versions)
    try:
        first = training_target(SETTINGS, run, FIRST_PART)
        schedule(stage, training, first, deadline=None, watch=killer)
        assert killer.killed_at is not None, f"no version published during the run\n{_logs(stage, run)}"
        if killer.restarted_at is None:  # every episode ended while it was down
            training.start({"learner": argv})
        first_ended = ended.count()
        # The restarted learner trains on what arrived while it was down, then the run goes on: the
        # scheduler reads the log back and starts the remaining episodes, on the newest version.
        give_up = time.monotonic() + CATCH_UP_S
        while max(killer.published) <= killer.killed_at[1]:
            assert time.monotonic() < give_up, f"no version after the restart\n{_logs(stage, run)}"
            assert "learner" not in training.dead(), _logs(stage, run)
            killer.published += [p.version for p in versions.poll()]
            time.sleep(1.0)
        second_from = max(killer.published)
        first_episodes = {c.episode_id for c in _commands(kafka_bootstrap, run)}
        schedule(stage, training, training_target(SETTINGS, run, EPISODES), deadline=None)
        ran_s = time.monotonic() - started
        total_ended = ended.count()
    finally:
        ended.close()
        versions.close()
    completed_topic = TRAJECTORIES_COMPLETED.of(run)
    records = _end_offsets(kafka_bootstrap, completed_topic)
    folder = stage.paths.component("runs") / run / "learner"
    give_up = time.monotonic() + CATCH_UP_S
    while (saved := _caught_up(folder, records)) is None:
        assert time.monotonic() < give_up, (
            f"the learner did not catch up with {records} records\n{_logs(stage, run)}"
        )
        assert "learner" not in training.dead(), _logs(stage, run)
        time.sleep(1.0)
    codes = training.stop()
    assert codes["learner"] == 0, _logs(stage, run)  # a clean stop after the restart
    caught_up_s = time.monotonic() - started
    print(
        f"run {run}: {EPISODES} episodes in {ran_s:.0f} s, the learner caught up after {caught_up_s:.0f} s; "
        f"killed at {killer.killed_at} (ended, versions), restarted at {killer.restarted_at} ended, "
        f"second part from version {second_from}"
    )

    # The kill happened mid-run: after a version, with episodes still to end and ending while it was down.
    killed_ended, killed_versions = killer.killed_at
    assert killed_versions >= 1 and killed_ended < first_ended == FIRST_PART and total_ended == EPISODES

    # Every completed trajectory consumed once and accounted for once.
    found = list(read_to_end(kafka_bootstrap, [completed_topic, TRAJECTORIES_FAILED.of(run)]))
    completed = [v for _t, v in found if isinstance(v, TrajectoryCompleted)]
    failed = {v.meta.episode_id for _t, v in found if isinstance(v, TrajectoryFailed)}
    episodes = {t.meta.episode_id for t in completed}
    assert len(episodes | failed) == EPISODES and len(episodes) >= GROUP_SIZE
    final = checkpoint.load(folder)  # the clean stop's checkpoint: nothing more came in since catching up
    assert final is not None and final.planner == saved.planner
    planner, counters = saved.planner, saved.planner.counters
    assert sum(planner.offsets.values()) == records == len(completed)
    assert planner.seen == episodes  # no trajectory lost
    assert counters.arrived == len(episodes) and counters.duplicate == len(completed) - len(episodes)
    assert counters.unreadable == 0 and planner.waiting == 0
    accounted = counters.trained + counters.stale + counters.all_equal + counters.timeout + counters.late
    assert accounted + counters.unusable == counters.arrived  # each exactly once: trained or counted
    assert counters.trained >= 2

    # Versions 1, 2, 3, ...: one per training step, no gap, no repeat, each with its own weights.
    announced = [v for _t, v in read_to_end(kafka_bootstrap, [POLICY_VERSIONS.of(run)])]
    published = [p for p in announced if isinstance(p, PolicyPublished)]
    numbers = [p.version for p in published]
    assert numbers == list(range(1, len(numbers) + 1)) == list(range(1, saved.version + 1))
    assert saved.version == counters.steps > killed_versions  # trained on after the restart
    assert all(p.base_version == p.version - 1 and p.run_id == run for p in published)
    assert sum(p.trajectories for p in published) == counters.trained
    store = LocalObjectStore(stage.paths.objects)
    assert all(store.contains(p.weights.sha256) for p in published)
    stats = [json.loads(line) for line in (folder / "stats.jsonl").read_text().splitlines()]
    trained_groups = [group for line in stats for group in line["groups"]]
    assert len(set(trained_groups)) == len(trained_groups)  # no group trained twice, across the kill
    assert {line["version"] for line in stats} <= set(numbers)
    learner_log = (stage.paths.component("runs") / run / "logs" / "learner.log").read_text()
    assert learner_log.count("resumed at version") == 1 and learner_log.count("starting at version") == 1

    # The rollout hot-swapped: later actions were sampled by published versions.
    events = read_to_end(kafka_bootstrap, [EPISODE_EVENTS.of(run)])
    actions = [v for _t, v in events if isinstance(v, ActionProposed)]
    used = Counter(a.meta.policy_version for a in actions)
    assert set(used) & set(numbers), f"actions sampled by versions {used}; published {numbers}"
    assert set(used) <= {0, *numbers}  # never a version that was not published
    second = [a.meta.policy_version for a in actions if a.meta.episode_id not in first_episodes]
    assert len({a.meta.episode_id for a in actions} - first_episodes) == EPISODES - FIRST_PART
    assert min(second) >= second_from > killed_versions  # the restarted learner's versions, hot-swapped
    assert max(t.max_policy_version for t in completed) >= 1

    # The run's log is healthy: nothing lost, no duplicate step, every hash chain intact.
    report = audited_healthy(run, kafka_bootstrap)
    assert (report["started"], report["in_flight"]) == (EPISODES, 0), report
    print(f"learner: {counters}; versions {numbers}; actions by version {dict(sorted(used.items()))}")
