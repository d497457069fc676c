"""The sandbox worker on the shared request loop, without Kafka: its route, its span, its dead letters."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ops.telemetry.otel import OtelTracer
from sandbox_agent.idempotent import MemoryResultStore
from sandbox_agent.local_backend import LocalProcessBackend
from sandbox_agent.pool import WarmPools
from sandbox_agent.worker import ROUTE, SandboxWorker
from schemas.actions import RunCommand
from schemas.blobs import MemoryObjectStore
from schemas.codec import default_codec
from schemas.common import Producer
from schemas.deadletter import DeadLetter
from schemas.events import StepExecuted
from schemas.origin import FixedClock, Origin, SequentialIds
from schemas.requests import SandboxRequest
from streams.kafka.request_loop import LoopSettings, RequestLoop
from streams.telemetry import tracing
from tests.unit.sandbox.requests import sandbox_request

CODEC = default_codec()
ORIGIN = Origin(Producer("sandbox", "w1"), FixedClock(), SequentialIds("w1"))


@dataclasses.dataclass
class _Record:
    topic: str
    partition: int
    offset: int
    key: bytes
    value: bytes | None
    headers: list[tuple[str, bytes]]


class _Producer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes | None, bytes]] = []

    def send(self, topic: str, value: bytes, key: bytes | None = None, headers: object = None) -> _Producer:
        self.sent.append((topic, key, value))
        return self

    def get(self, timeout: float) -> None:
        pass


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[SandboxWorker]:
    objects = MemoryObjectStore()
    backend = LocalProcessBackend(objects, tmp_path / "w1")
    pools = WarmPools(backend, size=1)
    made = SandboxWorker(backend, pools, MemoryResultStore(), objects, ORIGIN)
    yield made
    made.close()
    pools.close()


def _loop(worker: SandboxWorker) -> RequestLoop[SandboxRequest]:
    return RequestLoop(ROUTE, worker.handle, LoopSettings("127.0.0.1:1", "g", run="r1"), ORIGIN)


def _record(value: bytes | None) -> _Record:
    return _Record("r1.sandbox.requests", 0, 7, b"ep-1", value, [])


def test_the_sandbox_route_reads_its_requests_and_answers_on_its_results(worker: SandboxWorker) -> None:
    loop = _loop(worker)
    assert (loop.requests_topic, loop.results_topic, loop.deadletter_topic) == (
        "r1.sandbox.requests",
        "r1.sandbox.results",
        "r1.deadletter",
    )
    exporter = InMemorySpanExporter()
    tracer = OtelTracer("trialog-sandbox", SimpleSpanProcessor(exporter))
    producer = _Producer()
    with tracing.installed(tracer):
        loop.serve(_record(CODEC.encode(sandbox_request(RunCommand("echo hi")))), producer)
    tracer.shutdown()
    [(topic, key, value)] = producer.sent
    answer = CODEC.decode(value)
    assert (topic, key) == ("r1.sandbox.results", b"ep-1")
    assert isinstance(answer, StepExecuted) and answer.stdout.text == "hi\n"
    spans = {span.name: span for span in exporter.get_finished_spans()}
    request_span = spans["sandbox.exec"].get_span_context()
    assert request_span is not None and spans["sandbox.acquire"].parent is not None
    assert spans["sandbox.acquire"].parent.span_id == request_span.span_id  # the step's work is inside it


def test_garbage_and_a_failing_worker_are_dead_lettered(worker: SandboxWorker) -> None:
    def broken(request: SandboxRequest) -> StepExecuted:
        raise RuntimeError("boom")

    producer = _Producer()
    _loop(worker).serve(_record(b"not a record at all"), producer)
    failing = RequestLoop(ROUTE, broken, LoopSettings("127.0.0.1:1", "g", run="r1"), ORIGIN)
    failing.serve(_record(CODEC.encode(sandbox_request(RunCommand("true")))), producer)
    letters = [CODEC.decode(value) for _topic, _key, value in producer.sent]
    assert [topic for topic, _key, _value in producer.sent] == ["r1.deadletter"] * 2
    assert all(isinstance(letter, DeadLetter) for letter in letters)
    reasons = [(letter.reason, letter.offset) for letter in letters if isinstance(letter, DeadLetter)]
    assert reasons == [("wrong_magic", 7), ("handler_error", 7)]
