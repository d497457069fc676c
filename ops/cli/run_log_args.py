"""What every command that reads a run back shares (`audit`, `replay`, `reproduce`, `report`): its options
(where Kafka is, how long to wait for silence, where the object store is, local task folders, a run bundle
to read instead of Kafka), the fast answer when Kafka is not there, and a log that cannot be read as a
`StackError` (one line, or one JSON object under `--json`, exit code 2)."""

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
    from ops.run_bundle import Bundle
    from ops.stores import ObjectStores
    from schemas.object_stores import StoreLocation

DEFAULT_TIMEOUT_S = 60.0
UNREADABLE_HINT = "check the run's name (trialog run status RUN) and the stack (trialog status)"


def add_log_options(
    parser: argparse.ArgumentParser, *, objects: bool = False, tasks: bool = False, bundle: bool = False
) -> None:
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
    if bundle:
        parser.add_argument(
            "--bundle",
            type=Path,
            metavar="DIR",
            help="read the run from this bundle (trialog bundle RUN DIR) instead of Kafka, and its blobs "
            "from DIR/objects unless --objects names another store",
        )


def kafka_of(args: argparse.Namespace) -> str:
    """The broker the command names (else the local stack's), once it answers; a `StackError` within a few
    seconds, or within `--timeout` when that is shorter, when it does not."""
    return kit.require_kafka(kit.bootstrap_of(args), min(kit.SERVICE_PROBE_S, args.timeout))


@contextmanager
def log_errors() -> Iterator[None]:
    """A `LogReadError` (Kafka gone meanwhile, the run's topics missing) or a `BundleError` (a bundle's
    topic missing or unreadable) raised in the block, as a `StackError`. Reading is lazy: the block must
    cover consuming the records, not only asking for them."""
    from ops.run_bundle import BundleError
    from ops.runlog import LogReadError

    try:
        yield
    except LogReadError as exc:
        raise StackError(str(exc), UNREADABLE_HINT) from None
    except BundleError as exc:
        raise StackError(str(exc), "bundle the run again (trialog bundle RUN DIR)") from None


def objects_of(args: argparse.Namespace, bundle: Bundle | None = None) -> ObjectStores:
    """The store `--objects` names, else the bundle's (when reading one), else the stack's
    (`$TRIALOG_OBJECT_STORE`, else its folder)."""
    from ops.stores import open_objects

    given: StoreLocation | None = getattr(args, "objects", None)
    if given is None and bundle is not None:
        return bundle.objects
    return open_objects(given)


def bundle_of(args: argparse.Namespace) -> Bundle | None:
    """The bundle `--bundle` names, opened and checked against its manifest (None without `--bundle`); a
    `StackError` that says what does not match."""
    folder: Path | None = getattr(args, "bundle", None)
    if folder is None:
        return None
    from ops.run_bundle import Bundle, BundleError

    try:
        return Bundle.open(folder)
    except BundleError as exc:
        raise StackError(f"bundle {folder}: {exc}", "bundle the run again (trialog bundle RUN DIR)") from None


def bundle_run(bundle: Bundle, given: str | None) -> str:
    """The run a bundle holds; a `StackError` when the command also names another one."""
    if given is not None and given != bundle.run:
        raise StackError(
            f"bundle {bundle.root} holds run {bundle.run!r}, not {given!r}",
            "leave the run out with --bundle, or name the run the bundle holds",
        )
    return bundle.run


def require_blobs(args: argparse.Namespace, bundle: Bundle, what: str) -> None:
    """A `StackError` when `what` (a recheck, a reproduction) would read blobs that a hashes-only bundle
    does not hold and no other store is named."""
    if bundle.hashes_only and getattr(args, "objects", None) is None:
        raise StackError(
            f"bundle {bundle.root} holds only the hashes of the run's {len(bundle.absent_blobs)} blobs "
            f"(written with --hashes-only): {what} needs the snapshots and task bundles themselves",
            "name a store that holds them with --objects LOCATION, or bundle the run again without "
            "--hashes-only",
        )


def local_tasks(args: argparse.Namespace) -> FolderTasks | None:
    from actors.verifier.tasks import FolderTasks

    folders: list[Path] | None = getattr(args, "tasks", None)
    return FolderTasks(folders) if folders else None
