"""`trialog worker sandbox`'s loop: consume `sandbox.requests`, answer on `sandbox.results`.

A consumer group (scale by running more workers): each partition, hence each episode, is served by one
worker at a time. At least once (`streams.kafka.serving.serve_requests`): the answer is produced and
acknowledged before the request's offset is committed; a request redelivered after a crash is answered from
the recorded result on the same host, or re-run from the episode's last snapshot on another (at most the
step in flight is redone). The answer is a `StepExecuted`, or an `EpisodeFailed` for a step that cannot be
done (`SandboxWorker.handle`). A request that cannot be decoded, or that the worker fails on (a bug), goes
to `deadletter` with the reason, never silently dropped.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from sandbox_agent.worker import SandboxWorker
from schemas.codec import Codec, DecodeError, default_codec
from schemas.origin import Origin
from schemas.requests import SandboxRequest
from streams.kafka.serving import SEND_TIMEOUT_S, Consuming, dead_letter, serve_requests, trace_headers
from streams.kafka.topics import topic_name
from streams.telemetry import tracing

log = logging.getLogger(__name__)

DEFAULT_GROUP = "trialog-sandbox"


@dataclass(frozen=True, slots=True)
class KafkaSettings:
    bootstrap: str
    run: str = ""  # topic prefix of the run ("" for the bare names)
    group_id: str = DEFAULT_GROUP
    poll_timeout_ms: int = 500
    # Longer than any step may take (timeout + snapshot), or the group would think this worker dead.
    max_poll_interval_ms: int = 900_000


class SandboxRequestLoop:
    def __init__(
        self, worker: SandboxWorker, settings: KafkaSettings, origin: Origin, codec: Codec | None = None
    ):
        self.worker = worker
        self.settings = settings
        self.origin = origin
        self.codec = codec or default_codec()
        self.requests_topic = topic_name(settings.run, "sandbox.requests")
        self.results_topic = topic_name(settings.run, "sandbox.results")
        self.deadletter_topic = topic_name(settings.run, "deadletter")
        self.stopping = threading.Event()

    def run(self) -> None:
        """Serve until `stopping` is set."""
        s = self.settings
        consuming = Consuming(
            s.bootstrap, s.group_id, self.requests_topic, s.poll_timeout_ms, s.max_poll_interval_ms
        )
        serve_requests(consuming, self._serve, self.stopping)

    def _serve(self, record: Any, producer: Any) -> None:
        with tracing.consumed_span(
            "sandbox.exec", record.key, None, headers=record.headers,
            topic=record.topic, partition=record.partition, offset=record.offset,
        ):  # fmt: skip
            self._serve_traced(record, producer)

    def _serve_traced(self, record: Any, producer: Any) -> None:
        try:
            request = self.codec.decode_as(record.value, SandboxRequest)
        except DecodeError as exc:
            self._dead_letter(record, producer, exc.reason.value, exc.detail)
            return
        tracing.annotate(request)
        try:
            answer = self.worker.handle(request)
        except Exception as exc:  # a bug or a broken dependency: keep the record, keep serving
            log.exception("request for %s step %d failed", request.meta.episode_id, request.meta.step)
            self._dead_letter(record, producer, "handler_error", f"{type(exc).__name__}: {exc}")
            return
        key = request.meta.episode_id.encode()
        value = self.codec.encode(answer)
        headers = trace_headers(record)  # this span is the answer's parent
        producer.send(self.results_topic, key=key, value=value, headers=headers).get(SEND_TIMEOUT_S)

    def _dead_letter(self, record: Any, producer: Any, reason: str, detail: str) -> None:
        dead_letter(producer, self.deadletter_topic, record, self.origin, self.codec, reason, detail)
