from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from ops.cli.sandbox import print_step, register, run_once, spec_from_args
from sandbox_agent.limits import GIB, MIB, ExecLimits, Quotas
from sandbox_agent.local_backend import LocalProcessBackend
from sandbox_agent.manifest import SnapshotId
from sandbox_agent.snapshots import SnapshotStore
from schemas.blobs import MemoryObjectStore

CLI_KEYS = {
    "exit_code",
    "stdout",
    "stderr",
    "timed_out",
    "oom_killed",
    "truncated",
    "duration_s",
    "snapshot_id",
}


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="trialog")
    register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_run_takes_the_quota_options_and_the_command_after_the_dashes() -> None:
    args = parse(
        "sandbox", "run", "--image", "img:1", "--timeout", "5", "--memory", "512m", "--cpus", "0.5",
        "--pids", "32", "--disk", "100m", "--json", "--", "python3", "-c", "print(1)", "--json",
    )  # fmt: skip
    assert (args.command, args.sandbox_command, args.json, args.timeout) == ("sandbox", "run", True, 5.0)
    assert args.argv == ["python3", "-c", "print(1)", "--json"] and callable(args.handler)
    spec = spec_from_args(args, "default:1")
    assert spec.image == "img:1"
    assert spec.quotas == Quotas(
        memory_bytes=512 * MIB, cpus=0.5, pids=32, workspace_bytes=100 * MIB, tmp_bytes=100 * MIB
    )


def test_run_defaults_to_the_default_image_and_quotas() -> None:
    args = parse("sandbox", "run", "--", "true")
    spec = spec_from_args(args, "default:1")
    assert spec.image == "default:1" and spec.quotas == Quotas()
    assert spec.quotas.memory_bytes == 2 * GIB


def test_images_has_its_own_handler() -> None:
    args = parse("sandbox", "images", "--no-build", "--json")
    assert args.no_build and args.json and callable(args.handler)


def test_labels_are_key_value_pairs() -> None:
    args = parse("sandbox", "run", "--label", "a=1", "--label", "b=x=y", "--", "true")
    assert dict(args.label) == {"a": "1", "b": "x=y"}
    with pytest.raises(SystemExit):
        parse("sandbox", "run", "--label", "novalue", "--", "true")


def test_disk_sets_both_mounts_and_unset_keeps_each_default() -> None:
    spec = spec_from_args(parse("sandbox", "run", "--disk", "64m", "--", "true"), "img")
    assert (spec.quotas.workspace_bytes, spec.quotas.tmp_bytes) == (64 * MIB, 64 * MIB)
    defaults = spec_from_args(parse("sandbox", "run", "--", "true"), "img").quotas
    assert (defaults.workspace_bytes, defaults.tmp_bytes) == (Quotas().workspace_bytes, Quotas().tmp_bytes)


def test_run_once_copies_the_workspace_runs_snapshots_and_cleans_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task = tmp_path / "task"
    task.mkdir()
    (task / "data.txt").write_text("from the host\n")
    objects = MemoryObjectStore()
    backend = LocalProcessBackend(objects, tmp_path / "sandboxes")
    step = run_once(
        backend, SnapshotStore(objects), spec_from_args(parse("sandbox", "run", "--", "x"), "img"),
        ["sh", "-c", "cat data.txt; echo new > made.txt"], ExecLimits(timeout_s=10), task,
    )  # fmt: skip
    assert step.result.exit_code == 0 and step.result.stdout == "from the host\n"
    manifest = SnapshotStore(objects).load(SnapshotId.parse(step.snapshot_id))
    assert [entry.path for entry in manifest.entries] == ["data.txt", "made.txt"]
    assert list((tmp_path / "sandboxes").iterdir()) == []  # the sandbox is gone
    print_step(step, as_json=True)
    printed = json.loads(capsys.readouterr().out)
    assert set(printed) >= CLI_KEYS and printed["snapshot_id"] == step.snapshot_id
