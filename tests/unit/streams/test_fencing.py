"""Fencing a stalled owner by time (`streams.fencing`): the membership clock, the worker that gives its
inputs back unsent while stale, and the app's piece around it (`watch_membership`)."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from aiokafka.protocol.group import HeartbeatRequest, JoinGroupRequest, SyncGroupRequest

from schemas import topics
from schemas.chain import verify_chain
from schemas.codec import default_codec
from schemas.requests import PolicyRequest
from streams import fencing
from streams.app import watch_membership
from streams.fencing import Membership
from streams.ports import Input
from streams.worker import EpisodeWorker
from tests.unit.streams.test_worker import Tasks, World
from tests.unit.streams.world import EPISODE, TASK, start_command

CODEC = default_codec()


class Clocks:
    def __init__(self) -> None:
        self.mono = 100.0
        self.wall = 1_700_000_000.0

    def monotonic(self) -> float:
        return self.mono

    def time(self) -> float:
        return self.wall

    def advance(self, seconds: float) -> None:
        self.mono += seconds
        self.wall += seconds


def _membership(clocks: Clocks) -> Membership:
    return Membership(monotonic=clocks.monotonic, wall=clocks.time)


def test_the_bound_keeps_a_stalled_owners_writes_inside_its_session() -> None:
    assert fencing.FRESH_S + fencing.LATE_WRITE_MAX_S + fencing.CLOCK_SKEW_S < fencing.SESSION_TIMEOUT_S
    # The topics only an owner writes refuse late records by that bound, as the broker config says.
    assert topics.EPISODE_EVENTS.config["message.timestamp.before.max.ms"] == str(topics.LATE_WRITE_MAX_MS)
    assert topics.EPISODE_EVENTS.config["retention.ms"] == "-1"  # still kept for good


def test_membership_allows_writes_only_within_fresh_s_of_the_newest_confirmation() -> None:
    clocks = Clocks()
    membership = _membership(clocks)
    assert membership.stamp() is None and membership.age() is None  # never confirmed: no write
    membership.confirmed(clocks.mono)
    assert membership.stamp() == clocks.wall
    clocks.advance(fencing.FRESH_S - 0.1)
    assert membership.stamp() == clocks.wall  # the stamp is the time of the check
    clocks.advance(0.2)
    assert membership.stamp() is None
    membership.confirmed(clocks.mono - 10)  # an older answer arriving late changes nothing
    assert membership.stamp() is None
    membership.confirmed(clocks.mono - 1)
    assert membership.stamp() == clocks.wall and membership.age() == 1


@dataclasses.dataclass
class Fenced:
    world: World
    clocks: Clocks

    def worker(self, membership: Membership) -> EpisodeWorker:
        w = self.world
        return EpisodeWorker(
            rows=w.rows, bus=w.log, tasks=Tasks(TASK), read_events=w.log.read_events, origin=w.origin,
            clock=w.clock, membership=membership,
        )  # fmt: skip


def _deliver(world: World, worker: EpisodeWorker, topic: str, value: bytes) -> bool:
    offset = world.offsets.get(topic, 0)
    world.offsets[topic] = offset + 1
    (handled,) = asyncio.run(worker.handle_batch([Input(topic, 0, offset, EPISODE.encode(), value)]))
    return handled


@dataclasses.dataclass
class Takeover:
    """An owner started an episode, then stalled past its session; a successor took the partition over and
    handled the policy's answer."""

    world: World
    clocks: Clocks
    owner_membership: Membership
    owner: EpisodeWorker
    action: bytes


def _stall_and_take_over() -> Takeover:
    clocks = Clocks()
    fenced = Fenced(World(), clocks)
    world = fenced.world
    owned = _membership(clocks)
    owned.confirmed(clocks.mono)
    owner = fenced.worker(owned)
    asyncio.run(owner.sync_assignment({0}))
    assert _deliver(world, owner, "episode.commands", CODEC.encode(start_command()))
    (request,) = world.log.records("policy.requests")
    assert isinstance(request, PolicyRequest)
    assert set(world.log.stamps) == {clocks.wall} and set(world.rows.stamps) == {clocks.wall}

    # The owner stalls past its session; the group gives the partition to a successor, which recovers it.
    clocks.advance(fencing.SESSION_TIMEOUT_S + 2)
    new = _membership(clocks)
    new.confirmed(clocks.mono)
    successor = fenced.worker(new)
    asyncio.run(successor.sync_assignment({0}))
    action = CODEC.encode(world.workers.act(request))
    assert _deliver(world, successor, "policy.results", action)
    return Takeover(world, clocks, owned, owner, action)


