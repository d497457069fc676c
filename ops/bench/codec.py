"""`trialog bench codec`: raw fastavro vs the trialog codec on realistic step events, and the fold rate.

All variants run in the same process, interleaved round by round (so drift in CPU frequency or load hits
them alike); each figure is the best round, with the median alongside. The codec is measured at the record
level (framing + fingerprint lookup + fastavro), which is what the 85% target is about; the full domain path
(dataclass <-> record conversion on top) and reading v1 bytes (resolution + upcaster) are reported too.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Any

import fastavro
from fastavro import schemaless_reader, schemaless_writer

from ops.bench.report import cpu_model, write_section
from ops.cli import kit
from schemas.actions import RunCommand, Submit, WriteFile
from schemas.chain import digest
from schemas.codec import MAGIC, Codec, default_codec
from schemas.common import EventMeta, FailureClass, Output, Producer
from schemas.events import EpisodeEvent, StepExecuted
from schemas.fold import apply
from schemas.state import EpisodeState
from schemas.testing import EpisodeScript

REPO_ROOT = Path(__file__).resolve().parents[2]
SECTION = "## codec"
STEP_SCHEMA = StepExecuted.SCHEMA
CODEC_TARGET = 0.85
FOLD_TARGET = 100_000.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--rounds", type=kit.positive_int, metavar="N", default=15, help="interleaved measurement rounds"
    )
    parser.add_argument(
        "--events", type=kit.positive_int, metavar="N", default=5000, help="step events per codec batch"
    )
    parser.add_argument(
        "--episodes", type=kit.positive_int, metavar="N", default=200, help="episodes in the fold batch"
    )
    kit.add_record(parser, REPO_ROOT / "BENCHMARKS.md", "codec")


# -- realistic data ------------------------------------------------------------------------------------

_PYTEST_LINE = "tests/test_parser.py::test_case_{i} PASSED                                    [{p:3d}%]\n"


def _meta(episode: int, step: int, kind: str, prev: str, snapshot: str | None = None) -> EventMeta:
    return EventMeta(
        event_id=f"{episode:08x}{step:04x}{kind}".ljust(32, "0"),
        occurred_at_us=1_700_000_000_000_000 + episode * 1_000_000 + step * 1_000,
        producer=Producer(kind, "sandbox-agent-7.pod.cluster:4121"),
        run_id="run-2024-06-01-a",
        episode_id=f"ep-{episode:08d}",
        task_id="django__django-11099",
        task_version="3f5a" * 16,
        step=step,
        attempt=1,
        policy_version=42,
        snapshot_id=snapshot,
        prev_hash=prev,
        traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    )


def step_event(i: int) -> StepExecuted:
    """A step as a sandbox reports it: a test run with ~2 KB of pytest output and a short stderr."""
    stdout = "".join(_PYTEST_LINE.format(i=(i + k) % 997, p=k * 4) for k in range(24))
    stderr = f"warning: deprecated option --foo in setup.cfg (line {i % 50})\n"
    return StepExecuted(
        meta=_meta(i, i % 30, "sandbox", digest(str(i).encode()), f"snap-{i:08d}"),
        exit_code=i % 3,
        stdout=Output(stdout, False, len(stdout)),
        stderr=Output(stderr, False, len(stderr)),
        timed_out=False,
        duration_us=1_250_000 + i,
        oom_killed=False,
    )


def _episode(codec: Codec, episode: int, steps: int) -> list[tuple[EpisodeEvent, str]]:
    """A complete chained episode (start, `steps` action/execution pairs, submit, grade, end) with digests."""
    script = EpisodeScript(codec, episode_id=f"ep-{episode:08d}")
    script.start()
    for step in range(steps):
        action = RunCommand(f"pytest -x -k case_{step}") if step % 3 else WriteFile("a.py", b"x = 1\n" * 20)
        script.act(action, token_ids=tuple(range(64)), logprobs=(-0.25,) * 64)
        script.execute(exit_code=step % 2, stdout=step_event(step).stdout.text.encode(), output_limit=4096)
    script.act(Submit())
    if episode % 10 == 9:  # some episodes fail in verification, as in a real run
        script.fail(FailureClass.VERIFIER_ERROR, "verifier crashed")
    else:
        script.reward()
        script.complete()
    return script.entries


# -- measurement ---------------------------------------------------------------------------------------


@dataclass
class Variant:
    label: str
    ops: int  # operations per batch
    run: Callable[[], object]
    rates: list[float]

    def measure(self) -> None:
        start = time.perf_counter()
        self.run()
        self.rates.append(self.ops / (time.perf_counter() - start))

    @property
    def best(self) -> float:
        return max(self.rates)

    @property
    def median(self) -> float:
        return statistics.median(self.rates)


def _raw_writer(schema: dict[str, Any], records: list[dict[str, Any]]) -> Callable[[], object]:
    def run() -> object:
        for record in records:
            out = BytesIO()
            schemaless_writer(out, schema, record)
            out.getvalue()
        return None

    return run


def _raw_reader(schema: dict[str, Any], bodies: list[bytes]) -> Callable[[], object]:
    def run() -> object:
        for body in bodies:
            schemaless_reader(BytesIO(body), schema)
        return None

    return run


def _loop(fn: Callable[[Any], object], items: list[Any]) -> Callable[[], object]:
    def run() -> object:
        for item in items:
            fn(item)
        return None

    return run


def _fold_all(episodes: list[list[tuple[EpisodeEvent, str]]]) -> Callable[[], object]:
    def run() -> object:
        for episode in episodes:
            state = EpisodeState()
            for event, event_digest in episode:
                state = apply(state, event, event_digest)
        return None

    return run


def _v1_bytes(codec: Codec, records: list[dict[str, Any]]) -> list[bytes]:
    """The same step events as an old sandbox agent (schema v1) wrote them."""
    v1 = codec.catalog.version(STEP_SCHEMA, 1)
    out = []
    for record in records:
        meta = {k: v for k, v in record["meta"].items() if k != "traceparent"}
        buf = BytesIO()
        buf.write(MAGIC + v1.fingerprint)
        schemaless_writer(buf, v1.parsed, {**record, "meta": meta})
        out.append(buf.getvalue())
    return out


def build_variants(args: argparse.Namespace, codec: Codec) -> tuple[dict[str, Variant], int]:
    events = [step_event(i) for i in range(args.events)]
    records = [e.to_record() for e in events]
    schema = codec.catalog.current(STEP_SCHEMA).parsed
    framed = [codec.encode_record(STEP_SCHEMA, r) for r in records]
    bodies = [b[10:] for b in framed]
    episodes = [_episode(codec, i, 8 + i % 8) for i in range(args.episodes)]
    fold_ops = sum(len(e) for e in episodes)
    n = len(records)

    def encode_record(record: dict[str, Any]) -> bytes:
        return codec.encode_record(STEP_SCHEMA, record)

    table = [
        Variant("raw fastavro write", n, _raw_writer(schema, records), []),
        Variant("trialog encode_record", n, _loop(encode_record, records), []),
        Variant("raw fastavro read", n, _raw_reader(schema, bodies), []),
        Variant("trialog decode_record", n, _loop(codec.decode_record, framed), []),
        Variant("trialog encode (dataclass)", n, _loop(codec.encode, events), []),
        Variant("trialog decode (dataclass)", n, _loop(codec.decode, framed), []),
        Variant(
            "trialog decode v1 (resolve+upcast)", n, _loop(codec.decode_record, _v1_bytes(codec, records)), []
        ),
        Variant("fold apply (events)", fold_ops, _fold_all(episodes), []),
    ]
    return {v.label: v for v in table}, len(framed[0])


def render(args: argparse.Namespace, variants: dict[str, Variant], event_size: int) -> str:
    v = variants
    write_ratio = v["trialog encode_record"].best / v["raw fastavro write"].best
    read_ratio = v["trialog decode_record"].best / v["raw fastavro read"].best
    fold_rate = v["fold apply (events)"].best
    domain_write = v["trialog encode (dataclass)"].best / v["raw fastavro write"].best
    domain_read = v["trialog decode (dataclass)"].best / v["raw fastavro read"].best
    codec_met = "met" if min(write_ratio, read_ratio) >= CODEC_TARGET else "NOT met"
    fold_met = "met" if fold_rate >= FOLD_TARGET else "NOT met"
    lines = [
        SECTION,
        "",
        f"- date: {datetime.datetime.now(datetime.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- machine: {cpu_model()}, {os.cpu_count()} cores; Python {platform.python_version()}, "
        f"fastavro {fastavro.__version__}",
        f"- command: `trialog bench codec --rounds {args.rounds} --events {args.events} "
        f"--episodes {args.episodes}`",
        f"- data: StepExecuted events of {event_size} bytes (pytest output, full header); fold over "
        f"{args.episodes} complete episodes. Best of {args.rounds} interleaved rounds (median alongside).",
        "",
        "| variant | ops/s best | ops/s median |",
        "| --- | ---: | ---: |",
        *(f"| {x.label} | {x.best:,.0f} | {x.median:,.0f} |" for x in variants.values()),
        "",
        f"- codec / raw fastavro: write {write_ratio:.1%}, read {read_ratio:.1%} "
        f"(target >= {CODEC_TARGET:.0%}: {codec_met})",
        f"- with dataclass conversion on top (informational): encode {domain_write:.1%}, "
        f"decode {domain_read:.1%} of raw fastavro",
        f"- fold: {fold_rate:,.0f} events/s on one core (target >= {FOLD_TARGET:,.0f}: {fold_met})",
        "",
    ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    codec = default_codec()
    variants, event_size = build_variants(args, codec)
    for variant in variants.values():  # warm-up: caches, lazy imports, branch predictors
        variant.run()
    for _ in range(args.rounds):
        for variant in variants.values():
            variant.measure()
    section = render(args, variants, event_size)
    print(section)
    if not args.no_record:
        write_section(args.record, section)
        print(f"wrote {args.record}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="trialog bench codec", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
