"""Creating a run's topics (the catalogue `schemas.topics`, described in docs/topics.md) on the broker,
which never auto-creates them."""

from __future__ import annotations

import contextlib

from schemas.topics import TOPICS

# A topic is usable once every partition has a leader in the broker's metadata; until then a consumer that
# subscribes by name is given no partitions (and kafka-python looks again only at its next metadata refresh).
READY_TIMEOUT_S = 60.0


def ensure_topics(
    bootstrap: str, run: str = "", replication: int = 1, ready_timeout_s: float = READY_TIMEOUT_S
) -> list[str]:
    """Create the missing topics of `run` and wait until all of them have a leader for every partition;
    returns the names it created. Raises `KafkaTimeoutError` when they are not ready by `ready_timeout_s`."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="trialog-topics")
    try:
        existing = set(admin.list_topics())
        wanted = [
            NewTopic(topic.of(run), topic.partitions, replication, topic_configs=dict(topic.config))
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
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, bootstrap_timeout_ms=int(timeout_s * 1000)
    )
    try:
        return set(names) & set(consumer.topics())
    finally:
        consumer.close()
