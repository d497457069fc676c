"""A stateless worker's Kafka loop: consume a request topic, answer on a result topic, dead-letter the rest.

Shared by the rollout worker (`policy.requests` -> `policy.results`) and the verifier (`verify.requests` ->
`verify.results`); the sandbox worker's loop (`sandbox_agent.kafka_worker`) has the same shape. A consumer
group: each partition, hence each episode, is served by one worker at a time; scale by running more.

At least once: the answer (or dead letter) is produced and acknowledged before the request's offset is
committed, so a crash redelivers the request and the handler answers it again. Handlers are idempotent on
the request's key (episode, step, attempt), and the episode's owner drops the second answer as a duplicate.
A record that cannot be decoded, or that the handler refuses or fails on, goes to `deadletter` with the
reason: never silently dropped, never a crash of the loop.

Batching (`LoopSettings.max_batch` > 1 with a `handle_batch`): one poll takes up to `max_batch` queued
requests and `handle_batch` answers them together (the rollout worker's batched generate); then each is
still sent and committed one by one, in order, exactly as without batching.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from kafka import KafkaConsumer, KafkaProducer

from ops.kafka_serving import poll, serve_in_order
from ops.topics import topic_name
from schemas.codec import Codec, DecodeError, default_codec
from schemas.common import EventMeta
from schemas.deadletter import DeadLetter
from schemas.record import Record
from schemas.sources import Origin

log = logging.getLogger(__name__)

DETAIL_LIMIT = 2000
SEND_TIMEOUT_S = 60.0


class Refused(Exception):
    """A request the handler will not answer: dead-lettered with `reason` (a stable code) and `detail`."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True)
class LoopSettings:
    bootstrap: str
    group_id: str
    run: str = ""  # topic prefix of the run ("" for the bare names)
    poll_timeout_ms: int = 500
    # Longer than one request may take to handle, or the group would think this worker dead.
    max_poll_interval_ms: int = 900_000
    max_batch: int = 1  # requests taken per poll and handed to `handle_batch` together


class Request(Record, Protocol):
    """A work request: its header carries the idempotency key and the episode it belongs to."""

    @property
    def meta(self) -> EventMeta: ...


Req = TypeVar("Req", bound=Request)
Outcome = tuple[bytes, bytes] | Refused  # (key, encoded answer), or why the request is dead-lettered


@dataclass(frozen=True, slots=True)
class Route(Generic[Req]):
    """Which request type a loop reads from which topic, and where its answers go (base topic names)."""

    request_type: type[Req]
    requests: str
    results: str


