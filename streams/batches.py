"""One batch of inputs through the episode worker, and what becomes of the inputs it could not handle.

The worker handles an input only on a partition it has recovered, and only while its group membership is
fresh (`streams.fencing`); an input it leaves unhandled is not acknowledged, so Faust's commit stops at it.
Who reads it again depends on why it was left:

* a rebalance is going on (or the table's recovery after one): Faust seeks every partition it keeps to the
  committed offset once the recovery is done, and a partition that moved is read by its new owner from
  there. The input is given back: dropped here, read again from Kafka;
* its partition is not assigned here: it moved, in a rebalance since it was fetched. Given back likewise
  (an input given back that Faust then does not deliver again, seen in the chaos test, is read again from
  Kafka by `streams.skipped` once the commit has stood at it for a while);
* otherwise the partition is assigned here and no rebalance is going on: the worker was stale (a pause, a
  coordinator slow to answer), or the partition's recovery failed (its log unreadable for a while).
  Nobody would read the input again until the next rebalance, which may never come, so the batch holds
  it: it waits until the membership is confirmed (or a rebalance begins), recovers the partition again,
  and tries again, in order, before anything queued after it.

An earlier version gave such inputs back too and sought the consumer back to them once the membership was
confirmed. Holding needs no seek, and a seek is fragile under Faust: it sets the partition's read offset,
and records fetched before the seek but delivered after it move that offset on again, so that Faust drops
the records the seek fetched again as already read (by reading `Consumer._drain_messages`).

Given back means: not acknowledged (Faust's commit stops before it) and no longer tracked by Faust
(`give_back`, `streams.app._release`): a rebalance waits for every input Faust delivered to be acknowledged,
and one given back and still tracked held both streams workers of the chaos test in that wait for good.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from streams.ports import Input

log = logging.getLogger(__name__)

HOLD_POLL_S = 0.1  # how often a held batch looks at the membership again


class BatchWorker(Protocol):
    """What the batch loop needs of `streams.worker.EpisodeWorker`."""

    ready: set[int]

    def may_write(self) -> bool: ...

    async def sync_assignment(self, assigned: set[int]) -> None: ...

    async def handle_batch(self, inputs: Sequence[Input]) -> list[bool]: ...


class Event(Protocol):
    """A Faust stream event: its message (with `tp`, `partition`, `offset`, ...) and its acknowledgement."""

    @property
    def message(self) -> Any: ...

    def ack(self) -> bool: ...


@dataclass
class BatchHandler:
    """Handles batches of stream events for `worker` (see the module doc).

    `settled` says that no rebalance is going on and the table is recovered; `assigned` gives the partitions
    assigned here (of the co-partitioned inputs); `to_input` turns an event into the worker's input."""

    worker: BatchWorker
    settled: Callable[[], bool]
    assigned: Callable[[], set[int]]
    to_input: Callable[[Any], Input]
    ack: Callable[[Any], None] = lambda event: event.ack()
    give_back: Callable[[Any], None] = lambda _event: None
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    hold_poll_s: float = HOLD_POLL_S
    held_batches: int = 0  # batches that waited for the membership at least once (for tests and logs)

    async def serve(self, queue: asyncio.Queue[Any], limit: int) -> None:
        """Take batches of up to `limit` events from `queue` and handle them, forever (a failing batch
        raises)."""
        while True:
            await self.handle(await next_batch(queue, limit))

    async def handle(self, events: Sequence[Event]) -> None:
        """Handle `events`, acknowledging each handled one; give back or hold the rest (see the module doc).
        Returns once every event was handled or given back."""
        pending = list(events)
        held = False
        while pending:
            # Recover new partitions only once their rows are restored; forget those that moved.
            partitions = self.assigned()
            if not self.settled():
                partitions &= self.worker.ready
            await self.worker.sync_assignment(partitions)
            handled = await self.worker.handle_batch([self.to_input(event.message) for event in pending])
            for event, done in zip(pending, handled, strict=True):
                if done:
                    self.ack(event)
            pending = [event for event, done in zip(pending, handled, strict=True) if not done]
            if not pending:
                return
            if not self.settled():  # a rebalance is going on: its recovery seeks to the committed offsets
                for event in pending:
                    self.give_back(event)
                return
            mine = self.assigned()
            for event in pending:
                if event.message.partition not in mine:
                    self.give_back(event)
            pending = [event for event in pending if event.message.partition in mine]
            if pending and not held:
                held = True
                self.held_batches += 1
                log.warning(
                    "%d inputs of partitions %s held until the membership is confirmed or the partition "
                    "recovered",
                    len(pending),
                    sorted({event.message.partition for event in pending}),
                )
            while pending and not self.worker.may_write() and self.settled():
                await self.sleep(self.hold_poll_s)
            if pending:
                await self.sleep(self.hold_poll_s)  # never a hot loop, whatever keeps the batch unhandled


async def next_batch(queue: asyncio.Queue[Any], limit: int) -> list[Any]:
    """Wait for one item, then take whatever else is queued already, up to `limit` in all."""
    batch = [await queue.get()]
    while len(batch) < limit and not queue.empty():
        batch.append(queue.get_nowait())
    return batch
