"""The guard as a Kafka process (`trialog worker guard`): follow a run's topics, carry out `core.Guard`'s
decisions, and ask for its canaries.

On start it reads back what it decided before (the tasks, `run.control`, `canary.grades`,
`canary.requests`), then follows those and the grades (`verify.results`, `canary.results`) and
`trajectories.completed` from the beginning: every observation is idempotent, so reading a record twice
changes nothing, and a grade that came while the guard was down is judged when it is read. Each write is
acknowledged (acks=all) before the next; a canary's workspace snapshot is built and stored before its
request is sent (`CanaryBuilder`).

Alerts beside the guard's own (version changes, canary failures) come from the alert engine when one is
given (`AlertHook`): it sees every record the guard reads and its ticks, and its alerts are written to the
same `alerts` topic.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from actors.guard.core import CanaryPlan, Guard, Write
from schemas import topics
from schemas.alerts import Alert
from schemas.codec import default_codec
from schemas.origin import Origin
from schemas.record import Record
from schemas.run_control import GraderCleared, TrajectoriesQuarantined, VersionChanged
from schemas.topics import topic_name
from streams.kafka.reader import assign_all, decoded, read_to_end
from streams.kafka.serving import METADATA_MAX_AGE_MS, connected, poll
from streams.kafka.topics import ensure_topics
from streams.lifecycle import Health

log = logging.getLogger(__name__)
SEND_TIMEOUT_S = 60.0

# What the guard's decisions depend on: its own records first (so a rebuilt guard knows what it did).
OWN_TOPICS = (topics.TASKS, topics.RUN_CONTROL, topics.CANARY_GRADES, topics.CANARY_REQUESTS)
FOLLOWED = (*OWN_TOPICS, topics.TRAJECTORIES_COMPLETED, topics.VERIFY_RESULTS, topics.CANARY_RESULTS)


class CanaryBuilder(Protocol):
    def __call__(self, plan: CanaryPlan) -> str:
        """Build and store the canary's workspace; its snapshot id. Raises when it cannot."""
        ...


class AlertHook(Protocol):
    """The alert engine, as the guard drives it."""

    def observe(self, topic: str, value: object, now_us: int) -> Sequence[Alert]: ...

    def tick(self, now_us: int) -> Sequence[Alert]: ...

    def deliver(self, alerts: list[Alert]) -> list[Alert]:
        """The guard's own alerts, to the same side sinks (log, counter, webhook) as the engine's."""
        ...


