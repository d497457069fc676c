from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from ops.cli.main import build_parser, main


def test_help_lists_the_stack_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    for command in ("up", "down", "status", "prepare", "bench"):
        assert command in out


def test_status_json_reports_stopped_components_with_reasons(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    closed_port: Callable[[], int],
) -> None:
    monkeypatch.setenv("TRIALOG_HOME", str(tmp_path))
    monkeypatch.setenv("TRIALOG_KAFKA_PORT", str(closed_port()))
    monkeypatch.setenv("TRIALOG_JAEGER_QUERY_PORT", str(closed_port()))
    assert main(["status", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["healthy"] is False
    kafka, jaeger = report["components"]["kafka"], report["components"]["jaeger"]
    assert kafka["healthy"] is False and "nothing listens on" in kafka["detail"]
    assert jaeger["healthy"] is False and "/api/services" in jaeger["detail"]
