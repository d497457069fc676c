"""The learner's loop: poll the feed, offer each record and a clock tick to the `Learner`, train what is
ready, checkpoint progress when caught up and on a clean stop. The learner assigns itself every partition
of the topic (no consumer group: one learner per run) and seeks to the checkpointed offsets, so the
checkpoint alone says what has been consumed.

The run's control log is caught up first in every round (`ControlFeed`: from its beginning at the first),
before any ready group is trained or any trajectory taken in: a quarantine rule or a clearance that is on
`run.control` is obeyed before the next training step. While it cannot be read, the learner waits.
"""

from __future__ import annotations

import logging
import threading
import time

from kafka.errors import KafkaError

from learner.defaults import IDLE_CHECKPOINT_S
from learner.kafka_io import ControlFeed, Feed, MemoryControlFeed, inputs
from learner.learner import Learner
from learner.state import PlannerState, Tick
from schemas.origin import Clock
from streams.lifecycle import Health

log = logging.getLogger(__name__)
RETRY_S = 1.0


def run(
    learner: Learner,
    feed: Feed,
    clock: Clock,
    stopping: threading.Event,
    poll_ms: int = 500,
    idle_checkpoint_s: float = IDLE_CHECKPOINT_S,
    control: ControlFeed | None = None,
    progress: ControlFeed | None = None,
    health: Health | None = None,
) -> None:
    """Consume until `stopping` is set: each record of a poll, then a clock tick (group timeouts), then the
        training steps on what is ready. Progress without a training step is checkpointed when a poll finds
        nothing new (at most every `idle_checkpoint_s`) and at the end of a clean stop
        (`Learner.save_progress`). `control`: the run's control log (None: an empty one). `progress`: the
    run's process grades (None: none read), for the process rewards; a failed read delays no training.
    `health` hears a beat per round (a round's training steps must fit in its liveness bound) and is told
    the learner is ready when the loop starts (the checkpoint is resumed by then)."""
    control = control if control is not None else MemoryControlFeed()
    health = health or Health()
    health.ready("learner")
    last_saved = time.monotonic()
    while not stopping.is_set():
        health.beat("learner")
        try:
            learner.follow(control.poll())
        except KafkaError as exc:
            log.warning("cannot read the run's control log (%s); retrying", exc)
            stopping.wait(RETRY_S)
            continue
        if progress is not None:
            try:
                learner.take_grades(progress.poll())
            except KafkaError as exc:
                log.warning(
                    "cannot read the run's process grades (%s); training on without the new ones", exc
                )
        learner.announce_pending()
        learner.train_ready()  # groups ready in the checkpoint, or held back by an unsent announcement
        try:
            records = feed.poll(poll_ms)
        except KafkaError as exc:
            log.warning("Kafka unreachable while polling (%s); retrying", exc)
            stopping.wait(RETRY_S)
            continue
        for record, event in zip(records, inputs(records, learner.codec, clock), strict=True):
            learner.offer(event, record.headers)
        learner.offer(Tick(clock.now_us()))
        learner.train_ready()
        if not records and time.monotonic() - last_saved >= idle_checkpoint_s:
            last_saved = time.monotonic()
            if learner.save_progress():
                log.info("caught up: %s", accounting(learner.state))
    if learner.save_progress():
        log.info("stopped: %s", accounting(learner.state))


def accounting(state: PlannerState) -> str:
    """One line saying where every consumed trajectory went, for the log."""
    c = state.counters
    return (
        f"version {state.version}, {sum(state.offsets.values())} records consumed: {c.arrived} trajectories "
        f"({c.trained} trained, {c.stale} stale, {c.all_equal} all-equal, {c.timeout} timed out, {c.late} "
        f"late, {c.unusable} unusable, {c.quarantined} quarantined, {c.unpaired} unpaired, {state.waiting} "
        f"waiting of which {len(state.held)} held for clearance), {c.duplicate} duplicates, "
        f"{c.unreadable} unreadable"
    )
