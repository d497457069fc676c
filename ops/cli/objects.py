"""`trialog objects gc`: delete the object store's blobs that no record still needed names (`ops.objects_gc`).

A preview by default (what would go, and how many bytes); `--delete` deletes. Exit codes: 0 done (or
previewed); 2 Kafka or a topic could not be read (nothing is deleted then), or the store is not a folder
(an S3 store is refused: its objects cannot be touched when reused, see docs/object-store.md).
"""

from __future__ import annotations

import argparse
import json

from ops.cli import kit
from ops.cli.run_log_args import add_log_options, kafka_of
from ops.log_defaults import DEFAULT_GC_GRACE_HOURS, DEFAULT_GC_WINDOW_DAYS
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
    add_log_options(gc, objects=True)  # --bootstrap, --timeout, --objects, as every reader of the log
    kit.add_json(gc)


def _cmd_gc(args: argparse.Namespace) -> int:
    from kafka.errors import KafkaError

    from ops.objects_gc import BlobFolder, collect_garbage, kafka_source
    from ops.stores import local_folder
    from streams.kafka.reader import ReadError

    # The clean-up keeps blobs by their modification time (refreshed whenever a writer reuses one), which
    # only a folder has: an S3 store is refused (docs/object-store.md says why and what to do instead).
    store = local_folder(args.objects, "trialog objects gc")
    if not store.root.is_dir():
        raise StackError(f"no object store at {store.root}", "name it with --objects DIR")
    bootstrap = kafka_of(args)
    try:
        names, read = kafka_source(bootstrap, args.timeout)
        report = collect_garbage(
            names, read, store, BlobFolder(store.root),
            window_s=args.window_days * 86400, grace_s=args.grace_hours * 3600, apply=args.delete,
        )  # fmt: skip
    except (KafkaError, ReadError) as exc:
        raise StackError(f"cannot read the log on {bootstrap}: {exc}", "nothing was deleted; retry") from None
    if args.json:
        print(json.dumps({"objects": str(store.root), **report.to_json()}, indent=2))
        return kit.EXIT_OK
    verb = "deleted" if report.applied else "would delete"
    print(
        f"{verb} {report.deleted} blobs ({kit.size_text(report.bytes_freed)}) from {store.root}; kept "
        f"{report.live} named and {report.young} young; read {report.records} records of {report.topics} "
        f"topics in {report.seconds:.1f} s"
    )
    for snapshot in report.broken_snapshots:
        print(f"  broken snapshot (manifest unreadable): {snapshot}")
    if not report.applied and report.deleted:
        print("  (a preview: add --delete to delete)")
    return kit.EXIT_OK
