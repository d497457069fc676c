"""The Faust app's wiring, without a broker: names carry the run, the table is RocksDB with a small cache."""

from __future__ import annotations

import argparse
import asyncio
import inspect
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.consumer.fetcher import Fetcher
from faust.types import TP

from ops.cli.workers.streams import register
from streams.adapters import FaustRows
from streams.app import (
    BLOCK_CACHE_BYTES,
    FETCH_MAX_WAIT_MS,
    SESSION_TIMEOUT_S,
    Settings,
    build_app,
    tune_fetcher,
)
from streams.batches import next_batch


def test_the_app_and_its_table_belong_to_the_run(tmp_path: Path) -> None:
    app, worker = build_app(Settings("127.0.0.1:1", "run7", str(tmp_path / "d"), "w-1", standby_replicas=1))
    assert app.conf.id == "run7.trialog-streams"
    assert app.conf.table_standby_replicas == 1
    assert str(app.conf.processing_guarantee) == "ProcessingGuarantee.AT_LEAST_ONCE"
    table = app.tables["episodes"]
    assert table.changelog_topic.get_topic_name() == "run7.trialog-streams-episodes-changelog"
    assert table.options is not None and table.options["block_cache_size"] == BLOCK_CACHE_BYTES
    assert str(app.conf.store) == "rocksdb:"
    assert worker.topic("episode.events") == "run7.episode.events"
    topics = {t for agent in app.agents.values() for t in agent.channel.topics}
    assert topics == {
        f"run7.{base}" for base in ("episode.commands", "policy.results", "sandbox.results", "verify.results")
    }


def test_the_cli_registers_streams_with_its_options() -> None:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="worker", required=True))
    args = parser.parse_args(
        ["streams", "--run", "r1", "--bootstrap", "h:9", "--data-dir", "/x", "--standby-replicas", "2"]
    )
    assert (args.run, args.bootstrap, args.data_dir, args.standby_replicas) == ("r1", "h:9", "/x", 2)
    assert args.instance and callable(args.handler)


def test_consumer_group_timeouts_are_short(tmp_path: Path) -> None:
    app, _ = build_app(Settings("127.0.0.1:1", "r", str(tmp_path / "d"), "w"))
    assert app.conf.broker_session_timeout == SESSION_TIMEOUT_S <= 10
    assert app.conf.broker_heartbeat_interval * 3 <= app.conf.broker_session_timeout
    assert app.conf.broker_request_timeout >= app.conf.broker_session_timeout  # aiokafka requires it


def test_tune_fetcher_removes_the_prefetch_backoff_and_shortens_the_fetch_wait() -> None:
    default = inspect.signature(Fetcher.__init__).parameters["prefetch_backoff"].default
    assert default == 0.1  # the 100 ms it removes (if aiokafka changes this, re-check tune_fetcher)
    # tune_fetcher sets the attributes aiokafka's fetcher reads (a rename would silently undo it).
    source = inspect.getsource(Fetcher)
    assert "self._fetch_max_wait_ms = fetch_max_wait_ms" in source
    assert "self._prefetch_backoff = prefetch_backoff" in source
    fetcher = SimpleNamespace(_prefetch_backoff=default, _fetch_max_wait_ms=1500)
    app = SimpleNamespace(consumer=SimpleNamespace(_thread=SimpleNamespace(_consumer=None)))
    assert tune_fetcher(app) is False  # not started yet: nothing to tune
    app.consumer._thread._consumer = SimpleNamespace(_fetcher=fetcher)
    assert tune_fetcher(app) is True and fetcher._prefetch_backoff == 0.0
    assert fetcher._fetch_max_wait_ms == FETCH_MAX_WAIT_MS <= 50


