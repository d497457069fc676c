"""A stateless worker's Kafka loop: consume a request topic, answer on a result topic, dead-letter the rest.

Shared by the rollout worker (`policy.requests` -> `policy.results`) and the verifier (`verify.requests` ->
`verify.results`); the sandbox worker's loop (`sandbox_agent.kafka_worker`) has the same shape. A consumer
group: each partition, hence each episode, is served by one worker at a time; scale by running more.

At least once: the answer (or dead letter) is produced and acknowledged before the request's offset is
committed, so a crash redelivers the request and the handler answers it again. Handlers are idempotent on
the request's key (episode, step, attempt), and the episode's owner drops the second answer as a duplicate.
A record that cannot be decoded, or that the handler refuses or fails on, goes to `deadletter` with the
reason: never silently dropped, never a crash of the loop.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from kafka import KafkaConsumer, KafkaProducer

from ops.kafka_serving import poll, serve_in_order
from ops.telemetry import metrics, tracing
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


class Request(Record, Protocol):
    """A work request: its header carries the idempotency key and the episode it belongs to."""

    @property
    def meta(self) -> EventMeta: ...


Req = TypeVar("Req", bound=Request)


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
    ) -> None:
        self.route = route
        self.handle = handle
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
            max_poll_records=1,  # one request at a time: a slow one must not hold others back in a batch
            max_poll_interval_ms=self.settings.max_poll_interval_ms,
        )
        producer = KafkaProducer(bootstrap_servers=self.settings.bootstrap, acks="all")
        try:
            while not self.stopping.is_set():
                polled = poll(consumer, self.settings.poll_timeout_ms, self.stopping)
                serve_in_order(consumer, polled, lambda record: self.serve(record, producer), self.stopping)
        finally:
            consumer.close()
            producer.close()

    def serve(self, record: Any, producer: KafkaProducer) -> None:
        """Answer one consumed record, or dead-letter it; traced as one span of the record's episode."""
        with tracing.consumed_span(
            tracing.span_name(self.route.requests), record.key, None, headers=record.headers,
            topic=record.topic, partition=record.partition, offset=record.offset,
        ):  # fmt: skip
            self._serve(record, producer)

    def _serve(self, record: Any, producer: KafkaProducer) -> None:
        outcome = self.answer(record.value)
        if isinstance(outcome, Refused):
            self._dead_letter(record, producer, outcome)
            return
        key, value = outcome
        headers = tracing.outgoing_headers(record.headers)  # this span is the answer's parent
        producer.send(self.results_topic, key=key, value=value, headers=headers).get(SEND_TIMEOUT_S)

    def answer(self, value: bytes | None) -> tuple[bytes, bytes] | Refused:
        """(key, encoded answer) for a request's bytes, or why it is refused. Never raises."""
        if value is None:
            return Refused("empty_record", "a record without a value")
        try:
            request = self.codec.decode_as(value, self.route.request_type)
        except DecodeError as exc:
            return Refused(exc.reason.value, exc.detail)
        tracing.annotate(request)
        episode = request.meta.episode_id
        try:
            answer = self.handle(request)
            return episode.encode(), self.codec.encode(answer)
        except Refused as exc:
            log.warning("refused a request of %s: %s", episode, exc)
            return exc
        except Exception as exc:  # a bug or a broken dependency: keep the record, keep serving
            log.exception("failed on a request of %s", episode)
            return Refused("handler_error", f"{type(exc).__name__}: {exc}")

    def _dead_letter(self, record: Any, producer: KafkaProducer, refused: Refused) -> None:
        metrics.dead_letter(refused.reason, self.origin.producer.kind)
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
