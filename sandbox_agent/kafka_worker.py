"""`trialog worker sandbox`'s loop: consume `sandbox.requests`, answer on `sandbox.results`.

A consumer group (scale by running more workers): each partition, hence each episode, is served by one
worker at a time. At least once: the answer is produced and acknowledged before the request's offset is
committed; a request redelivered after a crash is answered from the recorded result on the same host, or
re-run from the episode's last snapshot on another (at most the step in flight is redone). A request that
cannot be decoded or executed goes to `deadletter` with the reason, never silently dropped.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from kafka import KafkaConsumer, KafkaProducer

from ops.kafka_serving import poll, serve_in_order
from ops.telemetry import metrics, tracing
from ops.topics import topic_name
from sandbox_agent.errors import SandboxError
from sandbox_agent.worker import SandboxWorker
from schemas.codec import Codec, DecodeError, default_codec
from schemas.deadletter import DeadLetter
from schemas.requests import SandboxRequest
from schemas.sources import Origin

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
        consumer = KafkaConsumer(
            self.requests_topic,
            bootstrap_servers=self.settings.bootstrap,
            group_id=self.settings.group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_poll_records=1,  # one step at a time: a long step must not hold others back in a batch
            max_poll_interval_ms=self.settings.max_poll_interval_ms,
        )
        producer = KafkaProducer(bootstrap_servers=self.settings.bootstrap, acks="all")
        try:
            while not self.stopping.is_set():
                polled = poll(consumer, self.settings.poll_timeout_ms, self.stopping)
                serve_in_order(consumer, polled, lambda record: self._serve(record, producer), self.stopping)
        finally:
            consumer.close()
            producer.close()

    def _serve(self, record: Any, producer: KafkaProducer) -> None:
        with tracing.consumed_span(
            "sandbox.exec", record.key, None, headers=record.headers,
            topic=record.topic, partition=record.partition, offset=record.offset,
        ):  # fmt: skip
            self._serve_traced(record, producer)

    def _serve_traced(self, record: Any, producer: KafkaProducer) -> None:
        try:
            request = self.codec.decode_as(record.value, SandboxRequest)
        except DecodeError as exc:
            self._dead_letter(record, producer, exc.reason.value, exc.detail)
            return
        tracing.annotate(request)
        try:
            answer = self.worker.handle(request)
        except SandboxError as exc:
            log.error("request for %s step %d failed: %s", request.meta.episode_id, request.meta.step, exc)
            self._dead_letter(record, producer, "sandbox_error", str(exc))
            return
        key = request.meta.episode_id.encode()
        headers = tracing.outgoing_headers(record.headers)  # this span is the answer's parent
        producer.send(self.results_topic, key=key, value=self.codec.encode(answer), headers=headers).get(60)

    def _dead_letter(self, record: Any, producer: KafkaProducer, reason: str, detail: str) -> None:
        metrics.dead_letter(reason, "sandbox")
        letter = DeadLetter(
            self.origin.record_meta(),
            record.topic,
            record.partition,
            record.offset,
            record.key,
            record.value,
            reason,
            detail[:2000],
            tuple(record.headers or ()),
        )
        producer.send(self.deadletter_topic, value=self.codec.encode(letter)).get(60)