class FakeChangelog:
    """The changelog topic's `send`: records each write; its acknowledgement is a future the test resolves."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, bytes, bytes]] = []
        self.acks: list[asyncio.Future[Any]] = []

    async def send(self, *, key: bytes, value: bytes, partition: int, force: bool, **_: Any) -> Any:
        assert force  # never deferred to a stream event's acknowledgement
        self.sent.append((partition, key, value))
        self.acks.append(asyncio.get_running_loop().create_future())
        return self.acks[-1]


def _rows(tmp_path: Path) -> tuple[FaustRows, FakeChangelog]:
    app, _ = build_app(Settings("127.0.0.1:1", "r", str(tmp_path / "d"), "w"))
    table = app.tables["episodes"]
    changelog = FakeChangelog()
    table.changelog_topic = changelog
    return FaustRows(table), changelog


def test_rows_go_to_the_changelog_and_only_once_acknowledged_to_the_local_store(tmp_path: Path) -> None:
    """Outside a stream event (a timer: Faust's `table[key] = row` would refuse), to explicit partitions;
    the local store never holds a row the changelog has not acknowledged."""
    rows, changelog = _rows(tmp_path)

    async def scenario() -> None:
        writing = asyncio.ensure_future(rows.write([(3, "ep-1", b"row-1"), (5, "ep-2", b"row-2")]))
        while len(changelog.acks) < 2:
            await asyncio.sleep(0)
        assert changelog.sent == [(3, b"ep-1", b"row-1"), (5, b"ep-2", b"row-2")]  # both sent at once
        changelog.acks[0].set_result(None)
        await asyncio.sleep(0.01)
        assert not writing.done() and rows.get("ep-1") is None  # one ack of two: nothing local yet
        changelog.acks[1].set_result(None)
        await writing

    asyncio.run(scenario())
    assert rows.get("ep-1") == b"row-1" and rows.get("ep-2") == b"row-2" and rows.get("ep-3") is None
    assert list(rows.partition_items(3)) == [("ep-1", b"row-1")]
    assert list(rows.partition_items(5)) == [("ep-2", b"row-2")]


def test_a_failed_changelog_write_leaves_the_local_store_untouched(tmp_path: Path) -> None:
    rows, changelog = _rows(tmp_path)

    async def scenario() -> None:
        writing = asyncio.ensure_future(rows.write([(1, "ep-1", b"row-1"), (1, "ep-2", b"row-2")]))
        while len(changelog.acks) < 2:
            await asyncio.sleep(0)
        changelog.acks[0].set_result(None)
        changelog.acks[1].set_exception(ConnectionError("broker gone"))
        with pytest.raises(ConnectionError):
            await writing

    asyncio.run(scenario())
    assert rows.get("ep-1") is None and rows.get("ep-2") is None
    assert list(rows.partition_items(1)) == []


def test_a_batch_is_everything_queued_up_to_the_limit() -> None:
    async def scenario() -> list[list[int]]:
        queue: asyncio.Queue[Any] = asyncio.Queue()
        for n in range(7):
            queue.put_nowait(n)
        return [await next_batch(queue, 5), await next_batch(queue, 5)]

    assert asyncio.run(scenario()) == [[0, 1, 2, 3, 4], [5, 6]]


def test_a_revocation_makes_the_worker_forget_its_partitions(tmp_path: Path) -> None:
    app, worker = build_app(Settings("127.0.0.1:1", "run7", str(tmp_path / "d"), "w-1"))
    worker.ready = {1, 4}
    asyncio.run(app.on_partitions_revoked.send(set()))
    assert worker.ready == set() and worker.stats["forgotten.rebalance"] == 1


def test_a_released_input_ends_faults_wait_and_commits_nothing() -> None:
    from types import SimpleNamespace

    from faust.transport.consumer import ConsumerMessage

    from streams.app import _release

    class Consumer:
        def __init__(self) -> None:
            self.acked: list[int] = []

        def ack(self, message: ConsumerMessage) -> bool:  # what moves the committed offset
            self.acked.append(message.offset)
            return True

    message = ConsumerMessage("run.policy.results", 3, 41, 0.0, 0, None, b"k", b"v", None)
    message.incref()  # one stream holds it, as Faust's delivery does
    _release(SimpleNamespace(message=message))
    consumer = Consumer()
    # Faust's wait keeps only messages not `acked`; a later ack (Faust's own, of a skipped record) is a no-op.
    assert message.acked and message.ack(consumer) is False and consumer.acked == []


def test_only_the_workers_own_acknowledgements_of_its_inputs_reach_the_commit() -> None:
    from types import SimpleNamespace

    from faust.transport.consumer import ConsumerMessage

    from streams.app import _ack, guard_acks

    committed: list[tuple[str, int]] = []
    gaps: list[tuple[str, int, int]] = []

    async def add_gap(tp: Any, offset_from: int, offset_to: int) -> None:
        gaps.append((tp.topic, offset_from, offset_to))

    consumer = SimpleNamespace(
        ack=lambda message: committed.append((message.topic, message.offset)) or True,
        _add_gap=add_gap,
        _acked={},
        _committed_offset={},
        _new_offset=lambda tp: max(consumer._acked[tp]) + 1,  # Faust's, when it lets the head pass
    )
    guard_acks(consumer, {"run.episode.commands"})
    guarded = consumer.ack
    guard_acks(consumer, {"run.episode.commands"})
    assert consumer.ack is guarded  # once per consumer: not wrapped twice

    def delivered(topic: str, offset: int) -> Any:
        message = ConsumerMessage(topic, 0, offset, 0.0, 0, None, b"k", b"v", None)
        message.incref()
        return SimpleNamespace(message=message, ack=lambda: message.ack(consumer))

    skipped = delivered("run.episode.commands", 14)  # what Faust's stream acknowledges when it skips a record
    assert skipped.ack() is False and skipped.message.acked and committed == []  # released, not committed
    handled = delivered("run.episode.commands", 15)
    _ack(handled)
    other = delivered("run.trialog-streams-episodes-changelog", 3)  # not an input: untouched
    other.ack()
    assert committed == [("run.episode.commands", 15), ("run.trialog-streams-episodes-changelog", 3)]
    # A jump in the offsets handed out is not a hole the commit may skip on an input topic.
    asyncio.run(consumer._add_gap(SimpleNamespace(topic="run.episode.commands"), 14, 15))
    asyncio.run(consumer._add_gap(SimpleNamespace(topic="run.trialog-streams-episodes-changelog"), 4, 6))
    assert gaps == [("run.trialog-streams-episodes-changelog", 4, 6)]

    # The commit never passes the record at the committed offset (the next to read) while it is unhandled;
    # Faust's own rule let exactly that one pass (and any, from offset 0).
    commands, changelog = TP("run.episode.commands", 0), TP("changelog", 0)
    consumer._committed_offset.update({commands: 14, changelog: 14})
    consumer._acked.update({commands: [15, 16], changelog: [15, 16]})
    assert consumer._new_offset(commands) is None and consumer._new_offset(changelog) == 17
    consumer._acked[commands] = [14, 15, 16]
    assert consumer._new_offset(commands) == 17
    consumer._committed_offset[commands], consumer._acked[commands] = None, [1, 2]  # None: Faust's 0
    assert consumer._new_offset(commands) is None
