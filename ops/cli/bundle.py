"""`trialog bundle RUN OUT`: write a run's portable bundle (`ops.run_bundle`): its topics, the blobs they
name, image recipes, the reward rule and the versions, for `audit --bundle` and `reproduce --bundle`.

Every topic of the catalogue (`schemas.topics.TOPICS`) that the run has on the broker is read to its end
offsets at the start, one topic after the other; the blobs come from the run's object store (`--objects`).
What was written is read back before the summary: each topic's record count and each copied blob's hash.
Progress goes to stderr.

Exit codes: 0 written and verified; 1 written, but some blob the log names was not in the store (listed
as missing in the manifest; a recheck of its episode will say so); 2 nothing usable written (OUT not
empty, Kafka or the store unreachable, the run's topics missing, the read-back found a difference).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ops.cli import kit
from ops.cli.run_log_args import add_log_options, kafka_of, log_errors, objects_of
from streams.errors import StackError

if TYPE_CHECKING:  # ops.run_bundle loads the codecs: only when the command runs
    from ops.run_bundle import BundleSummary, ImageRecipe


def register(subparsers: kit.Subparsers) -> None:
    text = "write a run's portable bundle: topics, the blobs they name, image recipes, versions"
    command = kit.command(
        subparsers,
        "bundle",
        text,
        handler=_cmd_bundle,
        description=f"{text}. `trialog audit --bundle OUT` and `trialog reproduce EPISODE --bundle OUT` "
        "then work from OUT alone, on a machine that never ran the run (no Kafka; a recheck or a "
        "reproduction needs Docker). Exit code 0: written and verified; 1: written, but blobs the log "
        "names are missing from the store (listed in the manifest); 2: not written.",
        examples=(
            "trialog bundle RUN /tmp/run-bundle",
            "trialog bundle RUN /tmp/run-bundle --hashes-only --json",
            "trialog bundle RUN OUT --bootstrap 127.0.0.1:9092 --objects /srv/trialog/objects",
        ),
    )
    kit.add_run(command, positional=True)
    command.add_argument("out", metavar="OUT", type=Path, help="a new or empty folder to write the bundle in")
    command.add_argument(
        "--hashes-only",
        action="store_true",
        help="list the blobs' hashes instead of copying them (a small bundle: the audit works from it; "
        "a recheck or a reproduction then needs a store that holds the blobs, named with --objects)",
    )
    kit.add_json(command)
    add_log_options(command, objects=True)


def _cmd_bundle(args: argparse.Namespace) -> int:
    out: Path = args.out
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise StackError(f"{out} is not an empty folder", "name a new or empty folder for the bundle")
    from schemas.blobs import LocalObjectStore

    store = objects_of(args)  # an S3 store was asked once already: its bucket exists
    if isinstance(store, LocalObjectStore) and not store.root.is_dir():
        raise StackError(f"no object store at {store.root}", "name the run's store with --objects LOCATION")
    bootstrap = kafka_of(args)
    from ops.run_bundle import Bundle, BundleError, software_versions, write_bundle
    from ops.runlog import read_topics

    bases = _run_topics(bootstrap, args.run, args.timeout)
    topics = {base: read_topics(bootstrap, args.run, (base,), timeout_s=args.timeout) for base in bases}
    progress = _progress
    progress(f"run {args.run or '(default)'} on {bootstrap}: {len(bases)} topics into {out}")
    from ops.paths import REPO_ROOT

    lock = REPO_ROOT / "ops" / "requirements.lock"
    try:
        with log_errors():
            summary = write_bundle(
                args.run, topics, store, out, blobs="hashes" if args.hashes_only else "copy",
                images=_image_recipes(), software=software_versions(kit.trialog_version()),
                lock=lock.read_bytes() if lock.is_file() else None, progress=progress,
            )  # fmt: skip
        progress("reading the bundle back")
        problems = Bundle.open(out).verify()
    except BundleError as exc:
        raise StackError(str(exc), f"remove {out} and bundle again") from None
    if problems:
        raise StackError(f"the bundle read back differs: {'; '.join(problems[:3])}", f"remove {out}, retry")
    if args.json:
        print(json.dumps(summary.to_json(), indent=2))
    else:
        print(_table(summary, hashes_only=args.hashes_only))
    return kit.EXIT_FOUND if summary.missing or summary.broken_snapshots else kit.EXIT_OK


def _run_topics(bootstrap: str, run: str, timeout_s: float) -> list[str]:
    """The base names of the catalogue's topics that `run` has on the broker (all of them for a run made
    by `run start`; a run made before a topic joined the catalogue lacks it, and is bundled without it)."""
    from kafka.errors import KafkaError

    from schemas.topics import TOPICS
    from streams.kafka import clients

    try:
        consumer = clients.consumer(
            bootstrap, group_id=None, bootstrap_timeout_ms=int(min(10.0, timeout_s) * 1000)
        )
        try:
            existing = set(consumer.topics())
        finally:
            consumer.close()
    except KafkaError as exc:
        raise StackError(f"cannot list the topics on {bootstrap}: {exc!r}", kit.KAFKA_HINT) from None
    bases = [topic.name for topic in TOPICS if topic.of(run) in existing]
    if not bases:
        raise StackError(
            f"run {run!r} has none of its topics on {bootstrap}",
            "check the run's name (trialog run status RUN)",
        )
    return bases


def _image_recipes() -> list[ImageRecipe]:
    """The recipes of the images this checkout builds, with their Docker image ids where the stack's
    engine answers and holds them (a run's images are named by tag, and the tag hashes the recipe)."""
    from ops.paths import Paths
    from ops.run_bundle import ImageRecipe
    from ops.stack import docker_engine
    from ops.stack.images import BASE_RECIPE, DERIVED, IMAGES_DIR, base_ref, derived_ref

    folders = [(base_ref(), {BASE_RECIPE.name: BASE_RECIPE.read_bytes()})]
    for kind in DERIVED:
        folder = IMAGES_DIR / kind
        files = {
            p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
        }
        folders.append((derived_ref(kind), files))
    ids = _image_ids([str(ref) for ref, _ in folders], docker_engine.current(Paths.from_env()))
    return [ImageRecipe(ref.name, ref.tag, files, ids.get(str(ref))) for ref, files in folders]


def _image_ids(refs: list[str], engine: Any) -> dict[str, str]:
    if engine is None:
        return {}
    from docker.errors import DockerException

    client = engine.client(timeout_s=10)
    found = {}
    try:
        for ref in refs:
            try:
                found[ref] = str(client.images.get(ref).id)
            except DockerException:
                continue  # not built on this engine: the bundle has its recipe and tag only
    finally:
        client.close()
    return found


def _progress(line: str) -> None:
    print(f"bundle: {line}", file=sys.stderr, flush=True)


def _table(summary: BundleSummary, *, hashes_only: bool) -> str:
    lines = [f"bundle of run {summary.run or '(default)'} in {summary.out} ({summary.seconds:.1f} s)"]
    for base, count in summary.records.items():
        lines.append(f"  {base:<24} {count:>8} records")
    what = "listed by hash (not copied)" if hashes_only else f"{summary.blobs_copied} copied"
    lines.append(f"  blobs: {summary.blobs} named by the log, {what}, {kit.size_text(summary.blob_bytes)} B")
    lines.append(f"  written: {kit.size_text(summary.bytes_written)} B")
    for ref in summary.missing[:10]:
        lines.append(f"  MISSING from the store: {ref.sha256} ({ref.media_type}, {ref.size} B)")
    if len(summary.missing) > 10:
        lines.append(f"  ... and {len(summary.missing) - 10} more missing (see manifest.json)")
    for snapshot in summary.broken_snapshots:
        lines.append(f"  broken snapshot (manifest unreadable): {snapshot}")
    return "\n".join(lines)
