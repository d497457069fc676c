"""Running a project's tests in a sandbox, as many times as synthesis needs, and reading the results.

One sandbox per job holds the project in its workspace and, as read-only inputs, the flat test files and
`suite_runner.py`. A run may first replace some files (a mutant) and names the tests to run; the files are
put back afterwards, so every run starts from the original tree. Test ids are the hidden tests' ids
(`tests/<flat name>::<test>`), the same ids a synthesized task's metadata and the grader use.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actors.tasks.synth.project import Project
from sandbox_agent.backend import Sandbox, SandboxBackend
from sandbox_agent.errors import SandboxError
from sandbox_agent.limits import MIB, ExecLimits, SandboxSpec
from sandbox_agent.paths import WORKSPACE

RUNNER = Path(__file__).with_name("suite_runner.py")
MARK = "TRIALOG-SUITE "
JOB_MARK = "TRIALOG-SUITE-JOB "
PASSED = "passed"
TRIVIAL_BYTES = 64  # modules this small tell nothing of a fix: not looked for in the image


@dataclass(frozen=True)
class TestResult:
    __test__ = False  # not a pytest test class

    outcome: str  # passed, failed, error, skipped, collection-error
    error: str = ""

    @property
    def passed(self) -> bool:
        return self.outcome == PASSED


@dataclass(frozen=True)
class SuiteRun:
    results: dict[str, TestResult]
    duration_s: float
    complete: bool  # the runner reported (it was not killed at the timeout nor crashed)
    calls: dict[str, frozenset[str]] = field(default_factory=dict)  # test -> "file:firstline" it called
    log: str = ""

    def passing(self) -> set[str]:
        return {test for test, result in self.results.items() if result.passed}

    def failing(self, among: Sequence[str]) -> set[str]:
        """Of `among`, the tests that did not pass (missing from the results counts as not passing)."""
        return {test for test in among if not (test in self.results and self.results[test].passed)}


class SuiteSandbox:
    """A sandbox with the project in it, for running its suite again and again."""

    def __init__(
        self, backend: SandboxBackend, spec: SandboxSpec, project: Project, timeout_s: float
    ) -> None:
        self.backend, self.spec, self.project, self.timeout_s = backend, spec, project, timeout_s
        self._sandbox: Sandbox | None = None
        self._inputs = ""

    def __enter__(self) -> SuiteSandbox:
        self._sandbox = self.backend.create(self.spec)
        try:
            self.backend.write_files(self._sandbox, self.project.files)
            flat_files = {**self.project.tests, **self.project.support}
            inputs = {f"tests/{flat}": self.project.files[path] for path, flat in flat_files.items()}
            inputs["pytest.ini"] = b"[pytest]\n"
            inputs["suite_runner.py"] = RUNNER.read_bytes()
            self._inputs = self.backend.write_inputs(self._sandbox, inputs)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        if self._sandbox is not None:
            self.backend.destroy(self._sandbox)
            self._sandbox = None

    def run(
        self,
        changed: Mapping[str, bytes] | None = None,
        tests: Sequence[str] | None = None,
        *,
        trace: bool = False,
        timeout_s: float | None = None,
    ) -> SuiteRun:
        """Run `tests` (None: all) with `changed` files in place of the originals, then restore them.
        Past `timeout_s` (default: the sandbox's) the run is killed and incomplete."""
        sandbox = self._require()
        changed = dict(changed or {})
        if changed:
            self.backend.write_files(sandbox, changed)
        try:
            return self._run(sandbox, tests, trace, timeout_s or self.timeout_s)
        finally:
            if changed:
                self.backend.write_files(sandbox, {path: self.project.files[path] for path in changed})

    def _run(self, sandbox: Sandbox, tests: Sequence[str] | None, trace: bool, timeout_s: float) -> SuiteRun:
        argv = ["python3", "-I", f"{self._inputs}/suite_runner.py", self._inputs, WORKSPACE]
        argv += ["--trace"] if trace else []
        stdin = None
        if tests is not None:  # node ids on stdin: a selection of thousands would not fit argv
            argv.append("--select-stdin")
            stdin = "\n".join(tests).encode()
        limits = ExecLimits(timeout_s=timeout_s, output_bytes=64 * MIB)
        try:
            result = self.backend.exec(sandbox, argv, limits=limits, stdin=stdin)
        except SandboxError as exc:
            return SuiteRun({}, 0.0, False, log=str(exc))
        return parse_run(result.stdout, result.duration_s, result.stderr[-4000:])

    def run_batch(self, jobs: Sequence[MutantJob]) -> dict[str, tuple[SuiteRun | None, ...]]:
        """Each mutant's runs (`suite_runner --batch`): the first, and a rerun when the first failed 1 to
        max_failing tests; a run that timed out is None. A mutant missing from the answer (the batch was
        killed) has no runs."""
        sandbox = self._require()
        argv = ["python3", "-I", f"{self._inputs}/suite_runner.py", self._inputs, WORKSPACE, "--batch"]
        payload = {"jobs": [job.as_dict() for job in jobs]}
        limits = ExecLimits(timeout_s=sum(2 * job.timeout_s for job in jobs) + 30, output_bytes=64 * MIB)
        try:
            result = self.backend.exec(sandbox, argv, limits=limits, stdin=json.dumps(payload).encode())
        except SandboxError:
            return {}
        answers: dict[str, tuple[SuiteRun | None, ...]] = {}
        for line in result.stdout.splitlines():
            at = line.find(JOB_MARK)
            if at < 0:
                continue
            try:
                answer = json.loads(line[at + len(JOB_MARK) :])
            except ValueError:
                continue
            answers[str(answer["key"])] = tuple(
                None if run is None else run_of(run, 0.0) for run in answer.get("runs", [])
            )
        if len(answers) < len(jobs):  # killed part-way: the workspace may still hold a mutant
            self.backend.write_files(sandbox, {job.path: self.project.files[job.path] for job in jobs})
        return answers

    def shadowed(self) -> dict[str, str]:
        """The project's top-level packages that the sandbox's Python imports from elsewhere than the
        workspace (the grader puts the workspace last on sys.path): a mutant there would never be tested."""
        script = (
            "import importlib.util, json, sys; sys.path.append(sys.argv[1]); found = {}\n"
            "for name in sys.argv[2:]:\n"
            "    try: spec = importlib.util.find_spec(name)\n"
            "    except Exception: continue\n"
            "    origin = spec.origin if spec is not None and spec.origin else ''\n"
            "    if origin and not origin.startswith(sys.argv[1] + '/'): found[name] = origin\n"
            "print(json.dumps(found))"
        )
        argv = ["python3", "-I", "-c", script, WORKSPACE, *self.project.top_level]
        result = self.backend.exec(self._require(), argv, limits=ExecLimits(timeout_s=60))
        found: dict[str, str] = json.loads(result.stdout.strip().splitlines()[-1]) if result.stdout else {}
        return found

    def image_copies(self) -> list[str]:
        """Files of the sandbox's image (outside the workspace and inputs) with the bytes of one of the
        project's modules: an original the agent could read instead of fixing the bug."""
        sizes: dict[int, set[str]] = {}
        for path in self.project.modules:
            data = self.project.files[path]
            if len(data.strip()) < TRIVIAL_BYTES:  # an empty __init__.py is every empty file's twin
                continue
            sizes.setdefault(len(data), set()).add(hashlib.sha256(data).hexdigest())
        script = (
            "import hashlib, json, os, sys; wanted = json.loads(sys.stdin.read()); found = []\n"
            "for top in ('/usr', '/opt', '/home', '/root', '/srv', '/etc', '/var', '/lib'):\n"
            "    for folder, dirs, files in os.walk(top):\n"
            "        for name in files:\n"
            "            path = os.path.join(folder, name)\n"
            "            try:\n"
            "                size = os.lstat(path).st_size\n"
            "                if str(size) in wanted and not os.path.islink(path):\n"
            "                    with open(path, 'rb') as f: digest = hashlib.sha256(f.read()).hexdigest()\n"
            "                    if digest in wanted[str(size)]: found.append(path)\n"
            "            except OSError: pass\n"
            "print(json.dumps(found))"
        )
        stdin = json.dumps({str(size): sorted(hashes) for size, hashes in sizes.items()}).encode()
        result = self.backend.exec(
            self._require(), ["python3", "-I", "-c", script], limits=ExecLimits(timeout_s=300), stdin=stdin
        )
        lines = result.stdout.strip().splitlines()
        copies: list[str] = json.loads(lines[-1]) if lines else []
        return copies

    def _require(self) -> Sandbox:
        if self._sandbox is None:
            raise RuntimeError("use SuiteSandbox as a context manager")
        return self._sandbox


@dataclass(frozen=True)
class MutantJob:
    key: str
    path: str
    source: str
    tests: tuple[str, ...]
    max_failing: int
    timeout_s: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "path": self.path,
            "source": self.source,
            "tests": list(self.tests),
            "max_failing": self.max_failing,
            "timeout_s": self.timeout_s,
        }


def run_of(document: Mapping[str, Any], duration_s: float, log: str = "") -> SuiteRun:
    results = {
        test: TestResult(str(entry.get("outcome", "")), str(entry.get("error", "")))
        for test, entry in document.get("tests", {}).items()
    }
    calls = {test: frozenset(found) for test, found in document.get("calls", {}).items()}
    return SuiteRun(results, float(document.get("duration_s", duration_s)), True, calls, log)


def parse_run(stdout: str, duration_s: float, log: str = "") -> SuiteRun:
    for line in reversed(stdout.splitlines()):
        at = line.find(MARK)
        if at < 0:
            continue
        try:
            document: dict[str, Any] = json.loads(line[at + len(MARK) :])
        except ValueError:
            continue
        return run_of(document, duration_s, log)
    return SuiteRun({}, duration_s, False, log=log or stdout[-4000:])
