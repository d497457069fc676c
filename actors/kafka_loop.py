"""A stateless worker's Kafka loop: consume a request topic, answer on a result topic, dead-letter the rest.

Shared by the rollout worker (`policy.requests` -> `policy.results`) and the verifier (`verify.requests` ->
`verify.results`); consuming, committing and waiting for Kafka are `ops.kafka_serving.serve_requests`, which
the sandbox worker's loop (`sandbox_agent.kafka_worker`) uses too. A consumer group: each partition, hence
each episode, is served by one worker at a time; scale by running more.

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

from ops.kafka_serving import SEND_TIMEOUT_S, Consuming, dead_letter, serve_requests, trace_headers
from ops.topics import topic_name
from schemas.codec import Codec, DecodeError, default_codec
from schemas.common import EventMeta
from schemas.record import Record
from schemas.sources import Origin

log = logging.getLogger(__name__)


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
        s = self.settings
        consuming = Consuming(
            s.bootstrap, s.group_id, self.requests_topic, s.poll_timeout_ms, s.max_poll_interval_ms
        )
        serve_requests(consuming, self.serve, self.stopping)

    def serve(self, record: Any, producer: Any) -> None:
        """Answer one consumed record, or dead-letter it."""
        outcome = self.answer(record.value)
        if isinstance(outcome, Refused):
            dead_letter(
                producer,
                self.deadletter_topic,
                record,
                self.origin,
                self.codec,
                outcome.reason,
                outcome.detail,
            )
            return
        key, value = outcome
        producer.send(self.results_topic, key=key, value=value, headers=trace_headers(record)).get(
            SEND_TIMEOUT_S
        )

    def answer(self, value: bytes | None) -> tuple[bytes, bytes] | Refused:
        """(key, encoded answer) for a request's bytes, or why it is refused. Never raises."""
        if value is None:
            return Refused("empty_record", "a record without a value")
        try:
            request = self.codec.decode_as(value, self.route.request_type)
        except DecodeError as exc:
            return Refused(exc.reason.value, exc.detail)
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
