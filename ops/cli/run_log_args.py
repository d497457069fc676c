"""What every command that reads a run back shares (`audit`, `replay`, `reproduce`, `report`): its options
(where Kafka is, how long to wait for silence, where the object store is, local task folders), the fast
answer when Kafka is not there, and a log that cannot be read as a `StackError` (one line, or one JSON
object under `--json`, exit code 2)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from ops.cli import kit
from streams.errors import StackError

if TYPE_CHECKING:  # the CLI builds its parser from this module: keep it light
    from actors.verifier.tasks import FolderTasks
    from schemas.blobs import LocalObjectStore

DEFAULT_TIMEOUT_S = 60.0
UNREADABLE_HINT = "check the run's name (trialog run status RUN) and the stack (trialog status)"


def add_log_options(parser: argparse.ArgumentParser, *, objects: bool = False, tasks: bool = False) -> None:
    kit.add_bootstrap(parser)
    parser.add_argument(
        "--timeout",
        type=kit.positive_seconds,
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help="give up when Kafka or the next record does not come for S seconds",
    )
    if objects:
        kit.add_objects(parser, "the object store the run wrote")
    if tasks:
        parser.add_argument(
            "--tasks",
            type=Path,
            nargs="+",
            action="extend",
            metavar="DIR",
            help="task folders to use when a task's bundle is not in the store (exact versions only)",
        )


def kafka_of(args: argparse.Namespace) -> str:
    """The broker the command names (else the local stack's), once it answers; a `StackError` within a few
    seconds, or within `--timeout` when that is shorter, when it does not."""
    return kit.require_kafka(kit.bootstrap_of(args), min(kit.SERVICE_PROBE_S, args.timeout))


@contextmanager
def log_errors() -> Iterator[None]:
    """A `LogReadError` (Kafka gone meanwhile, the run's topics missing) raised in the block, as a
    `StackError`. Reading is lazy: the block must cover consuming the records, not only asking for them."""
    from ops.runlog import LogReadError

    try:
        yield
    except LogReadError as exc:
        raise StackError(str(exc), UNREADABLE_HINT) from None


def objects_of(args: argparse.Namespace) -> LocalObjectStore:
    from ops.paths import Paths
    from schemas.blobs import LocalObjectStore

    folder: Path | None = getattr(args, "objects", None)
    return LocalObjectStore(folder if folder is not None else Paths.from_env().objects)


def local_tasks(args: argparse.Namespace) -> FolderTasks | None:
    from actors.verifier.tasks import FolderTasks

    folders: list[Path] | None = getattr(args, "tasks", None)
    return FolderTasks(folders) if folders else None