class RequestLoop(Generic[Req]):
    """Serve `route.requests` with `handle` until `stopping` is set."""

    def __init__(
        self,
        route: Route[Req],
        handle: Callable[[Req], Record],
        settings: LoopSettings,
        origin: Origin,
        codec: Codec | None = None,
        handle_batch: Callable[[list[Req]], Sequence[Record | Refused]] | None = None,
    ) -> None:
        self.route = route
        self.handle = handle
        self.handle_batch = handle_batch
        self.settings = settings
        self.origin = origin
        self.codec = codec or default_codec()
        self.requests_topic = topic_name(settings.run, route.requests)
        self.results_topic = topic_name(settings.run, route.results)
        self.deadletter_topic = topic_name(settings.run, "deadletter")
        self.stopping = threading.Event()

    def run(self) -> None:
        consumer = KafkaConsumer(
            self.requests_topic,
            bootstrap_servers=self.settings.bootstrap,
            group_id=self.settings.group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            # One request at a time unless the handler batches: a slow one must not hold others back.
            max_poll_records=self.settings.max_batch if self.handle_batch else 1,
            max_poll_interval_ms=self.settings.max_poll_interval_ms,
        )
        producer = KafkaProducer(bootstrap_servers=self.settings.bootstrap, acks="all")
        try:
            while not self.stopping.is_set():
                polled = poll(consumer, self.settings.poll_timeout_ms, self.stopping)
                self.serve_polled(consumer, producer, polled)
        finally:
            consumer.close()
            producer.close()

    def serve_polled(self, consumer: Any, producer: KafkaProducer, polled: Any) -> None:
        """Answer a poll's records (together when batching), then send and commit each in order."""
        records = [record for batch in polled.values() for record in batch]
        answers = self.answer_all([record.value for record in records])
        outcomes = dict(zip(map(_position, records), answers, strict=True))

        def serve(record: Any) -> None:
            self.serve(record, producer, outcomes.get(_position(record)))

        serve_in_order(consumer, polled, serve, self.stopping)

    def serve(self, record: Any, producer: KafkaProducer, outcome: Outcome | None = None) -> None:
        """Answer one consumed record (with its `outcome` when already computed), or dead-letter it."""
        outcome = self.answer(record.value) if outcome is None else outcome
        if isinstance(outcome, Refused):
            self._dead_letter(record, producer, outcome)
            return
        key, value = outcome
        headers = [(k, v) for k, v in (record.headers or []) if k == "traceparent"]
        producer.send(self.results_topic, key=key, value=value, headers=headers).get(SEND_TIMEOUT_S)

    def answer(self, value: bytes | None) -> Outcome:
        """(key, encoded answer) for a request's bytes, or why it is refused. Never raises."""
        request = self._decode(value)
        return request if isinstance(request, Refused) else self._answer_one(request)

    def answer_all(self, values: list[bytes | None]) -> list[Outcome]:
        """`answer` for each value, in order; with `handle_batch`, the decodable requests in one call."""
        decoded = [self._decode(value) for value in values]
        requests = [d for d in decoded if not isinstance(d, Refused)]
        if self.handle_batch is None or len(requests) < 2:
            return [d if isinstance(d, Refused) else self._answer_one(d) for d in decoded]
        try:
            answers = iter(self.handle_batch(requests))
            outcomes = [d if isinstance(d, Refused) else self._encoded(d, next(answers)) for d in decoded]
        except Exception:  # one request may have broken the batch: answer each alone to find it
            log.exception("a batch of %d requests failed; answering them one by one", len(requests))
            return [d if isinstance(d, Refused) else self._answer_one(d) for d in decoded]
        return outcomes

    def _decode(self, value: bytes | None) -> Req | Refused:
        if value is None:
            return Refused("empty_record", "a record without a value")
        try:
            return self.codec.decode_as(value, self.route.request_type)
        except DecodeError as exc:
            return Refused(exc.reason.value, exc.detail)

    def _answer_one(self, request: Req) -> Outcome:
        episode = request.meta.episode_id
        try:
            return self._encoded(request, self.handle(request))
        except Refused as exc:
            log.warning("refused a request of %s: %s", episode, exc)
            return exc
        except Exception as exc:  # a bug or a broken dependency: keep the record, keep serving
            log.exception("failed on a request of %s", episode)
            return Refused("handler_error", f"{type(exc).__name__}: {exc}")

    def _encoded(self, request: Req, answer: Record | Refused) -> Outcome:
        if isinstance(answer, Refused):
            log.warning("refused a request of %s: %s", request.meta.episode_id, answer)
            return answer
        return request.meta.episode_id.encode(), self.codec.encode(answer)

    def _dead_letter(self, record: Any, producer: KafkaProducer, refused: Refused) -> None:
        letter = DeadLetter(
            self.origin.record_meta(),
            record.topic,
            record.partition,
            record.offset,
            record.key,
            record.value,
            refused.reason,
            refused.detail[:DETAIL_LIMIT],
            tuple(record.headers or ()),
        )
        producer.send(self.deadletter_topic, value=self.codec.encode(letter)).get(SEND_TIMEOUT_S)


def _position(record: Any) -> tuple[str, int, int]:
    return record.topic, record.partition, record.offset
