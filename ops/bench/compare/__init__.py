"""`trialog bench compare`: trialog against the way other frameworks do the job, side by side on this
machine, one part at a time (`--parts`), each recorded as its own section of BENCHMARKS.md.

tail: the synchronous loop (acquire sandboxes, roll out, verify, update, release, in lockstep) against the
streaming pipeline with the same sandboxes, under a simulated policy with a long tail of step latencies
and episode lengths: episodes trained per minute and the learner's idle fraction (target: at least 3x the
loop's episodes per minute at the same staleness bound, learner idle under 20%).

crash: sandbox-seconds redone per crash when an episode restarts from step 0 (what other frameworks do)
against trialog's resume from the last snapshot, on 30-step episodes (target: at least 10x less).

churn: sandbox create+start p50 and sustained sandboxes per second against `docker run`, per OCI runtime
the engine has (target: p50 at or under 90 ms, at least 10 per second).
"""

from __future__ import annotations

import argparse
import importlib

from ops.bench.report import write_section
from ops.cli import kit
from ops.paths import REPO_ROOT

# Each part is a module with `add_arguments(parser)` (options prefixed with its name) and
# `measure(args) -> str` (its own markdown section, first line `## compare: ...`).
PARTS = {
    "tail": "ops.bench.compare.tail",
    "crash": "ops.bench.compare.crash",
    "churn": "ops.bench.compare.churn",
}


def _parts(text: str) -> list[str]:
    parts = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [part for part in parts if part not in PARTS]
    if not parts or unknown:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give parts among {', '.join(PARTS)}, comma-separated"
            + (f" (unknown: {', '.join(unknown)})" if unknown else "")
        )
    return list(dict.fromkeys(parts))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--parts",
        type=_parts,
        metavar="PART[,PART...]",
        default=",".join(PARTS),
        help=f"which comparisons to run: {', '.join(PARTS)}",
    )
    kit.add_bootstrap(parser)
    kit.add_record(parser, REPO_ROOT / "BENCHMARKS.md", "compare: ...")
    for module in PARTS.values():
        importlib.import_module(module).add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from ops.console import say

    for part in args.parts:
        section: str = importlib.import_module(PARTS[part]).measure(args)
        print(section)
        if not args.no_record:
            write_section(args.record, section)
            say(f"wrote {section.splitlines()[0]} into {args.record}")
    return kit.EXIT_OK
