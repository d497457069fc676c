"""The options every command that reads a run back shares (`audit`, `replay`, `reproduce`, `report`):
where Kafka is, how long to wait for silence, where the object store is, and local task folders."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the CLI builds its parser from this module: keep it light
    from actors.verifier.tasks import FolderTasks
    from schemas.blobs import LocalObjectStore

DEFAULT_TIMEOUT_S = 60.0


def add_log_options(parser: argparse.ArgumentParser, *, objects: bool = False, tasks: bool = False) -> None:
    parser.add_argument(
        "--bootstrap", metavar="HOST:PORT", help="Kafka bootstrap servers (default: the local stack's broker)"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help=f"give up when no record arrives for S seconds (default {DEFAULT_TIMEOUT_S:g})",
    )
    if objects:
        parser.add_argument(
            "--objects",
            type=Path,
            metavar="DIR",
            help="the object store the run wrote (default: $TRIALOG_HOME/objects)",
        )
    if tasks:
        parser.add_argument(
            "--tasks",
            type=Path,
            nargs="+",
            action="extend",
            metavar="DIR",
            help="task folders to use when a task's bundle is not in the store (exact versions only)",
        )


def bootstrap_of(args: argparse.Namespace) -> str:
    if args.bootstrap:
        return str(args.bootstrap)
    from ops.stack.stack import StackConfig

    return StackConfig.load().kafka.bootstrap


def objects_of(args: argparse.Namespace) -> LocalObjectStore:
    from ops.paths import Paths
    from schemas.blobs import LocalObjectStore

    folder: Path | None = getattr(args, "objects", None)
    return LocalObjectStore(folder if folder is not None else Paths.from_env().objects)


def local_tasks(args: argparse.Namespace) -> FolderTasks | None:
    from actors.verifier.tasks import FolderTasks

    folders: list[Path] | None = getattr(args, "tasks", None)
    return FolderTasks(folders) if folders else None
