"""Episode ends, heard by a sandbox worker: the signal to drop what it keeps for an episode.

A sandbox worker keeps, per episode, a sandbox (held for the next step) and the results of its executed
steps (answered again to a redelivered request). Nothing in `sandbox.requests` says that an episode is
over: its owner writes that on `episode.events` (an `EpisodeCompleted` or the episode's `EpisodeFailed`,
both terminal there). `EpisodeEnds` follows that topic from its end, outside any consumer group (every
worker hears every end: any of them may hold the episode's results), and calls `on_end(episode_id)`.

Ends written while a worker was down, or while it could not reach the broker, are not heard: the bounds of
the executed-steps store (`idempotent.Retention`) and the worker's LRU of held sandboxes cover those. The
cost is one decode per episode event on every sandbox worker.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from kafka.errors import KafkaError

from schemas.codec import Codec, DecodeError, default_codec
from schemas.events import EpisodeCompleted, EpisodeFailed
from schemas.topics import EPISODE_EVENTS
from streams.kafka.serving import METADATA_MAX_AGE_MS

log = logging.getLogger(__name__)

RETRY_S = 2.0
POLL_MS = 500


def ended_episode(value: bytes | None, codec: Codec) -> str | None:
    """The episode an `episode.events` record ends; None for any other record (or one that cannot be read:
    the streams worker wrote it, and its own readers report it)."""
    if value is None:
        return None
    try:
        event = codec.decode(value)
    except DecodeError:
        return None
    if isinstance(event, (EpisodeCompleted, EpisodeFailed)):
        return event.meta.episode_id
    return None


class EpisodeEnds:
    """Follows `episode.events` of `run` in a daemon thread from `start` to `close`."""

    def __init__(self, bootstrap: str, run: str, on_end: Callable[[str], None]) -> None:
        self.bootstrap = bootstrap
        self.topic = EPISODE_EVENTS.of(run)
        self.on_end = on_end
        self.heard = 0
        self.following = threading.Event()  # set once the consumer sits at the topic's end
        self._stopping = threading.Event()
        self._codec = default_codec()
        self._thread = threading.Thread(target=self._run, name="episode-ends", daemon=True)

    def start(self) -> EpisodeEnds:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self._follow()
            except (KafkaError, OSError) as exc:
                log.warning("episode ends: %s unreadable (%s); retrying", self.topic, exc)
            except Exception:  # a dead follower would let the store fill to its cap silently
                log.exception("episode ends: following %s failed; retrying", self.topic)
            self.following.clear()
            self._stopping.wait(RETRY_S)

    def _follow(self) -> None:
        from kafka import TopicPartition

        from streams.kafka import clients

        consumer: Any = clients.consumer(
            self.bootstrap,
            enable_auto_commit=False,
            metadata_max_age_ms=METADATA_MAX_AGE_MS,
        )
        try:
            partitions: set[int] = set()
            while not partitions:
                if self._stopping.is_set():
                    return
                partitions = consumer.partitions_for_topic(self.topic) or set()
                if not partitions:
                    self._stopping.wait(RETRY_S)
            assigned = [TopicPartition(self.topic, p) for p in sorted(partitions)]
            consumer.assign(assigned)
            consumer.seek_to_end(*assigned)
            for partition in assigned:
                consumer.position(partition)  # resolve the end now: what is written from here on is heard
            self.following.set()
            log.info("episode ends: following %s", self.topic)
            while not self._stopping.is_set():
                for records in consumer.poll(timeout_ms=POLL_MS).values():
                    for record in records:
                        episode_id = ended_episode(record.value, self._codec)
                        if episode_id is not None:
                            self.heard += 1
                            self._ended(episode_id)
        finally:
            consumer.close()

    def _ended(self, episode_id: str) -> None:
        try:
            self.on_end(episode_id)
        except Exception:  # one episode's clean-up failing must not stop the others'
            log.exception("episode ends: dropping what is kept for %s failed", episode_id)
