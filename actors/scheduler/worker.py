"""The scheduler as a Kafka process: start episodes on `episode.commands` until N of them have ended.

On start it rebuilds its state from the log, so a restart never starts extra episodes: the tasks (the
compacted `tasks` topic, with their measured difficulties), every StartEpisode of the run already on
`episode.commands` and every ended episode on `trajectories.completed` / `trajectories.failed`, and the
run's control log (`run.control`), each read from the beginning. Then it follows the trajectory topics,
the control log (partitions assigned by hand, offsets committed under the group `<run>.trialog-scheduler`
for visibility) and the tasks topic (a difficulty measured later changes the draws from then on), and
sends what `core.decide` asks for, each command acknowledged (acks=all) before it counts as started.
While the run is paused it sends nothing and says so once on stderr. It exits 0 once N episodes have ended.

Kafka unreachable (a broker restart): at start-up it waits for the broker (`streams.kafka.serving.connected`);
afterwards a command's send is waited for until the broker acknowledges it (never sent again, which could
start an extra episode), and a failed offset commit is skipped (the offsets are for visibility only).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kafka.errors import KafkaError, KafkaTimeoutError

from actors.scheduler.core import SchedulerState, Target, decide, pause_notice, progress
from schemas.codec import default_codec
from schemas.commands import StartEpisode
from schemas.difficulty import TaskDifficulty
from schemas.origin import Origin
from schemas.publications import TaskPublished
from schemas.run_control import CONTROL_TYPES
from schemas.topics import EPISODE_COMMANDS, RUN_CONTROL, TASKS, TRAJECTORIES, topic_name
from schemas.trajectories import TrajectoryCompleted, TrajectoryFailed
from streams.kafka.reader import assign_all, decoded, read_to_end
from streams.kafka.serving import METADATA_MAX_AGE_MS, connected, poll
from streams.kafka.topics import ensure_topics
from streams.lifecycle import Health
from streams.telemetry import tracing
from streams.telemetry.attributes import record_attributes

SEND_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class SchedulerSettings:
    bootstrap: str
    target: Target
    poll_timeout_ms: int = 500
    wait_for_tasks_s: float = 120.0  # how long to wait for a first task before giving up

    @property
    def group_id(self) -> str:
        return topic_name(self.target.run_id, "trialog-scheduler")


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class SchedulerProcess:
    """Rebuild, then decide-send-follow until done or `stopping` is set."""

    def __init__(
        self, settings: SchedulerSettings, origin: Origin, say: Callable[[str], None] = _say
    ) -> None:
        self.settings = settings
        self.origin = origin
        self.say = say
        self.state = SchedulerState()
        self.stopping = threading.Event()
        self.health = Health()  # ready once the state is rebuilt; beats once per round
        run = settings.target.run_id
        self.topics = {
            topic: topic.of(run) for topic in (TASKS, EPISODE_COMMANDS, *TRAJECTORIES, RUN_CONTROL)
        }
        self.sent = 0  # commands this process sent

    def observe(self, value: object) -> None:
        run = self.settings.target.run_id
        if isinstance(value, TaskPublished):
            self.state.observe_task(value)
        elif isinstance(value, TaskDifficulty):
            self.state.observe_difficulty(value)
        elif isinstance(value, StartEpisode):
            self.state.observe_start(value, run)
        elif isinstance(value, (TrajectoryCompleted, TrajectoryFailed)):
            self.state.observe_trajectory(value, run)
        elif isinstance(value, CONTROL_TYPES):
            self.state.observe_control(value, run)

    def rebuild(self) -> None:
        """The state the log holds now: tasks, the run's StartEpisode commands, its ended episodes."""
        for _topic, value in read_to_end(self.settings.bootstrap, list(self.topics.values())):
            self.observe(value)

    def run(self) -> int:
        """0 when N episodes ended; 1 when stopped, or when no task came within `wait_for_tasks_s`."""
        from streams.kafka import clients

        settings, target = self.settings, self.settings.target
        self.health.ready("scheduler", False, f"waiting for Kafka at {settings.bootstrap}")
        if not connected(settings.bootstrap, self.stopping, self.say):
            return 1
        self.health.ready("scheduler", False, "reading the run back")
        ensure_topics(settings.bootstrap, target.run_id)
        self.rebuild()
        self.say(f"{progress(self.state, target)} (read back; {len(self.state.tasks)} tasks)")
        consumer = clients.consumer(
            settings.bootstrap,
            group_id=settings.group_id,
            enable_auto_commit=False,
            metadata_max_age_ms=METADATA_MAX_AGE_MS,
        )
        producer = clients.producer(settings.bootstrap)
        try:
            follow = [
                self.topics[TASKS],
                *(self.topics[topic] for topic in TRAJECTORIES),
                self.topics[RUN_CONTROL],
            ]
            # Everything up to now was read by `rebuild`; following from the beginning again is harmless
            # (every observation is idempotent) and cannot miss what arrived in between.
            assign_all(consumer, follow)
            self.health.ready("scheduler")
            return self._loop(consumer, producer)
        finally:
            consumer.close()
            producer.close()

    def _loop(self, consumer: Any, producer: Any) -> int:
        settings, target = self.settings, self.settings.target
        codec = default_codec()
        waiting_since = time.monotonic()
        last = ""
        was_paused = False
        while not self.stopping.is_set():
            self.health.beat("scheduler")
            if (notice := pause_notice(was_paused, self.state, target)) is not None:
                self.say(f"scheduler {target.run_id}: {notice}")  # once per pause, once per resume
                was_paused = self.state.paused
            if self.state.done(target):
                self.say(f"{progress(self.state, target)}: done")
                return 0
            if not self.state.tasks and time.monotonic() - waiting_since > settings.wait_for_tasks_s:
                self.say(f"scheduler {target.run_id}: no task on {self.topics[TASKS]}; publish tasks first")
                return 1
            for command in decide(self.state, target, self.origin):
                with tracing.span("scheduler.start_episode", command.episode_id, record_attributes(command)):
                    sent = producer.send(
                        self.topics[EPISODE_COMMANDS],
                        key=command.episode_id.encode(),
                        value=codec.encode(command),
                        headers=tracing.outgoing_headers(),  # the owner's span hangs under this one
                    )
                    self._acknowledged(sent)
                self.state.observe_start(command, target.run_id)
                self.sent += 1
            line = progress(self.state, target)
            if line != last:
                self.say(line)
                last = line
            batch = poll(consumer, settings.poll_timeout_ms, self.stopping)
            for records in batch.values():
                for _topic, value in decoded(records):
                    self.observe(value)
            if batch:
                with contextlib.suppress(
                    KafkaError
                ):  # for visibility only: the state is rebuilt from the log
                    consumer.commit()
        self.say(f"{progress(self.state, target)}: stopped")
        return 1

    def _acknowledged(self, sent: Any) -> None:
        """Wait until the broker acknowledged a send. The producer keeps retrying it (idempotent, so it
        lands once) while the broker is away; the scheduler waits rather than sending it again."""
        while True:
            try:
                sent.get(SEND_TIMEOUT_S)
                return
            except KafkaTimeoutError:
                if sent.is_done:  # given up by the producer: nothing to wait for
                    raise
                self.health.beat("scheduler")  # waiting for the broker: turning, not stuck
                self.say("Kafka has not acknowledged a StartEpisode yet; still waiting")
