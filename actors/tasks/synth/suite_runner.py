"""Runs a project's tests inside a synthesis sandbox:
`python3 -I suite_runner.py SUITE WORKSPACE [--trace] [--select-stdin | --batch]`.

Standard library and pytest only (it runs on the sandbox image's Python). It runs the tests the way the
grading harness will (`actors/tasks/harness/trialog_launch.py`): the flattened test files under SUITE, the
workspace LAST on sys.path, pytest with an empty config of ours, SUITE as rootdir, `--noconftest`, no
plugin autoload, no cacheprovider, no bytecode written. A test that needs the project's conftest, its
pytest configuration or a plugin fails here as it would when graded, so it is never used.

Which tests to run is read from stdin with `--select-stdin` (node ids relative to SUITE, one per line),
else every test runs. With `--trace`, each test's calls into workspace code are recorded (sys.setprofile:
call events only, so much cheaper than line tracing) as (file, first line) of each code object, which
tells the host which tests can reach a mutated function.

The results go to stdout after pytest returns, as one line: `TRIALOG-SUITE <json>` (per test: outcome and
the failure's text). With `--batch`, stdin holds mutants (`{"jobs": [{key, path, source, tests,
max_failing, timeout_s}]}`): each is written in place, run in a forked child (pytest imported once, which
is most of a small run's cost), rerun when it failed 1 to max_failing tests, and put back; one line
`TRIALOG-SUITE-JOB <json>` per mutant. Nothing here is a defence: synthesis runs the project's own
trusted code and our mutations of it, never a policy's.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from typing import Any

MARK = "TRIALOG-SUITE "
JOB_MARK = "TRIALOG-SUITE-JOB "
ERROR_CHARS = 4000  # of each failure's text: enough for the assertion and the end of the traceback


def main(argv: list[str]) -> int:
    suite, workspace = argv[0], argv[1]
    trace = "--trace" in argv[2:]
    sys.dont_write_bytecode = True  # a mutant and its original can share an mtime: never run stale bytecode
    sys.path.append(workspace)
    out = os.fdopen(os.dup(1), "w")  # the tests may print or close stdout; our line goes to a copy
    os.environ.pop("PYTEST_ADDOPTS", None)
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    os.chdir(workspace)  # as the harness does: relative paths in the tests resolve in the workspace
    if "--batch" in argv[2:]:
        for job in json.loads(sys.stdin.read())["jobs"]:
            out.write("\n" + JOB_MARK + json.dumps(run_job(suite, workspace, job)) + "\n")
            out.flush()
        return 0
    if "--select-stdin" in argv[2:]:
        targets = [os.path.join(suite, line.strip()) for line in sys.stdin if line.strip()]
    else:
        targets = [os.path.join(suite, "tests")]
    out.write("\n" + MARK + json.dumps(run_pytest(suite, workspace, targets, trace)) + "\n")
    out.flush()
    return 0


def run_pytest(suite: str, workspace: str, targets: list[str], trace: bool) -> dict[str, Any]:
    import pytest

    recorder = Recorder(suite, workspace, trace)
    started = time.monotonic()
    args = [
        "-q", "-p", "no:cacheprovider", "--noconftest", "--continue-on-collection-errors",
        "--rootdir", suite, "-c", os.path.join(suite, "pytest.ini"), "--confcutdir", suite, *targets,
    ]  # fmt: skip
    code = pytest.main(args, plugins=[recorder])
    return {
        "exit": int(code),
        "duration_s": round(time.monotonic() - started, 3),
        "tests": recorder.tests,
        "calls": {test: sorted(calls) for test, calls in recorder.calls.items()},
    }


def run_job(suite: str, workspace: str, job: dict[str, Any]) -> dict[str, Any]:
    """One mutant: its file written over the original, the tests run (again, when the first run fails
    between 1 and max_failing of them: the rerun the host needs), the original put back. pytest is
    imported once by this process; each run is a fork, so the workspace's modules are imported afresh."""
    import pytest  # noqa: F401  (imported here, before the forks, which then share it)

    path = os.path.join(workspace, job["path"])
    with open(path, "rb") as original_file:
        original = original_file.read()
    targets = [os.path.join(suite, test) for test in job["tests"]]
    runs: list[dict[str, Any] | None] = []
    try:
        with open(path, "w") as mutant:
            mutant.write(job["source"])
        first = forked(lambda: run_pytest(suite, workspace, targets, False), job["timeout_s"])
        runs.append(first)
        if first is not None:
            failing = [t for t in job["tests"] if first["tests"].get(t, {}).get("outcome") != "passed"]
            if 1 <= len(failing) <= job["max_failing"]:
                runs.append(forked(lambda: run_pytest(suite, workspace, targets, False), job["timeout_s"]))
    finally:
        with open(path, "wb") as restored:
            restored.write(original)
    return {"key": job["key"], "runs": runs}


def forked(work: Any, timeout_s: float) -> dict[str, Any] | None:
    """`work()` in a child process of its own group, its result back through a pipe; None when it did not
    finish in `timeout_s` (the group is killed) or crashed."""
    import select
    import signal

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        os.setpgid(0, 0)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 1)  # pytest's own output is not wanted: the result goes through the pipe
        os.dup2(null, 2)
        try:
            data = json.dumps(work()).encode()
            with os.fdopen(write, "wb") as pipe:
                pipe.write(data)
        finally:
            os._exit(0)
    os.close(write)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    finished = False
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([read], [], [], remaining)[0]:
            break
        chunk = os.read(read, 1 << 16)
        if not chunk:
            finished = True
            break
        chunks.append(chunk)
    os.close(read)
    if not finished:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    if not finished or not chunks:
        return None
    try:
        document: dict[str, Any] = json.loads(b"".join(chunks))
    except ValueError:
        return None
    return document


class Recorder:
    """A pytest plugin: each test's outcome and failure text, and (tracing) the workspace code it called."""

    def __init__(self, suite: str, workspace: str, trace: bool) -> None:
        self.suite = suite.rstrip("/") + "/"
        self.workspace = workspace.rstrip("/") + "/"
        self.trace = trace
        self.tests: dict[str, dict[str, str]] = {}
        self.calls: dict[str, set[str]] = {}
        self._current: set[str] | None = None

    def _profile(self, frame: Any, event: str, _arg: Any) -> None:
        if event == "call" and self._current is not None:
            code = frame.f_code
            if code.co_filename.startswith(self.workspace):
                self._current.add(f"{code.co_filename[len(self.workspace) :]}:{code.co_firstlineno}")

    def pytest_runtest_setup(self, item: Any) -> None:
        if self.trace:
            self._current = self.calls.setdefault(item.nodeid, set())
            sys.setprofile(self._profile)
            threading.setprofile(self._profile)

    def pytest_runtest_teardown(self, item: Any) -> None:
        if self.trace:
            sys.setprofile(None)
            threading.setprofile(None)
            self._current = None

    def pytest_runtest_logreport(self, report: Any) -> None:
        entry = self.tests.setdefault(report.nodeid, {"outcome": "passed", "error": ""})
        if report.when == "call" or report.outcome != "passed":
            outcome = report.outcome if report.when == "call" else "error"
            if report.outcome == "skipped":
                outcome = "skipped"
            if entry["outcome"] in ("passed", "skipped"):
                entry["outcome"] = outcome
            if report.failed:
                entry["error"] = str(report.longrepr)[-ERROR_CHARS:]

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:  # a file that does not import: its tests are not run, and say why
            self.tests[report.nodeid or "<collection>"] = {
                "outcome": "collection-error",
                "error": str(report.longrepr)[-ERROR_CHARS:],
            }


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
