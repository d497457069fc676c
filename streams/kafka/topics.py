"""Creating a run's topics (the catalogue `schemas.topics`, described in docs/topics.md) on the broker,
which never auto-creates them."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from schemas.topics import TOPICS

log = logging.getLogger(__name__)

# A topic is usable once every partition has a leader in the broker's metadata; until then a consumer that
# subscribes by name is given no partitions (and kafka-python looks again only at its next metadata refresh).
READY_TIMEOUT_S = 60.0
# Replicas per partition on a cluster of three brokers or more; a smaller cluster gets one per broker.
REPLICATION = 3


@dataclass(frozen=True, slots=True)
class Durability:
    """How a run's topics are replicated: `replication` copies of each partition, and a write acknowledged
    (`acks=all`) only once `min_insync` of them have it. With 3 and 2, a record acknowledged to a producer
    survives the loss of any one broker, and producers keep writing while one broker is down."""

    replication: int
    min_insync: int

    @classmethod
    def for_brokers(cls, brokers: int) -> Durability:
        replication = max(1, min(REPLICATION, brokers))
        return cls(replication, max(1, min(2, replication - 1)))

    def topic_configs(self) -> dict[str, str]:
        return {"min.insync.replicas": str(self.min_insync)}


def cluster_durability(bootstrap: str) -> Durability:
    """The durability a run's topics get on the cluster at `bootstrap` (from its live broker count)."""
    from streams.kafka import clients

    admin = clients.admin(bootstrap, client_id="trialog-topics")
    try:
        return Durability.for_brokers(len(admin.describe_cluster()["brokers"]))
    finally:
        admin.close()


def ensure_topics(
    bootstrap: str,
    run: str = "",
    replication: int | None = None,
    ready_timeout_s: float = READY_TIMEOUT_S,
) -> list[str]:
    """Create the missing topics of `run` and wait until all of them have a leader for every partition;
    returns the names it created. Raises `KafkaTimeoutError` when they are not ready by `ready_timeout_s`.
    `replication` defaults to the cluster's (`Durability.for_brokers`: 3 copies, 2 in sync, on a cluster of
    three brokers; 1 on a single broker)."""
    from kafka.errors import KafkaConnectionError, NodeNotReadyError, NotControllerError, UnknownBrokerIdError

    # What making topics may meet on a cluster that is still forming: worth another try.
    transient = (UnknownBrokerIdError, NodeNotReadyError, NotControllerError, KafkaConnectionError)
    give_up = time.monotonic() + ready_timeout_s
    while True:
        try:
            return _ensure_topics(bootstrap, run, replication, ready_timeout_s)
        except transient as exc:
            # A cluster just formed (or a broker restarting): the admin client can be told of a controller
            # it has no metadata for yet (seen: UnknownBrokerIdError right after three brokers came up).
            if time.monotonic() >= give_up:
                raise
            log.info("making the topics of run %r: %s; trying again", run, exc)
            time.sleep(0.5)


def _ensure_topics(bootstrap: str, run: str, replication: int | None, ready_timeout_s: float) -> list[str]:
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    from streams.kafka import clients

    admin = clients.admin(bootstrap, client_id="trialog-topics")
    try:
        if replication is None:
            durability = Durability.for_brokers(len(admin.describe_cluster()["brokers"]))
        else:
            durability = Durability(replication, max(1, min(2, replication - 1)))
        existing = set(admin.list_topics())
        wanted = [
            NewTopic(
                topic.of(run),
                topic.partitions,
                durability.replication,
                topic_configs={**topic.config, **durability.topic_configs()},
            )
            for topic in TOPICS
            if topic.of(run) not in existing
        ]
        # Another process may create some between our listing and our request: that is fine.
        if wanted:
            with contextlib.suppress(TopicAlreadyExistsError):
                admin.create_topics(wanted)
        # All of the run's topics, not only the new ones: another process may have just created the rest.
        admin.wait_for_topics(run_topics(run), timeout_ms=int(ready_timeout_s * 1000))
        return [topic.name for topic in wanted]
    finally:
        admin.close()


def run_topics(run: str) -> list[str]:
    """The names of all of `run`'s topics."""
    return [topic.of(run) for topic in TOPICS]


def existing_topics(bootstrap: str, names: list[str], timeout_s: float = 10.0) -> set[str]:
    """Which of `names` exist on the broker (a reader asked for a missing topic would wait for it)."""
    from streams.kafka import clients

    consumer = clients.consumer(bootstrap, group_id=None, bootstrap_timeout_ms=int(timeout_s * 1000))
    try:
        return set(names) & set(consumer.topics())
    finally:
        consumer.close()


def await_run_topics(
    bootstrap: str,
    run: str,
    stopping: threading.Event,
    say: Callable[[str], None],
    every_s: float = 1.0,
) -> bool:
    """Wait until every topic of `run` exists (made by `trialog run start`, which may come after the worker:
    a deployment starts its workers first); False if `stopping` is set first. A worker must not make them
    itself: a topic created by a client's auto-declaration gets that client's partition count and
    replication, not the catalogue's."""
    wanted = run_topics(run)
    said = False
    while not stopping.is_set():
        missing = sorted(set(wanted) - existing_topics(bootstrap, wanted))
        if not missing:
            if said:
                say(f"the topics of run {run or '(default)'} are there")
            return True
        if not said:
            say(
                f"waiting for the {len(missing)} missing topics of run {run or '(default)'} "
                f"(e.g. {missing[0]}); `trialog run start` makes them"
            )
            said = True
        stopping.wait(every_s)
    return False
