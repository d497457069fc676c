"""pytest plugin of the grading harness: one JSON line per reported test phase, for `actors.tasks.report`.

Loaded with `-p trialog_report` from the harness folder. It imports nothing from trialog, because where
the frozen tests run (a sandbox image) only pytest is installed. The report file is opened when the plugin
loads, before any code under test is imported, and its path is removed from the environment.
"""

from __future__ import annotations

import json
import os
from typing import IO

import pytest

_ENV = "TRIALOG_REPORT"
_out: IO[str] | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _out
    path = os.environ.pop(_ENV, None)
    if path:
        # Kept open for the whole session (closed in pytest_unconfigure), hence no `with`.
        _out = open(path, "a", encoding="utf-8")  # noqa: SIM115


def pytest_unconfigure(config: pytest.Config) -> None:
    if _out is not None:
        _out.close()


def _write(test_id: str, when: str, outcome: str) -> None:
    if _out is not None:
        _out.write(json.dumps({"id": test_id, "when": when, "outcome": outcome}) + "\n")
        _out.flush()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # An xfail is reported as skipped, an xpass as passed with `wasxfail`: neither is a real pass.
    outcome = "skipped" if hasattr(report, "wasxfail") else report.outcome
    _write(report.nodeid, report.when, outcome)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.outcome != "passed":
        _write(report.nodeid, "collect", report.outcome)
