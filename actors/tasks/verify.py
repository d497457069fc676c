"""`trialog verify`: grade a final workspace with the task's frozen tests, in a fresh sandbox.

The order is the reward rule's: tampering (protected paths compared with repo/, on the host), then the
build (`build_command` in the sandbox), then the frozen tests. The tests run under the harness of
`harness/trialog_launch.py`, which the sandbox receives as root-owned, read-only inputs outside the
workspace; the workspace arrives as a copy that never followed a link out of it. Results come back on the
harness's own stdout, each line tagged with a nonce the code under test never sees on its command line,
environment or files (see the launcher's doc for how the harness keeps the lines unforgeable, and
docs/grading.md for the attacks tried).

The expected tests are the instances a trusted collection of the task's original repo/ finds (run once per
task version in a fresh sandbox, the repo given as read-only inputs, cached in this process); every one
without a passing report counts as failed. A run that timed out or lacks the harness's completion marker
is incomplete: what it did not report passing failed, and `detail` says so. Tamper signals the harness
wrote make the grade `tampered`.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actors.tasks.change import ChangeSize, change_text, changed_paths, diff_trees, read_trees
from actors.tasks.harness import LAUNCHER, REPO_INPUT, files_under, harness_files
from actors.tasks.report import HarnessOutput, parse_harness_output
from actors.tasks.reward import Grade, grade
from actors.tasks.spec import Task
from actors.tasks.static_signals import StaticFindings, static_findings
from actors.tasks.tamper import Entry, compare_trees
from actors.tasks.testids import expand_instances, may_have_instances
from actors.tasks.workspace import copy_workspace
from sandbox_agent.backend import Sandbox, SandboxBackend
from sandbox_agent.limits import MIB, ExecLimits, Quotas, SandboxSpec, parse_size
from sandbox_agent.scratch import owned_temp_dir
from schemas.fsnames import to_wire

HARNESS_OUTPUT_BYTES = 8 * MIB  # report lines for thousands of tests; a flood only hides its own passes
BUILD_OUTPUT_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class Resources:
    """What the final test run cost and left behind, and the size of the change: a grade's resource
    signals (`actors.tasks.reward_config` turns them into components). None: not measured (a backend
    without the sandbox's exec server, a grade that never reached the tests)."""

    test_wall_s: float | None = None  # the harness run, as the sandbox timed it
    memory_peak_bytes: int | None = None  # the grading sandbox's memory high-water mark
    left_running: int | None = None  # processes the tests left alive when they ended (then killed)
    change: ChangeSize | None = None  # the workspace against the task's repo/
    lint_new: int | None = None  # ruff findings the change added (`actors.tasks.static_signals`)
    types_new: int | None = None  # mypy errors the change added

    def to_json(self) -> dict[str, Any]:
        change = self.change
        return {
            "test_wall_s": self.test_wall_s,
            "memory_peak_bytes": self.memory_peak_bytes,
            "left_running": self.left_running,
            "lint_new": self.lint_new,
            "types_new": self.types_new,
            "change": None if change is None else {
                "files": change.files,
                "lines_added": change.lines_added,
                "lines_removed": change.lines_removed,
            },
        }  # fmt: skip


@dataclass(frozen=True)
class Verification:
    grade: Grade
    duration_s: float
    timed_out: bool = False  # the build or the tests ran past the task's timeout and were killed
    harness_exit: int | None = None  # None when the harness never ran or was killed at the timeout
    log: str = ""  # the tail of what the build or harness printed, for people
    expected: tuple[str, ...] = ()  # the test ids graded (parametrized instances from the trusted collection)
    reported: tuple[str, ...] = ()  # the ids the harness reported on, in order
    complete: bool = False  # the harness wrote its completion marker
    resources: Resources = Resources()
    diff: str = ""  # the change as a bounded unified diff, when asked for (a model judge reads it)

    def to_json(self) -> dict[str, Any]:
        result = {
            **self.grade.as_dict(),
            "duration_s": round(self.duration_s, 3),
            "timed_out": self.timed_out,
            "resources": self.resources.to_json(),
        }
        return {**result, "detail": self.grade.detail} if self.grade.detail else result


def verify(
    task: Task,
    workspace: Path,
    backend: SandboxBackend,
    spec: SandboxSpec,
    *,
    nonce: Callable[[], str] = lambda: secrets.token_hex(16),
    static: bool = False,
    diff: bool = False,
) -> Verification:
    """The grade of `workspace`; with `static`, the lint and type findings the change added too (two runs
    of each checker in the grading sandbox: seconds more per grade); with `diff`, the change as a bounded
    unified diff (`actors.tasks.change.change_text`)."""
    started = time.monotonic()
    tampered = compare_trees(task.spec.protected, task.repo_dir, workspace)
    if tampered:
        return Verification(
            grade(expected=task.test_ids, reports=(), tampered_paths=tampered), _since(started)
        )
    before, after = read_trees(task.repo_dir, workspace)
    change = diff_trees(before, after)
    checks = _static_input(before, after) if static else None
    with owned_temp_dir(prefix="trialog-verify-") as scratch:
        staged = Path(scratch) / "workspace"
        copy_workspace(workspace, staged)
        sandbox = backend.create(spec)
        try:
            verification = _grade_in(sandbox, backend, task, staged, nonce, started, checks)
        finally:
            backend.destroy(sandbox)
    resources = dataclasses.replace(verification.resources, change=change)
    text = change_text(before, after) if diff else ""
    return dataclasses.replace(verification, resources=resources, diff=text)


# What the static checks need: the changed paths, and (repo/, workspace) bytes of each changed file.
StaticInput = tuple[list[str], tuple[dict[str, bytes], dict[str, bytes]]]


def _static_input(before: dict[str, Entry], after: dict[str, Entry]) -> StaticInput:
    touched = changed_paths(before, after)
    wanted = set(touched)
    contents = (
        {path: entry.data for path, entry in before.items() if path in wanted},
        {path: entry.data for path, entry in after.items() if path in wanted},
    )
    return touched, contents


_collected: dict[tuple[str, str], tuple[str, ...]] = {}
_collected_lock = threading.Lock()


def expected_ids(
    task: Task, sandbox: Sandbox, backend: SandboxBackend, inputs: str, nonce: Callable[[], str]
) -> tuple[str, ...]:
    """The task's test instances, from a trusted collection of its original repo/ (once per version)."""
    key = (task.id, task.version)
    with _collected_lock:
        cached = _collected.get(key)
    if cached is not None:
        return cached
    if not may_have_instances(task.tests_dir):  # nothing can parametrize: the static ids are the instances
        with _collected_lock:
            _collected[key] = task.test_ids
        return task.test_ids
    tag = nonce()
    run = backend.exec(
        sandbox,
        ["python3", "-I", f"{inputs}/{LAUNCHER}", "--collect", f"{inputs}/{REPO_INPUT}"],
        limits=ExecLimits(timeout_s=task.spec.timeout_s, output_bytes=HARNESS_OUTPUT_BYTES),
        stdin=f"{tag}\n".encode(),
    )
    found = parse_harness_output(run.stdout, tag)
    # A collection that failed (repo/ does not import as shipped, or hangs) keeps the static ids, and is
    # not retried: the same repo fails the same way, and a hang would cost every grade its timeout.
    ids = expand_instances(task.test_ids, found.items if found.complete else ())
    with _collected_lock:
        _collected[key] = ids
    return ids


def _grade_in(
    sandbox: Sandbox,
    backend: SandboxBackend,
    task: Task,
    staged: Path,
    nonce: Callable[[], str],
    started: float,
    checks: StaticInput | None = None,
) -> Verification:
    inputs = backend.write_inputs(sandbox, dict(_inputs(task)))
    expected = expected_ids(task, sandbox, backend, inputs, nonce)
    backend.write_files(sandbox, dict(files_under(staged)))
    statics = StaticFindings(None, None)
    if checks is not None:  # before the build and the tests: see static_signals
        touched, contents = checks
        statics = static_findings(backend, sandbox, f"{inputs}/{REPO_INPUT}", touched, contents)
    if task.spec.build_command is not None:
        build = backend.exec(
            sandbox,
            ["bash", "-c", task.spec.build_command],
            limits=ExecLimits(timeout_s=task.spec.timeout_s, output_bytes=BUILD_OUTPUT_BYTES),
        )
        if build.exit_code != 0 or build.timed_out:
            graded = grade(expected=expected, reports=(), build_ok=False)
            log = build.stderr[-2000:]
            statics_only = Resources(lint_new=statics.lint_new, types_new=statics.types_new)
            return Verification(
                graded, _since(started), build.timed_out, build.exit_code, log, expected=expected,
                resources=statics_only,
            )  # fmt: skip
    tag = nonce()
    run = backend.exec(
        sandbox,
        ["python3", "-I", f"{inputs}/{LAUNCHER}", backend.workspace_path],
        limits=ExecLimits(timeout_s=task.spec.timeout_s, output_bytes=HARNESS_OUTPUT_BYTES),
        stdin=f"{tag}\n".encode(),
    )
    output = parse_harness_output(run.stdout, tag)
    graded = grade_run(expected, output, timed_out=run.timed_out)
    exit_code = None if run.timed_out else run.exit_code
    return Verification(
        graded,
        _since(started),
        run.timed_out,
        exit_code,
        run.stderr[-2000:],
        expected=expected,
        reported=output.reported,
        complete=output.complete and not run.timed_out,
        resources=Resources(
            test_wall_s=run.duration_s,
            memory_peak_bytes=run.memory_peak_bytes,
            left_running=run.left_running,
            lint_new=statics.lint_new,
            types_new=statics.types_new,
        ),
    )


def grade_run(expected: tuple[str, ...], output: HarnessOutput, *, timed_out: bool) -> Grade:
    """The grade of one harness run (pure): incomplete runs fail what they did not report passing."""
    complete = output.complete and not timed_out
    graded = grade(
        expected=expected, reports=output.reports, tamper_signals=output.signals, complete=complete
    )
    if complete or graded.detail:
        return graded
    why = "timed out" if timed_out else "ended without its completion marker"
    detail = f"the test run {why}: every test it did not report passing counts as failed"
    return dataclasses.replace(graded, detail=detail)


def _inputs(task: Task) -> Iterator[tuple[str, bytes]]:
    yield from harness_files(task.tests_dir)
    for path, data in files_under(task.repo_dir):
        yield f"{REPO_INPUT}/{path}", data


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
    lines += [f"  tamper signal: {signal}" for signal in g.tamper_signals]
    if g.detail:
        lines.append(f"  detail: {g.detail}")
    lines.append(f"  in {result.duration_s:.2f} s")
    return "\n".join(lines)


def dumps(result: Verification) -> str:
    return json.dumps(result.to_json(), indent=2)
