"""Put validated tasks on the compacted `tasks` topic: a `TaskPublished` record keyed by task id.

Each task's bundle and initial snapshot go to the object store first (`actors.tasks.bundle`), so that a
record on the topic always names blobs that exist.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from pathlib import Path

from actors.tasks.bundle import BUNDLE_MEDIA_TYPE, bundle, initial_snapshot, task_record
from actors.tasks.spec import load_task
from schemas.blobs import ObjectStore
from schemas.origin import Origin
from schemas.topics import TASKS
from streams.errors import StackError
from streams.kafka.topics import ensure_topics


def publish_tasks(
    folders: Sequence[Path], bootstrap: str, store: ObjectStore, image: str, *, run: str = ""
) -> list[str]:
    """Publish each task, its bundle and initial snapshot put in `store`, to be run on `image`; returns the
    published ids. Re-publishing a task replaces it (compaction)."""
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    from schemas.kafka_serde import AvroSerializer

    origin = Origin.system("tasks-publisher", socket.gethostname())
    try:
        ensure_topics(bootstrap, run)
        producer = KafkaProducer(bootstrap_servers=bootstrap, value_serializer=AvroSerializer())
    except KafkaError as exc:
        raise StackError(
            f"Kafka at {bootstrap} is not reachable: {exc}", "start the stack: trialog up"
        ) from exc
    published = []
    try:
        for folder in folders:
            task = load_task(folder)
            ref = store.put(bundle(task), BUNDLE_MEDIA_TYPE)
            record = task_record(task, ref, origin, image, initial_snapshot(task, store))
            producer.send(TASKS.of(run), key=task.id.encode(), value=record).get(timeout=30)
            published.append(task.id)
    finally:
        producer.close()
    return published
