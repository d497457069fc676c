"""trialog's topics (DESIGN.md, "The log"), created explicitly since the broker never auto-creates them."""

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


def ensure_topics(bootstrap: str, run: str = "", replication: int = 1) -> list[str]:
    """Create the missing topics of `run`; returns the names it created."""
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
        return [topic.name for topic in wanted]
    finally:
        admin.close()
