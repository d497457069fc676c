from __future__ import annotations

from streams.kafka.topics import TOPICS, topic_name


def test_run_prefix() -> None:
    assert topic_name("run42", "episode.events") == "run42.episode.events"
    assert topic_name("", "episode.events") == "episode.events"


def test_the_design_topics_exist_with_their_retention() -> None:
    specs = {spec.name: spec for spec in TOPICS}
    assert {"tasks", "episode.commands", "episode.events", "trajectories.completed", "deadletter"} <= set(
        specs
    )
    assert specs["tasks"].config == {"cleanup.policy": "compact"}
    # The log of record is kept for audits: never aged out.
    assert specs["episode.events"].config["retention.ms"] == "-1"
