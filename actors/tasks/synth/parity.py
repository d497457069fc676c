"""Which of a project's tests pass under the real grader, file by file, before any mutant is tried.

The suite runner mirrors the grader's collection, but not its defences: the grading harness refuses what
workspace code may not do while tests run (frame walks such as `sys._getframe`, replacing framework or
builtins attributes), and some libraries do exactly that on import (boltons.typeutils walks frames; six
rewrites module specs). A test that passes in the runner but not in the grader would make a task whose
solution fails. So each flat test file is also graded once, with the project unchanged, by
`actors.tasks.verify` itself (a task folder of its own: repo/ the project, tests/ that file and the
helpers beside it). A file whose run raised a tamper signal gives no usable test at all (any task holding
it would be graded tampered); otherwise its tests that passed there are the ones the grader accepts.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from actors.tasks.spec import (
    PATCH_FILE,
    REPO_DIR,
    TASK_FILE,
    TESTS_DIR,
    TaskError,
    TaskSpec,
    load_task,
    spec_to_toml,
)
from actors.tasks.synth.project import Project
from actors.tasks.verify import verify
from sandbox_agent.backend import SandboxBackend
from sandbox_agent.limits import SandboxSpec

# The baseline task's solution only adds a marker file: load_task wants a patch that applies.
MARKER_PATCH = "--- /dev/null\n+++ b/.trialog-baseline\n@@ -0,0 +1 @@\n+baseline\n"


@dataclass(frozen=True)
class Parity:
    accepted: frozenset[str]  # test ids (instances) the grader passed with the project unchanged
    refused_files: dict[str, str]  # flat test file -> the tamper signal its run raised


def grader_parity(
    project: Project,
    backend: SandboxBackend,
    spec: SandboxSpec,
    *,
    timeout_s: float,
    jobs: int = 1,
    progress: Callable[[str], None] = lambda _line: None,
) -> Parity:
    accepted: set[str] = set()
    refused: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="trialog-synth-parity-") as scratch:

        def one(flat: str) -> tuple[str, set[str], str]:
            folder = Path(scratch) / flat.removesuffix(".py")
            try:
                task = load_task(baseline_task(project, flat, folder, timeout_s))
            except TaskError:  # no test the grader would freeze (say, only subclasses of a mixin)
                return flat, set(), ""
            result = verify(task, task.repo_dir, backend, spec)
            signals = result.grade.tamper_signals
            if signals:
                return flat, set(), signals[0]
            return flat, set(result.expected) - set(result.grade.failed_tests), ""

        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            for flat, passed, signal in pool.map(one, sorted(project.tests.values())):
                if signal:
                    refused[flat] = signal
                    progress(f"{project.source}: tests/{flat} unusable, the grader saw: {signal}")
                accepted |= passed
    return Parity(frozenset(accepted), refused)


def baseline_task(project: Project, flat: str, folder: Path, timeout_s: float) -> Path:
    """A task folder whose repo/ is the project as released and whose tests are one flat test file."""
    for path, data in project.files.items():
        target = folder / REPO_DIR / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    tests = folder / TESTS_DIR
    tests.mkdir(parents=True)
    (tests / flat).write_bytes(project.files[project.test_path(flat)])
    for path, helper in project.support.items():
        (tests / helper).write_bytes(project.files[path])
    (folder / PATCH_FILE).write_text(MARKER_PATCH)
    spec = TaskSpec(id="baseline", instruction="the project's own tests, unchanged", timeout_s=timeout_s)
    (folder / TASK_FILE).write_text(spec_to_toml(spec))
    return folder
