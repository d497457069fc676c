"""The topic catalogue: unique names, the design's retention, and record types that agree with the codec,
the schemas' own documentation and what the episodes' owner accepts."""

from __future__ import annotations

import json
import re

from schemas import topics
from schemas.catalog import SCHEMA_DIR
from schemas.codec import DEFAULT_TYPES
from schemas.state import EpisodeState
from schemas.topics import EPISODE_EVENTS, TASKS, TOPICS, Key, topic_name
from streams import worker as streams_worker


def test_run_prefix() -> None:
    assert topic_name("run42", "episode.events") == "run42.episode.events"
    assert topic_name("", "episode.events") == "episode.events"
    assert EPISODE_EVENTS.of("run42") == "run42.episode.events" and EPISODE_EVENTS.of("") == "episode.events"


def test_names_are_unique_and_every_topic_is_created() -> None:
    names = [topic.name for topic in TOPICS]
    assert len(names) == len(set(names)) == 20
    constants = [value for value in vars(topics).values() if isinstance(value, topics.Topic)]
    assert set(constants) == set(TOPICS)  # no topic defined beside the catalogue's list


def test_the_design_topics_exist_with_their_retention() -> None:
    assert TASKS.config == {"cleanup.policy": "compact"} and TASKS.key is Key.TASK_ID
    # The log of record is kept for audits: never aged out.
    assert EPISODE_EVENTS.config["retention.ms"] == "-1" and EPISODE_EVENTS.key is Key.EPISODE_ID
    assert all(topic.config["retention.ms"] == "-1" for topic in TOPICS if topic is not TASKS)


def test_every_message_type_of_the_codec_is_on_a_topic_and_nothing_else_is() -> None:
    on_topics = {cls for topic in TOPICS for cls in topic.records}
    # EpisodeState is the streams worker's table row (its changelog is Faust's), not a record of a run topic.
    assert on_topics == set(DEFAULT_TYPES) - {EpisodeState}


def test_the_schemas_say_the_same_topic() -> None:
    """A schema's doc names its topic ("(topic policy.requests)"): the catalogue agrees."""
    by_schema = {cls.SCHEMA: cls for cls in DEFAULT_TYPES}
    checked = 0
    for path in SCHEMA_DIR.glob("*.avsc"):
        schema = json.loads(path.read_text())
        named = re.search(r"topic ([a-z.]*[a-z])", schema.get("doc", ""))
        if named is None or "version" not in schema:
            continue
        cls = by_schema[f"{schema['namespace']}.{schema['name']}"]
        assert cls in topics.by_name(named.group(1)).records, path.name
        checked += 1
    assert checked == 20


def test_the_owner_accepts_exactly_the_result_topics_records() -> None:
    assert {topic.name: topic.records for topic in topics.ANSWERS} == streams_worker._ANSWER_TYPES
    # canary.requests is the guard's, answered on canary.results: never the owner's business; the owner
    # sends progress.requests (Effects.progress) but never awaits an answer.
    requests = {
        topic.name: topic.records
        for topic in TOPICS
        if topic.name.endswith(".requests")
        and topic not in (topics.CANARY_REQUESTS, topics.PROGRESS_REQUESTS)
    }
    assert {base: (cls,) for cls, base in streams_worker._REQUEST_TOPICS.items()} == requests