@dataclass(frozen=True, slots=True)
class GuardProcessSettings:
    bootstrap: str
    run_id: str
    poll_timeout_ms: int = 500
    extra_topics: tuple[topics.Topic, ...] = ()  # more topics for the alert engine to see


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class GuardProcess:
    def __init__(
        self,
        settings: GuardProcessSettings,
        guard: Guard,
        build: CanaryBuilder,
        origin: Origin,
        alerts: AlertHook | None = None,
        say: Callable[[str], None] = _say,
    ) -> None:
        self.settings = settings
        self.guard = guard
        self.build = build
        self.origin = origin
        self.alerts = alerts
        self.say = say
        self.stopping = threading.Event()
        self.health = Health()  # ready once its own records are read back; beats once per poll
        self.codec = default_codec()
        self.written: dict[str, int] = {}  # base topic -> records written by this process
        run = settings.run_id
        self._base = {topic_name(run, t.name): t.name for t in (*FOLLOWED, *settings.extra_topics)}

    def base(self, topic: str) -> str:
        return self._base.get(topic, topic)

    def run(self) -> int:
        from streams.kafka import clients

        settings = self.settings
        self.health.ready("guard", False, f"waiting for Kafka at {settings.bootstrap}")
        if not connected(settings.bootstrap, self.stopping, self.say):
            return 1
        self.health.ready("guard", False, "reading its own records back")
        ensure_topics(settings.bootstrap, settings.run_id)
        own = [t.of(settings.run_id) for t in OWN_TOPICS]
        for topic, value in read_to_end(settings.bootstrap, own):
            self.guard.observe(self.base(topic), value)
        state = self.guard.state
        self.say(
            f"guard {settings.run_id}: {'pinned' if state.control.pinned else 'NOT pinned yet'}, "
            f"{len(state.tasks)} tasks, {state.rounds} canary rounds so far, "
            f"{'PAUSED' if state.control.is_paused else 'running'}"
        )
        consumer = clients.consumer(
            settings.bootstrap,
            enable_auto_commit=False,
            metadata_max_age_ms=METADATA_MAX_AGE_MS,
        )
        producer = clients.producer(settings.bootstrap)
        try:
            assign_all(consumer, list(self._base))
            self.health.ready("guard")
            while not self.stopping.is_set():
                self.health.beat("guard")
                for records in poll(consumer, settings.poll_timeout_ms, self.stopping).values():
                    for topic, value in decoded(records):
                        self._observe(producer, self.base(topic), value)
                self._tick(producer)
        finally:
            consumer.close()
            producer.close()
        self.say(f"guard {settings.run_id}: stopped ({self._written_line()})")
        return 0

    def _observe(self, producer: Any, topic: str, value: object) -> None:
        self._write(producer, self._delivered(self.guard.observe(topic, value)))
        if self.alerts is not None:
            self._write_records(producer, self.alerts.observe(topic, value, self.origin.clock.now_us()))

    def _tick(self, producer: Any) -> None:
        now = self.origin.clock.now_us()
        writes, plans = self.guard.tick(now)
        self._write(producer, self._delivered(writes))
        if self.alerts is not None:
            self._write_records(producer, self.alerts.tick(now))
        for plan in plans:
            self._send_canary(producer, plan)

    def _send_canary(self, producer: Any, plan: CanaryPlan) -> None:
        try:
            snapshot_id = self.build(plan)
        except Exception as exc:  # a task whose canary cannot be built must not stop the guard
            log.exception("cannot build canary %s", plan.canary_id)
            self.say(f"guard: cannot build canary {plan.canary_id}: {type(exc).__name__}: {exc}")
            self.guard.state.lost.add(plan.canary_id)
            return
        request = plan.request(self.settings.run_id, snapshot_id, self.origin)
        self._write(producer, [Write(topics.CANARY_REQUESTS.name, request, plan.canary_id)])

    def _delivered(self, writes: list[Write]) -> list[Write]:
        """The guard's own alerts among `writes`, handed to the engine's side sinks too."""
        alerts = [w.record for w in writes if isinstance(w.record, Alert)]
        if alerts and self.alerts is not None:
            self.alerts.deliver(alerts)
        return writes

    def _write_records(self, producer: Any, records: Sequence[Record]) -> None:
        self._write(producer, [Write(topics.ALERTS.name, record) for record in records])

    def _write(self, producer: Any, writes: Sequence[Write]) -> None:
        for write in writes:
            topic = topic_name(self.settings.run_id, write.topic)
            key = None if write.key is None else write.key.encode()
            producer.send(topic, key=key, value=self.codec.encode(write.record)).get(SEND_TIMEOUT_S)
            self.written[write.topic] = self.written.get(write.topic, 0) + 1
            # Decisions are said here; alerts by the engine's log sink when there is one.
            said = write.topic == topics.RUN_CONTROL.name or (
                write.topic == topics.ALERTS.name and self.alerts is None
            )
            if said:
                self.say(
                    f"guard {self.settings.run_id}: {type(write.record).__name__}: {_describe(write.record)}"
                )

    def _written_line(self) -> str:
        return (
            ", ".join(f"{topic} {count}" for topic, count in sorted(self.written.items())) or "wrote nothing"
        )


def _describe(record: Record) -> str:
    """One line for a decision or an alert the guard wrote."""
    if isinstance(record, GraderCleared):
        at = time.strftime("%H:%M:%S", time.gmtime(record.up_to_us / 1e6))
        return f"verifier {record.verifier[:12]}, image {record.image[:19]} vouched for up to {at} UTC"
    if isinstance(record, TrajectoriesQuarantined):
        return (
            f"{record.component} {record.value[:12] or '(any)'} since {record.since_us}: "
            f"{len(record.episode_ids)} trajectories so far ({record.reason})"
        )
    if isinstance(record, VersionChanged):
        return f"{record.component}: pinned {record.pinned[:12] or '(none)'}, graded with {record.seen[:12]}"
    return str(getattr(record, "summary", None) or getattr(record, "reason", ""))
