"""Static signals of a grade: the lint findings and type errors an agent's change adds, measured in the
grading sandbox with the checkers the sandbox image carries (`ops/images/sandbox/static-tools.txt`).

Only the Python files the change touched are checked, each in the workspace and, where it existed, in the
task's original repo/ (the read-only inputs); a file's new findings are its count in the workspace less its
count in repo/, never below 0. They run before the build and the tests, so nothing the code under test does
at test time (rewriting its own files) can clean them up first.

The agent's files cannot configure the checkers: ruff runs `--isolated` (no configuration file is read)
with `--ignore-noqa`, mypy reads only the image's own mypy.ini and runs from a folder outside the workspace,
on its own module path (never the workspace's). A suppression comment the change adds (`# noqa`,
`# type: ignore`) is counted as a finding of its kind: silencing is not fixing. A checker that fails or
runs out of time measures nothing (None), never 0.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sandbox_agent.backend import Sandbox, SandboxBackend
from sandbox_agent.limits import MIB, ExecLimits

TOOLS = "/opt/trialog-tools"
RUFF = f"{TOOLS}/bin/ruff"
RUFF_RULES = "E,F,W"  # pycodestyle errors and warnings, pyflakes: what a good fix does not add
MYPY_CONFIG = f"{TOOLS}/mypy.ini"
MYPY_BOOT = (
    f"import sys; sys.path[:0] = ['{TOOLS}/lib']; from mypy.__main__ import console_entry; console_entry()"
)
CHECK_LIMITS = ExecLimits(timeout_s=60.0, output_bytes=4 * MIB)
NOQA = re.compile(rb"#\s*no" + rb"qa\b", re.IGNORECASE)  # split: ruff would read the literal as a directive
TYPE_IGNORE = re.compile(rb"#\s*type:\s*ignore\b")
MYPY_ERROR = re.compile(r"^(?P<path>[^:\n]+):\d+(?::\d+)?: error: ", re.MULTILINE)


# A checker run over files under a root in the sandbox: findings per file, or None when it did not run.
Checker = Callable[[SandboxBackend, Sandbox, str, Sequence[str]], "Counter[str] | None"]


@dataclass(frozen=True, slots=True)
class StaticFindings:
    lint_new: int | None  # ruff findings added (and added suppression comments, noqa); None: not measured
    types_new: int | None  # mypy errors added (and added type-ignore comments); None: not measured


def python_files(paths: Sequence[str]) -> list[str]:
    return sorted(path for path in paths if path.endswith(".py"))


def added_suppressions(before: bytes, after: bytes, pattern: re.Pattern[bytes]) -> int:
    """Lines carrying `pattern` in `after` beyond those in `before` (as multisets of lines)."""
    old = Counter(line for line in before.splitlines() if pattern.search(line))
    new = Counter(line for line in after.splitlines() if pattern.search(line))
    return sum((new - old).values())


def ruff_counts(output: str, root: str) -> Counter[str] | None:
    """Findings per file (relative to `root`) from ruff's JSON output; None when it is not ruff's JSON."""
    try:
        diagnostics = json.loads(output or "[]")
    except json.JSONDecodeError:
        return None
    if not isinstance(diagnostics, list):
        return None
    counts: Counter[str] = Counter()
    prefix = root.rstrip("/") + "/"
    for item in diagnostics:
        name = item.get("filename") if isinstance(item, dict) else None
        if isinstance(name, str) and name.startswith(prefix):
            counts[name[len(prefix) :]] += 1
    return counts


def mypy_counts(output: str, root: str) -> Counter[str]:
    """Errors per file (relative to `root`) from mypy's plain output."""
    counts: Counter[str] = Counter()
    prefix = root.rstrip("/") + "/"
    for match in MYPY_ERROR.finditer(output):
        path = match.group("path")
        counts[path[len(prefix) :] if path.startswith(prefix) else path] += 1
    return counts


def new_findings(after: Counter[str], before: Counter[str], files: Sequence[str]) -> int:
    return sum(max(0, after[path] - before[path]) for path in files)


def static_findings(
    backend: SandboxBackend,
    sandbox: Sandbox,
    repo_root: str,
    changed: Sequence[str],
    contents: tuple[dict[str, bytes], dict[str, bytes]],
) -> StaticFindings:
    """The new findings of the changed Python files. `repo_root`: where the sandbox has the task's repo/;
    `contents`: (repo/, workspace) bytes of the changed files, from the host's trees, for the
    suppression comments."""
    before, after = contents
    files = [path for path in python_files(changed) if path in after]  # a removed file adds nothing
    if not files:
        return StaticFindings(0, 0)
    old_files = [path for path in files if path in before]
    workspace = backend.workspace_path

    def added(check: Checker, suppression: re.Pattern[bytes]) -> int | None:
        """The findings `check` counts in the workspace beyond repo/, plus the suppressions added."""
        now = check(backend, sandbox, workspace, files)
        was = check(backend, sandbox, repo_root, old_files) if old_files else Counter()
        if now is None or was is None:
            return None
        silenced = sum(added_suppressions(before.get(p, b""), after[p], suppression) for p in files)
        return new_findings(now, was, files) + silenced

    return StaticFindings(added(_ruff, NOQA), added(_mypy, TYPE_IGNORE))


def _ruff(backend: SandboxBackend, sandbox: Sandbox, root: str, files: Sequence[str]) -> Counter[str] | None:
    argv = [
        RUFF, "check", "--isolated", "--ignore-noqa", "--no-cache", "--select", RUFF_RULES,
        "--output-format", "json", "--exit-zero", *(f"{root}/{path}" for path in files),
    ]  # fmt: skip
    run = backend.exec(sandbox, argv, limits=CHECK_LIMITS)
    if run.timed_out or run.exit_code != 0 or run.truncated:
        return None
    return ruff_counts(run.stdout, root)


def _mypy(backend: SandboxBackend, sandbox: Sandbox, root: str, files: Sequence[str]) -> Counter[str] | None:
    # From /tmp with absolute paths: mypy looks for a configuration file where it is started.
    argv = [
        "sh", "-c", 'cd /tmp && exec python3 -S -c "$0" "$@"', MYPY_BOOT,
        "--config-file", MYPY_CONFIG, "--no-error-summary", "--hide-error-context", "--no-pretty",
        "--show-absolute-path", *(f"{root}/{path}" for path in files),
    ]  # fmt: skip
    run = backend.exec(sandbox, argv, limits=CHECK_LIMITS)
    # mypy exits 1 when it found errors, 2 when it could not run (a crash, a bad argument).
    if run.timed_out or run.exit_code not in (0, 1) or run.truncated:
        return None
    return mypy_counts(run.stdout, root)
