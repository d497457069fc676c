"""`trialog objects gc`: delete the object store's blobs that no record still needed names (`ops.objects_gc`).

A preview by default (what would go, and how many bytes); `--delete` deletes. The store is a folder or an
S3 bucket (`--objects`, else the stack's). Exit codes: 0 done (or previewed); 2 Kafka or a topic could not
be read (nothing is deleted then), or the store could not be listed or a deletion failed.
"""

from __future__ import annotations

import argparse
import json
import sys

from ops.cli import kit
from ops.cli.run_log_args import add_log_options, kafka_of
from ops.log_defaults import DEFAULT_GC_GRACE_HOURS, DEFAULT_GC_SETTLE_S, DEFAULT_GC_WINDOW_DAYS
from streams.errors import StackError


def register(subparsers: kit.Subparsers) -> None:
    group = kit.command(
        subparsers,
        "objects",
        "look after the object store (snapshots, outputs, bundles, weights)",
        examples=("trialog objects gc", "trialog objects gc --delete --window-days 7"),
    )
    commands = kit.subcommands(group, "objects_command")
    text = "delete blobs that no record of any run on the broker still needs"
    gc = kit.command(
        commands,
        "gc",
        text,
        handler=_cmd_gc,
        description=f"{text}. Live: whatever a record written within the audit window names (snapshots "
        "with every file they list), whatever the tasks topics name, each run's newest weights; blobs "
        "written within the grace period are kept too. Without --delete it only previews. Exit code 0: "
        "done or previewed; 2: the log or the store could not be read (nothing deleted).",
        examples=(
            "trialog objects gc",
            "trialog objects gc --delete",
            "trialog objects gc --delete --window-days 7 --grace-hours 6 --json",
            "trialog objects gc --objects s3://trialog-runs/week-49 --delete",
        ),
    )
    gc.add_argument("--delete", action="store_true", help="delete what is not live (default: a preview)")
    gc.add_argument(
        "--window-days",
        type=kit.non_negative_float,
        default=DEFAULT_GC_WINDOW_DAYS,
        metavar="D",
        help="records older than D days no longer keep their blobs (their episodes are past auditing)",
    )
    gc.add_argument(
        "--grace-hours",
        type=kit.positive_float,
        default=DEFAULT_GC_GRACE_HOURS,
        metavar="H",
        help="never delete a blob written or reused within H hours (a record naming it may be in flight)",
    )
    gc.add_argument(
        "--settle-seconds",
        type=kit.non_negative_float,
        default=DEFAULT_GC_SETTLE_S,
        metavar="S",
        help="with --delete, wait S seconds, then read the records written meanwhile and keep what they name "
        "(a snapshot that reused an old blob names it within S seconds)",
    )
    add_log_options(gc, objects=True)  # --bootstrap, --timeout, --objects, as every reader of the log
    kit.add_json(gc)


def _cmd_gc(args: argparse.Namespace) -> int:
    from kafka.errors import KafkaError

    from ops.objects_gc import BlobFolder, BucketBlobs, StoredBlobs, collect_garbage, kafka_source
    from ops.stores import location_of, open_objects
    from schemas.blobs import LocalObjectStore, ObjectStoreUnavailable
    from streams.kafka.reader import ReadError

    location = location_of(args.objects)
    if location.folder is not None and not location.folder.is_dir():
        raise StackError(f"no object store at {location.folder}", "name it with --objects LOCATION")
    store = open_objects(location)  # an S3 store is asked once: a bad endpoint or bucket stops here
    blobs: StoredBlobs = BlobFolder(store.root) if isinstance(store, LocalObjectStore) else BucketBlobs(store)
    bootstrap = kafka_of(args)
    if args.delete:  # progress: the settling wait is a minute by default
        where, wait = blobs.where, args.settle_seconds
        print(f"marking from the log on {bootstrap}; deleting from {where} after {wait:g} s", file=sys.stderr)
    try:
        names, read = kafka_source(bootstrap, args.timeout)
        report = collect_garbage(
            names, read, store, blobs, window_s=args.window_days * 86400, grace_s=args.grace_hours * 3600,
            settle_s=args.settle_seconds, apply=args.delete,
        )  # fmt: skip
    except (KafkaError, ReadError) as exc:
        raise StackError(f"cannot read the log on {bootstrap}: {exc}", "nothing was deleted; retry") from None
    except ObjectStoreUnavailable as exc:
        raise StackError(exc.message, f"{exc.hint}; run it again (what is deleted stays deleted)") from None
    if args.json:
        print(json.dumps({"objects": blobs.where, **report.to_json()}, indent=2))
        return kit.EXIT_OK
    verb = "deleted" if report.applied else "would delete"
    print(
        f"{verb} {report.deleted} blobs ({kit.size_text(report.bytes_freed)}) from {blobs.where}; kept "
        f"{report.live} named, {report.young} young and {report.reused} reused meanwhile; read "
        f"{report.records} records of {report.topics} topics in {report.seconds:.1f} s"
    )
    for snapshot in report.broken_snapshots:
        print(f"  broken snapshot (manifest unreadable): {snapshot}")
    if not report.applied and report.deleted:
        print("  (a preview: add --delete to delete)")
    return kit.EXIT_OK
