"""Running a task's frozen tests with the host's Python: for authoring and CI on *trusted* code only.

This is how the example tasks and imported task sets are proven valid without sandboxes (repo/ fails,
repo/ + solution.patch passes). It runs the grading harness itself (`harness/trialog_launch.py`, with the
host's Python: the same launcher, guard, rewritten asserts and report lines as in a sandbox), but it does
not isolate anything else: never point it at an agent's workspace. Agents are graded by the verifier, in a
sandbox. The expected ids here are the static ones (`task.test_ids`; see `actors.tasks.reward`).
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from actors.tasks.harness import LAUNCHER, harness_files
from actors.tasks.report import HarnessOutput, parse_harness_output
from actors.tasks.reward import Grade, Outcome, grade
from actors.tasks.spec import Task
from actors.tasks.tamper import compare_trees
from sandbox_agent.scratch import owned_temp_dir

OUTPUT_LIMIT = 20_000


@dataclass(frozen=True)
class HostRun:
    reports: tuple[tuple[str, Outcome], ...]
    exit_code: int | None  # None: killed at the timeout
    output: str  # the tail of pytest's stdout and stderr
    duration_s: float
    harness: HarnessOutput = field(default_factory=HarnessOutput)


def run_tests(
    task: Task, workspace: Path, *, timeout_s: float | None = None, python: str = sys.executable
) -> HostRun:
    """Run the frozen tests of `task` against the folder `workspace` in a subprocess."""
    with owned_temp_dir(prefix="trialog-hostrun-") as scratch:
        harness = Path(scratch) / "harness"
        for path, data in harness_files(task.tests_dir):
            (harness / path).parent.mkdir(parents=True, exist_ok=True)
            (harness / path).write_bytes(data)
        nonce = secrets.token_hex(16)
        command = [python, "-I", str(harness / LAUNCHER), str(workspace.resolve())]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYTEST"))}
        started = time.monotonic()
        exit_code, out = _run(
            command, harness, env, timeout_s or task.spec.timeout_s, stdin=f"{nonce}\n".encode()
        )
        found = parse_harness_output(out, nonce)
        duration = time.monotonic() - started
        return HostRun(found.reports, exit_code, out[-OUTPUT_LIMIT:], duration, found)


def _run(
    command: list[str], cwd: Path, env: dict[str, str], timeout_s: float, stdin: bytes = b""
) -> tuple[int | None, str]:
    # A session of its own, so that a timeout kills whatever the tests started too.
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out, _ = process.communicate(stdin, timeout=timeout_s)
        code: int | None = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, _ = process.communicate()
        code = None
    return code, out.decode("utf-8", "replace")


def build(task: Task, workspace: Path, *, timeout_s: float | None = None) -> bool:
    """Run the task's build_command in `workspace` (True when there is none)."""
    if task.spec.build_command is None:
        return True
    command = ["bash", "-c", task.spec.build_command]
    code, _ = _run(command, workspace, dict(os.environ), timeout_s or task.spec.timeout_s)
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
    found = run.harness
    complete = found.complete and run.exit_code is not None
    graded = grade(
        expected=task.test_ids, reports=run.reports, tamper_signals=found.signals, complete=complete
    )
    return graded, run