def test_a_stale_owner_gives_its_inputs_back_and_writes_nothing_while_its_successor_goes_on() -> None:
    takeover = _stall_and_take_over()
    world, clocks, old, zombie, action = (
        takeover.world, takeover.clocks, takeover.owner_membership, takeover.owner, takeover.action
    )  # fmt: skip
    logged = len(world.log.values("episode.events"))
    sent = sum(len(records) for records in world.log.topics.values())

    # The zombie runs again with the same answer still in hand: it gives it back and sends nothing.
    world.offsets["policy.results"] = 0
    assert not _deliver(world, zombie, "policy.results", action)
    assert sum(len(records) for records in world.log.topics.values()) == sent
    assert zombie.ready == set() and zombie.stats["fenced.stale"] == 1
    asyncio.run(zombie.tick())  # nor do its timers
    asyncio.run(zombie.sync_assignment({0}))  # nor does it recover while stale
    assert zombie.ready == set() and sum(len(r) for r in world.log.topics.values()) == sent

    # Confirmed again (still assigned here, say), it first folds what the log gained meanwhile.
    old.confirmed(clocks.mono)
    asyncio.run(zombie.sync_assignment({0}))
    assert zombie.ready == {0}
    world.offsets["policy.results"] = 0
    assert _deliver(world, zombie, "policy.results", action)  # now a duplicate, ignored
    assert len(world.log.values("episode.events")) == logged
    report = verify_chain(world.log.values("episode.events"), CODEC)
    assert report.ok and report.duplicates == 0, report


def test_a_worker_that_goes_stale_between_deciding_and_sending_gives_the_batch_back() -> None:
    clocks = Clocks()
    fenced = Fenced(World(), clocks)
    membership = _membership(clocks)
    membership.confirmed(clocks.mono)
    worker = fenced.worker(membership)
    asyncio.run(worker.sync_assignment({0}))

    class StaleOnDecide(Tasks):
        def get(self, task_id: str, *, refresh: bool = True) -> Any:
            clocks.advance(fencing.FRESH_S + 1)  # the stall comes while the batch is decided
            return super().get(task_id, refresh=refresh)

    worker.tasks = StaleOnDecide(TASK)
    assert not _deliver(fenced.world, worker, "episode.commands", CODEC.encode(start_command()))
    assert fenced.world.log.topics == {} and worker.ready == set()


class FakeCoordinator:
    def __init__(self, errors: dict[type, int]) -> None:
        self.errors = errors

    async def _send_req(self, request: Any) -> Any:
        return dataclasses.make_dataclass("Response", ["error_code"])(self.errors.get(type(request), 0))


def test_watch_membership_counts_only_heartbeats_and_syncs_the_coordinator_answered_ok() -> None:
    clocks = Clocks()
    membership = _membership(clocks)
    coordinator = FakeCoordinator({HeartbeatRequest: 27})  # REBALANCE_IN_PROGRESS
    app = type("App", (), {})()
    app.consumer = type("Consumer", (), {})()
    assert not watch_membership(app, membership)  # no consumer yet
    app.consumer._thread = type("Thread", (), {})()
    app.consumer._thread._consumer = type("Consumer", (), {"_coordinator": coordinator})()
    assert watch_membership(app, membership) and watch_membership(app, membership)  # once

    async def send(request: Any) -> None:
        await coordinator._send_req(request)

    asyncio.run(send(HeartbeatRequest("g", 1, "m")))
    asyncio.run(send(JoinGroupRequest("g", 6000, 10000, "m", None, "consumer", [])))
    assert membership.age() is None  # "rebalancing" and a join confirm nothing
    asyncio.run(send(SyncGroupRequest("g", 2, "m", None, [])))
    assert membership.age() == 0 and membership.stamp() == clocks.wall
    clocks.advance(1)
    coordinator.errors = {}
    asyncio.run(send(HeartbeatRequest("g", 2, "m")))
    assert membership.age() == 0


def test_a_worker_given_its_partition_back_after_a_rebalance_folds_what_its_successor_appended() -> None:
    # The chaos test's case: a worker frozen past its session handled no batch while stale (its wake-up
    # began with the rejoin), got its old partition back in the new generation, and went on from its old
    # rows, appending duplicate steps. The rebalance's revocation (`forget_all`) makes it recover.
    takeover = _stall_and_take_over()
    world, clocks, first, owner, action = (
        takeover.world, takeover.clocks, takeover.owner_membership, takeover.owner, takeover.action
    )  # fmt: skip
    logged = len(world.log.values("episode.events"))

    # The old owner wakes into a rebalance (revocation first), rejoins (confirmed) and gets partition 0 again.
    asyncio.run(owner.forget_all("rebalance"))
    assert owner.ready == set()
    first.confirmed(clocks.mono)
    asyncio.run(owner.sync_assignment({0}))
    world.offsets["policy.results"] = 0
    assert _deliver(world, owner, "policy.results", action)  # the successor's step is in its rows: duplicate
    assert len(world.log.values("episode.events")) == logged
    report = verify_chain(world.log.values("episode.events"), CODEC)
    assert report.ok and report.duplicates == 0, report
