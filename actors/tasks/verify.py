"""`trialog verify`: grade a final workspace with the task's frozen tests, in a fresh sandbox.

The order is the reward rule's: tampering (protected paths compared with repo/, on the host), then the
build (`build_command` in the sandbox), then the frozen tests. The tests run under the harness of
`harness/trialog_launch.py`, which the sandbox receives as root-owned, read-only inputs outside the
workspace; the workspace arrives as a copy that never followed a link out of it. Results come back on the
harness's own stdout, each line tagged with a nonce the code under test never sees on its command line,
environment or files; every frozen test id without a passing report counts as failed.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actors.tasks.harness import HARNESS_DIR
from actors.tasks.report import parse_report
from actors.tasks.reward import Grade, grade
from actors.tasks.spec import Task
from actors.tasks.tamper import compare_trees
from actors.tasks.workspace import copy_workspace
from sandbox_agent.backend import Sandbox, SandboxBackend
from sandbox_agent.limits import MIB, ExecLimits, Quotas, SandboxSpec, parse_size
from schemas.fsnames import to_wire

LAUNCHER = "trialog_launch.py"
HARNESS_OUTPUT_BYTES = 8 * MIB  # report lines for thousands of tests; a flood only hides its own passes
BUILD_OUTPUT_BYTES = 64 * 1024


@dataclass(frozen=True)
class Verification:
    grade: Grade
    duration_s: float
    timed_out: bool = False  # the build or the tests ran past the task's timeout and were killed
    harness_exit: int | None = None  # None when the harness never ran or was killed at the timeout
    log: str = ""  # the tail of what the build or harness printed, for people

    def to_json(self) -> dict[str, Any]:
        result = {
            **self.grade.as_dict(),
            "duration_s": round(self.duration_s, 3),
            "timed_out": self.timed_out,
        }
        return {**result, "detail": self.grade.detail} if self.grade.detail else result


def verify(
    task: Task,
    workspace: Path,
    backend: SandboxBackend,
    spec: SandboxSpec,
    *,
    nonce: Callable[[], str] = lambda: secrets.token_hex(16),
) -> Verification:
    started = time.monotonic()
    tampered = compare_trees(task.spec.protected, task.repo_dir, workspace)
    if tampered:
        return Verification(
            grade(expected=task.test_ids, reports=(), tampered_paths=tampered), _since(started)
        )
    with tempfile.TemporaryDirectory(prefix="trialog-verify-") as scratch:
        staged = Path(scratch) / "workspace"
        copy_workspace(workspace, staged)
        sandbox = backend.create(spec)
        try:
            return _grade_in(sandbox, backend, task, staged, nonce(), started)
        finally:
            backend.destroy(sandbox)


def _grade_in(
    sandbox: Sandbox, backend: SandboxBackend, task: Task, staged: Path, nonce: str, started: float
) -> Verification:
    backend.write_files(sandbox, dict(_files_under(staged)))
    if task.spec.build_command is not None:
        build = backend.exec(
            sandbox,
            ["bash", "-c", task.spec.build_command],
            limits=ExecLimits(timeout_s=task.spec.timeout_s, output_bytes=BUILD_OUTPUT_BYTES),
        )
        if build.exit_code != 0 or build.timed_out:
            graded = grade(expected=task.test_ids, reports=(), build_ok=False)
            log = build.stderr[-2000:]
            return Verification(graded, _since(started), build.timed_out, build.exit_code, log)
    inputs = backend.write_inputs(sandbox, dict(_harness_files(task)))
    run = backend.exec(
        sandbox,
        ["python3", "-I", f"{inputs}/{LAUNCHER}", backend.workspace_path],
        limits=ExecLimits(timeout_s=task.spec.timeout_s, output_bytes=HARNESS_OUTPUT_BYTES),
        stdin=f"{nonce}\n".encode(),
    )
    reports = parse_report(_tagged_lines(run.stdout, nonce))
    exit_code = None if run.timed_out else run.exit_code
    graded = grade(expected=task.test_ids, reports=reports)
    return Verification(graded, _since(started), run.timed_out, exit_code, run.stderr[-2000:])


def _tagged_lines(stdout: str, nonce: str) -> str:
    """Only the harness's own report lines: those carrying this run's nonce.

    pytest's progress output shares the stream and has no newline of its own, so a tag may be preceded
    by it on the same line; what follows the tag is the report.
    """
    prefix = f"TRIALOG-REPORT {nonce} "
    return "\n".join(
        line[line.index(prefix) + len(prefix) :] for line in stdout.splitlines() if prefix in line
    )


def _harness_files(task: Task) -> Iterator[tuple[str, bytes]]:
    yield LAUNCHER, (HARNESS_DIR / LAUNCHER).read_bytes()
    # An empty configuration of our own: nothing in the workspace decides how tests are collected.
    yield "pytest.ini", b"[pytest]\n"
    for path, data in _files_under(task.tests_dir):
        yield f"tests/{path}", data


def _files_under(root: Path) -> Iterator[tuple[str, bytes]]:
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink() and "__pycache__" not in path.parts:
            yield path.relative_to(root).as_posix(), path.read_bytes()


def _since(started: float) -> float:
    return time.monotonic() - started


def task_quotas(task: Task, base: Quotas | None = None) -> Quotas:
    """The sandbox quotas for grading `task`: its `[limits]` over the defaults."""
    base = base or Quotas()
    limits = task.spec.limits
    disk = parse_size(limits.disk) if limits.disk else None
    return dataclasses.replace(
        base,
        memory_bytes=parse_size(limits.memory) if limits.memory else base.memory_bytes,
        cpus=limits.cpus or base.cpus,
        pids=limits.pids or base.pids,
        workspace_bytes=disk or base.workspace_bytes,
        tmp_bytes=disk or base.tmp_bytes,
    )


def print_human(result: Verification) -> str:
    g = result.grade
    lines = [f"verdict {g.verdict.value}  reward {g.reward:+.3f}  passed {g.passed}/{g.total}"]
    lines += [f"  failed: {test}" for test in g.failed_tests]
    lines += [f"  tampered: {to_wire(path)}" for path in g.tampered_paths]  # printable, any bytes
    if g.detail:
        lines.append(f"  detail: {g.detail}")
    lines.append(f"  in {result.duration_s:.2f} s")
    return "\n".join(lines)


def dumps(result: Verification) -> str:
    return json.dumps(result.to_json(), indent=2)
