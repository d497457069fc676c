"""A stateless worker's Kafka loop: consume a request topic, answer on a result topic, dead-letter the rest.

The one loop of the rollout worker (`policy.requests` -> `policy.results`), the sandbox worker
(`sandbox.requests` -> `sandbox.results`) and the verifier (`verify.requests` -> `verify.results`): each
worker is a `Route` and a handler. A consumer group: each partition, hence each episode, is served by one
worker at a time; scale by running more.

At least once: the answer (or dead letter) is produced and acknowledged before the request's offset is
committed, so a crash redelivers the request and the handler answers it again. Handlers are idempotent on
the request's key (episode, step, attempt), and the episode's owner drops the second answer as a duplicate.
A record that cannot be decoded, or that the handler refuses or fails on, goes to `deadletter` with the
reason: never silently dropped, never a crash of the loop. So does one whose serving failed anywhere else
(tracing, a batch's `prepare`, encoding: `serve_error`) or whose answer is too big for the broker
(`answer_too_large`); only a Kafka error escapes `serve`, and the floor rewinds and serves the record again.

Batching (`LoopSettings.max_batch` > 1 with a `handle_batch`): one poll takes up to `max_batch` queued
requests and `handle_batch` answers them together (the rollout worker's batched generate); then each is
still sent and committed one by one, in order, exactly as without batching.

Tracing: each request has its span (`policy.call`, `sandbox.exec`, `verify`: `tracing.span_name`),
parented from the request's `traceparent`, and its answer names that span. A batched request's span covers
sending its answer, not the shared generation, which ran before the span (one generation serves several
episodes, hence several traces).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from kafka.errors import KafkaError, MessageSizeTooLargeError, RecordListTooLargeError

from schemas.codec import Codec, DecodeError, default_codec
from schemas.common import EventMeta
from schemas.origin import Origin
from schemas.record import Record
from schemas.topics import DEADLETTER, Topic
from streams.kafka.serving import SEND_TIMEOUT_S, LoopSettings, dead_letter, serve_requests, trace_headers
from streams.lifecycle import Health
from streams.telemetry import tracing

# The loop's settings are part of its API (the workers' command lines build them beside the loop).
__all__ = ["LoopSettings", "Refused", "Request", "RequestLoop", "Route"]

log = logging.getLogger(__name__)


class Refused(Exception):
    """A request the handler will not answer: dead-lettered with `reason` (a stable code) and `detail`."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class Request(Record, Protocol):
    """A work request: its header carries the idempotency key and the episode it belongs to."""

    @property
    def meta(self) -> EventMeta: ...


Req = TypeVar("Req", bound=Request)
Outcome = tuple[bytes, bytes] | Refused  # (key, encoded answer), or why the request is dead-lettered


@dataclass(frozen=True, slots=True)
class Route(Generic[Req]):
    """Which request type a loop reads from which topic, and where its answers go."""

    request_type: type[Req]
    requests: Topic
    results: Topic

    def __post_init__(self) -> None:
        if self.request_type not in self.requests.records:  # the catalogue says what a topic carries
            raise ValueError(f"{self.requests.name} carries no {self.request_type.__name__}")


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
        self.requests_topic = route.requests.of(settings.run)
        self.results_topic = route.results.of(settings.run)
        self.deadletter_topic = DEADLETTER.of(settings.run)
        self.stopping = threading.Event()
        self.health = Health()  # a worker with several loops gives them one (as with `stopping`)
        # A poll's requests (decoded, to annotate their spans) and answers, computed together.
        self._ahead: dict[tuple[str, int, int], tuple[Req | Refused, Outcome]] = {}

    def run(self) -> None:
        # One request per poll unless the handler batches: a slow one must not hold others back.
        prepare = self.answer_ahead if self.handle_batch is not None else None
        serve_requests(
            self.settings, self.requests_topic, self.serve, self.stopping, prepare=prepare, health=self.health
        )

    def answer_ahead(self, records: Sequence[Any]) -> None:
        """Answer a poll's records together (batched generation); `serve` then sends each in order."""
        self._ahead = {}  # answered one by one by `serve`, each in its request's span (also if this fails)
        if self.handle_batch is None or len(records) < 2:
            return
        decoded = [self._decode(record.value) for record in records]
        answers = self._answer_decoded(decoded)
        self._ahead = dict(zip(map(_position, records), zip(decoded, answers, strict=True), strict=True))

    def serve(self, record: Any, producer: Any) -> None:
        """Answer one consumed record (computed ahead when its poll was answered together), or
        dead-letter it; traced as one span of the record's episode. Raises only a Kafka error (the floor
        then serves the record again once Kafka answers): anything else dead-letters the record."""
        try:
            with tracing.consumed_span(
                tracing.span_name(self.route.requests.name), record.key, None, headers=record.headers,
                topic=record.topic, partition=record.partition, offset=record.offset,
            ):  # fmt: skip
                self._serve(record, producer)
        except (MessageSizeTooLargeError, RecordListTooLargeError) as exc:  # retrying would never get through
            log.warning("the answer to %s@%d is too large: %s", record.topic, record.offset, exc)
            self._dead_letter(producer, record, Refused("answer_too_large", f"{type(exc).__name__}: {exc}"))
        except KafkaError:
            raise
        except Exception as exc:  # a bug in tracing, encoding, ...: the record is kept, the loop serves on
            log.exception("failed to serve %s@%d", record.topic, record.offset)
            self._dead_letter(producer, record, Refused("serve_error", f"{type(exc).__name__}: {exc}"))

    def _dead_letter(self, producer: Any, record: Any, refused: Refused) -> None:
        dead_letter(
            producer, self.deadletter_topic, record, self.origin, self.codec, refused.reason, refused.detail
        )

    def _serve(self, record: Any, producer: Any) -> None:
        ahead = self._ahead.pop(_position(record), None)
        if ahead is None:
            outcome = self.answer(record.value)
        else:
            request, outcome = ahead
            if not isinstance(request, Refused):
                tracing.annotate(request)
        if isinstance(outcome, Refused):
            self._dead_letter(producer, record, outcome)
            return
        key, value = outcome
        headers = trace_headers(record)  # this span is the answer's parent
        producer.send(self.results_topic, key=key, value=value, headers=headers).get(SEND_TIMEOUT_S)

    def answer(self, value: bytes | None) -> Outcome:
        """(key, encoded answer) for a request's bytes, or why it is refused. Never raises."""
        request = self._decode(value)
        if isinstance(request, Refused):
            return request
        tracing.annotate(request)
        return self._answer_one(request)

    def _answer_decoded(self, decoded: list[Req | Refused]) -> list[Outcome]:
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
        except Exception as exc:  # the codec's contract is DecodeError; bytes on the wire must not break it
            log.exception("the codec failed on a record")
            return Refused("undecodable", f"{type(exc).__name__}: {exc}")

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


def _position(record: Any) -> tuple[str, int, int]:
    return record.topic, record.partition, record.offset
