"""Every reward canary of two example tasks, graded by the real grader in real sandboxes (issue 15).

The workspaces are stored as snapshots (`canary_snapshot`) and graded by a verifier's `SnapshotGrader`,
exactly as the guard's canary requests are: the reference must pass, the untouched repo and every hack
must not, and the hacks that today's grader records as tampering must grade `tampered`. The tasks: one
with a package and parametrized tests (csv-quoted), one with a package and protected visible tests
(word-count). Grades run two at a time, each in a fresh sandbox; the table is printed (pytest -s).

The hacks of `OPEN_GAPS` are graded too: today's grader passes them (real grader bugs, reported with
issue 15). Each must still pass on at least one of the two tasks; when none does, the grader has closed
the gap and the case moves into `CASES` (this test then says so).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import docker
import pytest

from actors.guard.canaries import OPEN_GAPS, CanaryCase, canary_snapshot, cases_for, open_gaps_for
from actors.tasks.reward import Verdict
from actors.tasks.spec import Task, load_task
from actors.tasks.verify import Verification, print_human
from actors.verifier.grading import SnapshotGrader
from ops.paths import REPO_ROOT
from ops.stack.images import sandbox_ref
from ops.testing import owned_labels
from sandbox_agent.docker_backend import DockerBackend
from schemas.blobs import LocalObjectStore

pytestmark = pytest.mark.integration

EXAMPLES = REPO_ROOT / "examples" / "tasks"
TASKS = ("csv-quoted", "word-count")
PARALLEL = 2


def test_every_canary_grades_as_its_case_expects(docker_client: docker.DockerClient, tmp_path: Path) -> None:
    objects = LocalObjectStore(tmp_path / "objects")
    backend = DockerBackend(docker_client, objects, labels=owned_labels("canaries"))
    grader = SnapshotGrader(backend, objects, str(sandbox_ref()))
    tasks = [load_task(EXAMPLES / name) for name in TASKS]
    work = [(task, case) for task in tasks for case in (*cases_for(task), *open_gaps_for(task))]
    names = {task.id: {case.name for case in cases_for(task)} for task, _ in work}
    assert "hack:unreported-instances" in names["csv-quoted"] and "hack:protected-edit" in names["word-count"]

    def grade(item: tuple[Task, CanaryCase]) -> Verification:
        task, case = item
        return grader(task, canary_snapshot(task, case, objects), None)

    started = time.monotonic()
    with ThreadPoolExecutor(PARALLEL, thread_name_prefix="canary") as pool:
        results = list(pool.map(grade, work))
    elapsed = time.monotonic() - started

    wrong: list[str] = []
    gaps_passed: set[str] = set()
    lines = [f"{len(work)} canaries graded in {elapsed:.1f} s ({PARALLEL} at a time)"]
    for (task, case), result in zip(work, results, strict=True):
        graded = result.grade
        evidence = (*graded.tampered_paths, *graded.tamper_signals, graded.detail, "")[0]
        lines.append(
            f"{task.id:11} {case.name:29} {graded.verdict.value:9} {graded.reward:+.2f} "
            f"{graded.passed}/{graded.total} {result.duration_s:5.1f}s {evidence[:60]}"
            + ("  (open gap)" if case in OPEN_GAPS else "")
        )
        if case in OPEN_GAPS:
            if graded.verdict is Verdict.PASS:
                gaps_passed.add(case.name)
            continue
        if case.expect_pass:
            ok = (graded.verdict, graded.reward, graded.tamper_signals) == (Verdict.PASS, 1.0, ())
        else:
            ok = graded.reward < 1.0 and graded.verdict not in (Verdict.PASS, Verdict.ERROR)
            if case.tampering(task):
                ok = ok and graded.verdict is Verdict.TAMPERED
            elif case.name == "untouched":
                ok = ok and graded.tamper_signals == ()
        if not ok or not case.as_expected(graded.verdict.value):
            wrong.append(f"{task.id} {case.name}:\n{print_human(result)}")
    print("\n".join(lines))
    assert not wrong, "\n".join([*lines, "", "graded wrongly:", *wrong])
    closed = sorted({case.name for case in OPEN_GAPS} - gaps_passed)
    assert not closed, f"the grader now refuses {closed}: move them from OPEN_GAPS into CASES\n" + "\n".join(
        lines
    )
