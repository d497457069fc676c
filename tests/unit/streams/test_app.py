"""The Faust app's wiring, without a broker: names carry the run, the table is RocksDB with a small cache."""

from __future__ import annotations

import argparse
from pathlib import Path

from streams.app import BLOCK_CACHE_BYTES, Settings, build_app
from streams.cli import register


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
