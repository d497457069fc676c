"""The learner process under the run's control log (fake feeds): what a quarantine rule matches is never
trained on, what waits for its grader's clearance is held (checkpointed with the rest) and trained once
cleared; the counters are in the stats lines, the log's accounting and the metrics."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from learner import checkpoint, loop
from learner.defaults import STATS_FILE
from learner.kafka_io import MemoryControlFeed, Polled
from learner.learner import Learner
from learner.loop import run
from learner.publish import MemoryAnnouncer
from learner.state import Position
from schemas.blobs import MemoryObjectStore
from schemas.codec import default_codec
from schemas.origin import FixedClock
from schemas.trajectories import TrajectoryCompleted
from schemas.versions import Component
from streams.telemetry import metrics
from tests.unit.actors.guard_records import GRADED_AT, VERSIONS, cleared, graded_group, pinned, rule
from tests.unit.learner.test_worker import make_learner

TOPIC = "run-test.trajectories.completed"
CODEC = default_codec()
BAD_IMAGE = "sha256:" + "0b" * 32
BAD = VERSIONS.__class__(VERSIONS.verifier, BAD_IMAGE, VERSIONS.tests, VERSIONS.reward_config)


class Script:
    """A trajectories feed that plays `steps`, one per poll: the records it returns and the control records
    that land on run.control meanwhile; then sets `stopping`."""

    def __init__(
        self,
        steps: list[tuple[list[TrajectoryCompleted], list[object]]],
        control: MemoryControlFeed,
        stopping: threading.Event,
    ) -> None:
        self.steps, self.control, self.stopping = steps, control, stopping
        self.offset = 0

    def poll(self, timeout_ms: int) -> list[Polled]:
        if not self.steps:
            self.stopping.set()
            return []
        trajectories, then = self.steps.pop(0)
        self.control.append(*then)
        polled = [
            Polled(Position(TOPIC, 0, self.offset + i), CODEC.encode(t)) for i, t in enumerate(trajectories)
        ]
        self.offset += len(polled)
        return polled


class Outcomes(metrics.NoopMetrics):
    """Counts what is added; the other instruments are the no-op ones."""

    enabled = True

    def __init__(self) -> None:
        self.counts: dict[str, float] = {}

    def add(self, instrument: str, value: float = 1, attributes: Any = None) -> None:
        if instrument == metrics.LEARNER_TRAJECTORIES:
            outcome = attributes["outcome"]
            self.counts[outcome] = self.counts.get(outcome, 0) + value


@pytest.fixture
def outcomes() -> Iterator[Outcomes]:
    mine = Outcomes()
    previous = metrics.install(mine)
    yield mine
    metrics.install(previous)


def _run(learner: Learner, control: MemoryControlFeed, steps: list[Any]) -> None:
    stopping = threading.Event()
    run(learner, Script(steps, control, stopping), FixedClock(), stopping, poll_ms=1, idle_checkpoint_s=3600,
        control=control)  # fmt: skip


def test_a_rule_and_a_clearance_while_held_train_only_the_vouched_and_unquarantined(
    tmp_path: Path, outcomes: Outcomes
) -> None:
    announcer = MemoryAnnouncer()
    learner = make_learner(tmp_path, announcer, MemoryObjectStore())
    control = MemoryControlFeed([pinned(hold=True)])
    good = graded_group("g1", [1.0, 0.0])
    faulty = graded_group("g2", [0.0, 1.0], versions=BAD)
    steps = [
        (good + faulty, [rule(Component.IMAGE.value, BAD_IMAGE), cleared(GRADED_AT)]),  # all held on arrival
        ([], []),  # the next round reads the rule and the clearance first
    ]
    _run(learner, control, steps)
    [published] = announcer.published
    assert published.trajectories == 2  # g1 alone
    counters = learner.state.counters
    assert (counters.held, counters.quarantined, counters.trained) == (4, 2, 2)
    assert learner.state.held == {} and learner.state.waiting == 0
    [line] = [json.loads(text) for text in (tmp_path / STATS_FILE).read_text().splitlines()]
    assert line["groups"] == ["g1"] and line["counters"]["quarantined"] == 2 and line["held"] == 0
    assert outcomes.counts["quarantined"] == 2 and outcomes.counts["held"] == 4
    assert outcomes.counts["trained"] == 2
    assert "2 quarantined" in loop.accounting(learner.state)  # the line the learner logs when caught up


def test_an_arrival_a_rule_already_matches_is_never_trained(tmp_path: Path) -> None:
    announcer = MemoryAnnouncer()
    learner = make_learner(tmp_path, announcer, MemoryObjectStore())
    control = MemoryControlFeed([rule(Component.IMAGE.value, BAD_IMAGE)])  # read at start, before any poll
    _run(learner, control, [(graded_group("g2", [0.0, 1.0], versions=BAD), [])])
    assert announcer.published == []
    assert learner.state.counters.quarantined == 2 and learner.state.version == 0


def test_held_trajectories_survive_a_restart_and_train_once_cleared(tmp_path: Path) -> None:
    first = make_learner(tmp_path, MemoryAnnouncer(), MemoryObjectStore())
    log = [pinned(hold=True)]
    _run(first, MemoryControlFeed(log), [(graded_group("g1", [1.0, 0.0]), [])])
    saved = checkpoint.load(tmp_path)
    assert saved is not None and list(saved.planner.held) == ["g1/e0", "g1/e1"]  # the clean stop kept them
    assert saved.planner.offsets == {(TOPIC, 0): 2}
    announcer = MemoryAnnouncer()
    second = make_learner(tmp_path, announcer, MemoryObjectStore())
    assert second.resume()
    # The restarted learner reads run.control from its beginning: the clearance came while it was down.
    _run(second, MemoryControlFeed([*log, cleared(GRADED_AT)]), [([], [])])
    assert [p.trajectories for p in announcer.published] == [2]
    assert second.state.held == {} and second.state.counters.trained == 2
