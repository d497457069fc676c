"""Running a task's frozen tests with the host's Python: for authoring and CI on *trusted* code only.

This is how the example tasks and imported task sets are proven valid without sandboxes (repo/ fails,
repo/ + solution.patch passes). It lays the tests out as the grading harness does (frozen tests and the
report plugin in a folder of their own, outside the workspace, under an empty pytest configuration), but it
does not isolate anything: never point it at an agent's workspace. Agents are graded by the verifier, in a
sandbox.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from actors.tasks.harness import REPORT_PLUGIN
from actors.tasks.report import parse_report
from actors.tasks.reward import Grade, Outcome, grade
from actors.tasks.spec import Task
from actors.tasks.tamper import compare_trees

OUTPUT_LIMIT = 20_000


@dataclass(frozen=True)
class HostRun:
    reports: tuple[tuple[str, Outcome], ...]
    exit_code: int | None  # None: killed at the timeout
    output: str  # the tail of pytest's stdout and stderr
    duration_s: float


def run_tests(
    task: Task, workspace: Path, *, timeout_s: float | None = None, python: str = sys.executable
) -> HostRun:
    """Run the frozen tests of `task` against the folder `workspace` in a subprocess."""
    with tempfile.TemporaryDirectory(prefix="trialog-hostrun-") as scratch:
        harness = _lay_out_harness(task, Path(scratch))
        report = Path(scratch) / "report.jsonl"
        # --continue-on-collection-errors: one test file that fails to import must not cancel the others.
        command = [python, "-m", "pytest", "-q", "-p", "trialog_report", "-p", "no:cacheprovider"]
        command += ["--continue-on-collection-errors"]
        command += ["--rootdir", str(harness), "-c", str(harness / "pytest.ini"), "tests"]
        started = time.monotonic()
        exit_code, output = _run(
            command, harness, _env(harness, workspace, report), timeout_s or task.spec.timeout_s
        )
        text = report.read_text(encoding="utf-8") if report.exists() else ""
        return HostRun(tuple(parse_report(text)), exit_code, output, time.monotonic() - started)


def _lay_out_harness(task: Task, scratch: Path) -> Path:
    harness = scratch / "harness"
    shutil.copytree(task.tests_dir, harness / "tests", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(REPORT_PLUGIN, harness / REPORT_PLUGIN.name)
    # An empty configuration of our own: nothing found elsewhere decides how tests are collected or run.
    (harness / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    return harness


def _env(harness: Path, workspace: Path, report: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYTEST"))}
    env.update(
        # The harness first, so that the report plugin cannot be shadowed; then the code under test.
        PYTHONPATH=os.pathsep.join([str(harness), str(workspace.resolve())]),
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONHASHSEED="0",
        PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",  # host plugins (hypothesis, anyio, ...) must not change results
        TRIALOG_REPORT=str(report),
    )
    return env


def _run(command: list[str], cwd: Path, env: dict[str, str], timeout_s: float) -> tuple[int | None, str]:
    # A session of its own, so that a timeout kills whatever the tests started too.
    process = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        out, _ = process.communicate(timeout=timeout_s)
        code: int | None = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, _ = process.communicate()
        code = None
    return code, out.decode("utf-8", "replace")[-OUTPUT_LIMIT:]


def build(task: Task, workspace: Path, *, timeout_s: float | None = None) -> bool:
    """Run the task's build_command in `workspace` (True when there is none)."""
    if task.spec.build_command is None:
        return True
    code, _ = _run(
        ["bash", "-c", task.spec.build_command], workspace, dict(os.environ), timeout_s or task.spec.timeout_s
    )
    return code == 0


def grade_on_host(
    task: Task, workspace: Path, *, timeout_s: float | None = None
) -> tuple[Grade, HostRun | None]:
    """The full rule on the host: tampering, then the build, then the tests."""
    tampered = compare_trees(task.spec.protected, task.repo_dir, workspace)
    if tampered:
        return grade(expected=task.test_ids, reports=(), tampered_paths=tampered), None
    if not build(task, workspace, timeout_s=timeout_s):
        return grade(expected=task.test_ids, reports=(), build_ok=False), None
    run = run_tests(task, workspace, timeout_s=timeout_s)
    return grade(expected=task.test_ids, reports=run.reports), run
