"""`trialog bench compare`: trialog against the way other frameworks do the same job, side by side.

Parts (`--parts`, comma-separated, all by default): `crash` (sandbox-seconds redone per crash: restart from
step 0 against resume from the last snapshot) and `churn` (sandbox create+start p50 and sustained sandboxes
per second against `docker run`). Each part writes its own `## compare: ...` section of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from ops.bench.compare import churn as churn
from ops.bench.compare import crash as crash
from ops.bench.report import write_section
from ops.cli import kit

REPO_ROOT = Path(__file__).resolve().parents[3]
PARTS: dict[str, ModuleType] = {"crash": crash, "churn": churn}


def _parts(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in PARTS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"choose from {', '.join(PARTS)} (got {text!r})")
    return list(dict.fromkeys(names))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--parts",
        type=_parts,
        default=list(PARTS),
        metavar="A,B",
        help=f"which comparisons to run, comma-separated ({', '.join(PARTS)})",
    )
    for module in PARTS.values():
        module.add_arguments(parser)
    kit.add_record(parser, REPO_ROOT / "BENCHMARKS.md", "compare: ...")


def run(args: argparse.Namespace) -> int:
    measure: dict[str, Callable[[argparse.Namespace], str]] = {
        name: PARTS[name].measure for name in args.parts
    }
    for name, part in measure.items():
        print(f"-> compare: {name} ...", file=sys.stderr, flush=True)
        section = part(args)
        print(section)
        if not args.no_record:
            write_section(args.record, section)
            print(f"wrote {args.record}", file=sys.stderr)
    return 0
