"""Running `trialog sandbox ...` in-process, through a parser built the way ops/cli/main.py builds it."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

import pytest

from ops.cli.sandbox import register
from tests.integration.sandbox.conftest import TEST_LABELS

LABEL_ARGS = [arg for key, value in TEST_LABELS.items() for arg in ("--label", f"{key}={value}")]


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="trialog")
    register(top.add_subparsers(dest="command", required=True))
    return top


def run_cli(argv: Sequence[str]) -> int:
    args = parser().parse_args(list(argv))
    code: int = args.handler(args)
    return code


def sandbox_json(options: Sequence[str], command: Sequence[str], capsys: pytest.CaptureFixture[str]) -> Any:
    """`trialog sandbox run --json OPTIONS -- COMMAND`: the one JSON object it printed, with its exit code."""
    capsys.readouterr()
    code = run_cli(["sandbox", "run", "--json", *LABEL_ARGS, *options, "--", *command])
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert len(lines) == 1, f"expected one JSON line, got: {out[:2000]!r}"
    result = json.loads(lines[0])
    assert "exit_code" in result, f"not a result: {result}"
    assert code == min(result["exit_code"], 255)
    return result
