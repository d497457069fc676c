"""`trialog sandbox images` and `trialog sandbox run` in plain (non-JSON) mode, on the real engine."""

from __future__ import annotations

import json

import pytest

from ops.stack.images import sandbox_ref
from tests.integration.sandbox.cli_helpers import LABEL_ARGS, run_cli


def test_images_lists_the_sandbox_image_as_present(capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert run_cli(["sandbox", "images", "--no-build", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["sandbox"] == str(sandbox_ref())
    assert {"image": str(sandbox_ref()), "present": True} in listed["images"]


def test_images_builds_nothing_when_all_are_there(capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert run_cli(["sandbox", "images"]) == 0
    out = capsys.readouterr().out
    assert str(sandbox_ref()) in out and "missing" not in out


def test_plain_run_passes_the_streams_through_and_exits_with_the_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    capsys.readouterr()
    code = run_cli(["sandbox", "run", *LABEL_ARGS, "--", "sh", "-c", "echo out; echo err >&2; exit 7"])
    captured = capsys.readouterr()
    assert code == 7
    assert captured.out == "out\n"
    assert captured.err.startswith("err\n") and "exit 7" in captured.err and "snapshot snap-" in captured.err


def test_a_missing_image_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    code = run_cli(["sandbox", "run", *LABEL_ARGS, "--image", "trialog-nope:none", "--", "true"])
    assert code == 2 and "trialog-nope:none" in capsys.readouterr().err
