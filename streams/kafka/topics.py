"""trialog's topics (docs/topics.md), created explicitly since the broker never auto-creates them."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    config: dict[str, str] = field(default_factory=dict)


# The episode log is the record of a run, replayed for audits: it is kept, never aged out.
_KEEP = {"retention.ms": "-1", "retention.bytes": "-1"}
_COMPACT = {"cleanup.policy": "compact"}

TOPICS: tuple[TopicSpec, ...] = (
    TopicSpec("tasks", 1, _COMPACT),
    TopicSpec("episode.commands", 8, _KEEP),
    TopicSpec("episode.events", 8, _KEEP),
    TopicSpec("policy.requests", 8, _KEEP),
    TopicSpec("policy.results", 8, _KEEP),
    TopicSpec("sandbox.requests", 8, _KEEP),
    TopicSpec("sandbox.results", 8, _KEEP),
    TopicSpec("verify.requests", 8, _KEEP),
    TopicSpec("verify.results", 8, _KEEP),
    TopicSpec("trajectories.completed", 8, _KEEP),
    TopicSpec("trajectories.failed", 8, _KEEP),
    TopicSpec("policy.versions", 1, _KEEP),
    TopicSpec("deadletter", 1, _KEEP),
)


def topic_name(run: str, base: str) -> str:
    """`run42.episode.events` for run "run42"; the bare name for the default run ("")."""
    return f"{run}.{base}" if run else base


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
            NewTopic(topic_name(run, spec.name), spec.partitions, replication, topic_configs=spec.config)
            for spec in TOPICS
            if topic_name(run, spec.name) not in existing
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
    return [topic_name(run, spec.name) for spec in TOPICS]
