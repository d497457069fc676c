"""Serving polled records one by one, committing each after it is answered, surviving a broker restart.

Shared by the stateless workers' loops (rollout, verifier, sandbox). When Kafka cannot be reached while a
record is answered or its offset committed (a broker restart, a network blip), the consumer is rewound to
that record and the loop waits: the record is served again once Kafka answers. The answer may then go out
twice, which is harmless: the episode's owner accepts one answer per request key.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata

from ops.telemetry import metrics

log = logging.getLogger(__name__)
RETRY_S = 1.0


def poll(consumer: Any, timeout_ms: int, stopping: threading.Event) -> Mapping[Any, Sequence[Any]]:
    """The next records, or none while Kafka is unreachable (after a pause)."""
    try:
        polled: Mapping[Any, Sequence[Any]] = consumer.poll(timeout_ms=timeout_ms)
    except KafkaError as exc:
        log.warning("Kafka unreachable while polling (%s); retrying", exc)
        stopping.wait(RETRY_S)
        return {}
    metrics.kafka_python_lag(consumer)
    return polled


def serve_in_order(
    consumer: Any,
    polled: Mapping[Any, Sequence[Any]],
    serve: Callable[[Any], None],
    stopping: threading.Event,
) -> None:
    """Serve each record, then commit past it; on a Kafka error rewind to it and pause."""
    for partition, records in polled.items():
        for record in records:
            if stopping.is_set():
                return
            try:
                serve(record)
                consumer.commit({partition: OffsetAndMetadata(record.offset + 1, None, -1)})
            except KafkaError as exc:
                log.warning(
                    "Kafka unreachable at %s@%s (%s); will serve it again", partition, record.offset, exc
                )
                consumer.seek(partition, record.offset)
                stopping.wait(RETRY_S)
                break  # the rest of this partition comes again after the rewind
