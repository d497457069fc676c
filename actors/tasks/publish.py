"""Put tasks on the compacted `tasks` topic: a `TaskPublished` record keyed by task id, and people's reviews,
`TaskReviewed` records keyed by `review/<id>/<version>` (`schemas.publications.review_key`).

Each task's bundle and initial snapshot go to the object store first (`actors.tasks.bundle`), so that a
record on the topic always names blobs that exist. A task version whose latest review is a rejection is
never published; an accepted one is published saying so (`TaskPublished.review`, `reviewer`).
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actors.tasks.bundle import BUNDLE_MEDIA_TYPE, bundle, initial_snapshot, task_record
from actors.tasks.review import latest_reviews, review_of
from actors.tasks.spec import load_task
from schemas.blobs import ObjectStore
from schemas.origin import Origin
from schemas.publications import ReviewDecision, ReviewStatus, TaskReviewed, review_key
from schemas.topics import TASKS
from streams.errors import StackError
from streams.kafka.topics import ensure_topics


@dataclass(frozen=True)
class Publication:
    """What `publish_tasks` did: the ids published (and their folders), and those refused because a
    reviewer rejected them."""

    published: tuple[str, ...]
    rejected: tuple[str, ...] = ()
    folders: tuple[Path, ...] = ()


def publish_tasks(
    folders: Sequence[Path], bootstrap: str, store: ObjectStore, image: str, *, run: str = ""
) -> Publication:
    """Publish each task, its bundle and initial snapshot put in `store`, to be run on `image`, unless its
    latest review at its version (read from the run's `tasks` topic) rejects it. Re-publishing a task
    replaces it (compaction)."""
    origin = Origin.system("tasks-publisher", socket.gethostname())
    published: list[str] = []
    rejected: list[str] = []
    published_folders: list[Path] = []
    with _producer(bootstrap, run) as producer:
        reviews = read_reviews(bootstrap, run)
        for folder in folders:
            task = load_task(folder)
            review = review_of(task, reviews)
            if review is not None and review.decision is ReviewDecision.REJECTED:
                rejected.append(task.id)
                continue
            ref = store.put(bundle(task), BUNDLE_MEDIA_TYPE)
            record = task_record(task, ref, origin, image, initial_snapshot(task, store))
            if review is not None:
                record = dataclasses.replace(record, review=ReviewStatus.ACCEPTED, reviewer=review.reviewer)
            producer.send(TASKS.of(run), key=task.id.encode(), value=record).get(timeout=30)
            published.append(task.id)
            published_folders.append(folder)
    return Publication(tuple(published), tuple(rejected), tuple(published_folders))


def read_reviews(bootstrap: str, run: str = "") -> dict[tuple[str, str], TaskReviewed]:
    """The latest review of each task version on the run's `tasks` topic (created when missing), read to
    its end now."""
    from kafka.errors import KafkaError

    from streams.kafka.reader import ReadError, read_to_end

    try:
        ensure_topics(bootstrap, run)
        return latest_reviews(value for _topic, value in read_to_end(bootstrap, [TASKS.of(run)]))
    except (KafkaError, ReadError) as exc:
        raise StackError(
            f"cannot read {TASKS.of(run)} on {bootstrap}: {exc!r}", "check the stack: trialog status"
        ) from exc


def record_reviews(reviews: Sequence[TaskReviewed], bootstrap: str, *, run: str = "") -> None:
    """Put `reviews` on the run's `tasks` topic, each acknowledged before the next is sent."""
    with _producer(bootstrap, run) as producer:
        for review in reviews:
            key = review_key(review.task_id, review.task_version)
            producer.send(TASKS.of(run), key=key, value=review).get(timeout=30)


@contextmanager
def _producer(bootstrap: str, run: str) -> Iterator[Any]:
    from kafka.errors import KafkaError

    from schemas.kafka_serde import AvroSerializer
    from streams.kafka import clients

    try:
        ensure_topics(bootstrap, run)
        producer = clients.producer(bootstrap, value_serializer=AvroSerializer())
    except KafkaError as exc:
        raise StackError(
            f"Kafka at {bootstrap} is not reachable: {exc}", "start the stack: trialog up"
        ) from exc
    try:
        yield producer
    finally:
        producer.close()
