"""The verifier worker's logic without sandboxes: task lookup, snapshot restore, request -> RewardAssigned."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from actors.tasks.reward import Outcome, grade
from actors.tasks.spec import Task, load_task
from actors.tasks.verify import Verification
from actors.tasks.workspace import CopyLimits, WorkspaceError
from actors.verifier.grading import restore_to_folder
from actors.verifier.tasks import FolderTasks, TaskUnavailable
from actors.verifier.worker import VERIFIER_ID, VerifierWorker, reward_assigned
from ops.paths import REPO_ROOT
from sandbox_agent.hosttree import read_tree
from sandbox_agent.snapshots import SnapshotStore
from schemas.blobs import BlobRef, MemoryObjectStore
from schemas.budget import LINES_MAX, TAIL_MAX
from schemas.codec import default_codec
from schemas.common import Verdict
from tests.unit.actors.requests import SNAPSHOT, fixed_origin, request_meta, verify_request
from tests.unit.tasks.helpers import make_task

EXAMPLE = REPO_ROOT / "examples" / "tasks" / "easy-fix-range"


class FakeGrader:
    """Grades from a table snapshot id -> reported outcomes; records its calls."""

    def __init__(self, results: dict[str, Verification] | None = None, fail: Exception | None = None):
        self.results = results or {}
        self.fail = fail
        self.calls: list[tuple[str, str, str | None]] = []

    def __call__(self, task: Task, snapshot_id: str, image: str | None) -> Verification:
        self.calls.append((task.id, snapshot_id, image))
        if self.fail is not None:
            raise self.fail
        return self.results[snapshot_id]


@pytest.fixture(scope="module")
def task() -> Task:
    return load_task(EXAMPLE)


@pytest.fixture
def tasks(tmp_path: Path) -> FolderTasks:
    shutil.copytree(EXAMPLE, tmp_path / "tasks" / "easy-fix-range")
    return FolderTasks([tmp_path / "tasks"])


def _meta(task: Task, **fields: object) -> object:
    return request_meta(task_id=task.id, task_version=task.version, **fields)  # type: ignore[arg-type]


def test_folder_tasks_find_exact_versions_only(tasks: FolderTasks, task: Task, tmp_path: Path) -> None:
    assert tasks.ids == (task.id,)
    assert tasks.get(task.id, task.version).version == task.version
    with pytest.raises(TaskUnavailable, match="is at version") as caught:
        tasks.get(task.id, "f" * 64)
    assert caught.value.reason == "task_version_mismatch"
    with pytest.raises(TaskUnavailable) as unknown:
        tasks.get("nope", "v")
    assert unknown.value.reason == "unknown_task"
    # A task folder added (or edited) after start is found on demand.
    added = load_task(make_task(tmp_path / "tasks" / "calc"))
    assert tasks.get("calc-add", added.version).id == "calc-add"
    folder = tmp_path / "tasks" / "easy-fix-range"
    (folder / "tests" / "test_more.py").write_text("def test_more():\n    pass\n")
    edited = load_task(folder)
    assert tasks.get(task.id, edited.version).version == edited.version != task.version


def test_a_snapshot_is_restored_into_a_host_folder(tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "pkg").mkdir(parents=True)
    (source / "pkg" / "mod.py").write_text("x = 1\n")
    (source / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(source / "run.sh", 0o755)
    os.symlink("/etc/passwd", source / "link")
    objects = MemoryObjectStore()
    snapshot_id = SnapshotStore(objects).save(*read_tree(source))
    dest = tmp_path / "dest"
    dest.mkdir()
    restore_to_folder(objects, str(snapshot_id), dest)
    assert (dest / "pkg" / "mod.py").read_text() == "x = 1\n"
    assert os.access(dest / "run.sh", os.X_OK)
    assert os.readlink(dest / "link") == "/etc/passwd"  # a link stays a link, never followed
    with pytest.raises(WorkspaceError, match="holds 16 bytes, more than 4"):
        restore_to_folder(objects, str(snapshot_id), tmp_path / "never", CopyLimits(max_bytes=4))
    assert not (tmp_path / "never").exists()


def test_a_graded_snapshot_becomes_reward_assigned(tasks: FolderTasks, task: Task) -> None:
    tampered = grade(expected=task.test_ids, reports=(), tampered_paths=("tests/x.py",))
    grader = FakeGrader({SNAPSHOT: Verification(tampered, 0.5, log="tail")})
    objects = MemoryObjectStore()
    worker = VerifierWorker(tasks, grader, objects, fixed_origin("verifier"))
    request = verify_request(_meta(task, step=4, attempt=2, snapshot_id=SNAPSHOT))  # type: ignore[arg-type]
    answer = worker.handle(request)
    meta = answer.meta
    assert (meta.episode_id, meta.step, meta.attempt) == ("ep-1", 4, 2)
    assert (meta.prev_hash, meta.snapshot_id) == (request.meta.prev_hash, SNAPSHOT)
    assert meta.producer.kind == "verifier"
    assert (answer.verdict, answer.reward, answer.tampered_paths) == (Verdict.TAMPERED, -1.0, ("tests/x.py",))
    assert answer.failed_tests == task.test_ids and answer.total == len(task.test_ids)
    assert answer.verifier == VERIFIER_ID and answer.report is not None
    report = json.loads(objects.get(answer.report))
    assert report["verdict"] == "tampered" and report["snapshot_id"] == SNAPSHOT and report["log"] == "tail"
    assert grader.calls == [(task.id, SNAPSHOT, "sandbox-image")]
    assert default_codec().decode(default_codec().encode(answer)) == answer

    again = worker.handle(request)  # redelivered: answered from the recorded grade, not graded again
    assert len(grader.calls) == 1 and again.reward == answer.reward and again.report == answer.report


def test_a_tampered_path_that_is_not_utf8_is_answered_and_encodable(tasks: FolderTasks, task: Task) -> None:
    """Renaming a protected file to bytes that are not UTF-8 must not make the -1.0 unencodable."""
    forged = os.fsdecode(b"tests/\xff.py")
    tampered = grade(expected=task.test_ids, reports=(), tampered_paths=(forged,))
    objects = MemoryObjectStore()
    worker = VerifierWorker(
        tasks, FakeGrader({SNAPSHOT: Verification(tampered, 0.5)}), objects, fixed_origin()
    )
    answer = worker.handle(verify_request(_meta(task, snapshot_id=SNAPSHOT)))  # type: ignore[arg-type]
    decoded = default_codec().decode(default_codec().encode(answer))
    assert decoded == answer and (answer.verdict, answer.reward) == (Verdict.TAMPERED, -1.0)
    assert answer.tampered_paths == (forged,)
    assert answer.report is not None
    assert json.loads(objects.get(answer.report))["tampered_paths"] == ["tests/\\xff.py"]


@pytest.mark.parametrize(
    ("case", "detail"),
    [
        ("unknown_version", "task_version_mismatch"),
        ("unknown_task", "unknown_task"),
        ("no_snapshot", "no_snapshot"),
        ("grader_fails", "grading_failed: BlobIntegrityError: gone"),
    ],
)
def test_what_cannot_be_graded_is_verdict_error(
    tasks: FolderTasks, task: Task, case: str, detail: str
) -> None:
    from schemas.blobs import BlobIntegrityError

    grader = FakeGrader(fail=BlobIntegrityError("gone"))
    objects = MemoryObjectStore()
    worker = VerifierWorker(tasks, grader, objects, fixed_origin("verifier"))
    meta = {
        "unknown_version": request_meta(task_id=task.id, task_version="f" * 64, snapshot_id=SNAPSHOT),
        "unknown_task": request_meta(task_id="nope", snapshot_id=SNAPSHOT),
        "no_snapshot": request_meta(task_id=task.id, task_version=task.version),
        "grader_fails": request_meta(task_id=task.id, task_version=task.version, snapshot_id=SNAPSHOT),
    }[case]
    answer = worker.handle(verify_request(meta))
    assert (answer.verdict, answer.reward, answer.passed) == (Verdict.ERROR, 0.0, 0)
    assert isinstance(answer.report, BlobRef)
    assert detail in json.loads(objects.get(answer.report))["detail"]
    worker.handle(verify_request(meta))
    assert len(grader.calls) == (2 if case == "grader_fails" else 0)  # errors are never cached


def test_a_full_pass_is_verdict_pass(task: Task) -> None:
    passed = grade(expected=task.test_ids, reports=[(t, Outcome.PASSED) for t in task.test_ids])
    answer = reward_assigned(fixed_origin("verifier"), verify_request(), Verification(passed, 1.0))
    assert (answer.verdict, answer.reward, answer.failed_tests) == (Verdict.PASS, 1.0, ())


def test_tamper_signals_reach_the_reward_encodable_and_capped(tasks: FolderTasks, task: Task) -> None:
    """The evidence is in the log next to the -1.0, whatever the graded code made it quote: a name that
    is not UTF-8, a lone surrogate no file name has, a thousand long lines."""
    odd = os.fsdecode(b"conftest\xff.py")
    signals = [f"framework object replaced from {odd}", "an object compares equal to everything: \ud800"]
    signals += [f"gc walk #{i}: " + "x" * 10_000 for i in range(1_000)]
    tampered = grade(expected=task.test_ids, reports=(), tamper_signals=signals)
    assert tampered.verdict.value == "tampered" and tampered.tamper_signals
    objects = MemoryObjectStore()
    worker = VerifierWorker(
        tasks, FakeGrader({SNAPSHOT: Verification(tampered, 0.5)}), objects, fixed_origin()
    )
    answer = worker.handle(verify_request(_meta(task, snapshot_id=SNAPSHOT)))  # type: ignore[arg-type]
    data = default_codec().encode(answer)
    assert default_codec().decode(data) == answer and len(data) <= TAIL_MAX
    assert (answer.verdict, answer.reward) == (Verdict.TAMPERED, -1.0)
    assert answer.tamper_signals[0] == signals[0]  # the lossless form gives the fsdecode name back
    assert answer.tamper_signals[1] == "an object compares equal to everything: \\ud800"
    assert len(answer.tamper_signals) == LINES_MAX and "more (see the report)" in answer.tamper_signals[-1]
    assert answer.report is not None
    assert len(json.loads(objects.get(answer.report))["tamper_signals"]) == len(signals)


def _passing(task: Task) -> Verification:
    reports = [(test_id, Outcome.PASSED) for test_id in task.test_ids]
    return Verification(grade(expected=task.test_ids, reports=reports), 0.5)


def test_every_grade_names_its_versions_and_a_new_image_id_is_seen_within_the_ttl(
    tasks: FolderTasks, task: Task
) -> None:
    from actors.verifier.versions import ImageIds, Versioner, tests_version, verifier_version

    now = [0.0]
    ids = {"sandbox-image": "sha256:one"}
    image_ids = ImageIds(lambda ref: ids[ref], lambda: now[0], ttl_s=30)
    version = verifier_version(VERIFIER_ID)
    worker = VerifierWorker(
        tasks, FakeGrader({SNAPSHOT: _passing(task)}), MemoryObjectStore(), fixed_origin(),
        versions=Versioner(version, image_ids, "default-image"),
    )  # fmt: skip
    answer = worker.handle(verify_request(_meta(task, snapshot_id=SNAPSHOT)))  # type: ignore[arg-type]
    assert answer.versions is not None and answer.verdict is Verdict.PASS
    assert (answer.versions.verifier, answer.versions.image) == (version, "sha256:one")
    assert answer.versions.tests == tests_version(task) != task.version
    ids["sandbox-image"] = "sha256:two"  # rebuilt under the same reference
    now[0] = 10.0
    assert image_ids("sandbox-image") == "sha256:one"
    now[0] = 31.0
    assert image_ids("sandbox-image") == "sha256:two"
    assert image_ids("missing") == "ref:missing"  # a failed lookup names the reference
    unknown = worker.handle(verify_request(request_meta(task_id="nope", snapshot_id=SNAPSHOT)))
    assert unknown.versions is None and unknown.verdict is Verdict.ERROR


def test_a_fault_is_a_setting_a_verifier_version_names(tasks: FolderTasks, task: Task) -> None:
    from actors.verifier.faults import Fault
    from actors.verifier.versions import verifier_version

    assert verifier_version(VERIFIER_ID) != verifier_version(VERIFIER_ID, {"fault": "pass-all"})
    assert verifier_version(VERIFIER_ID) == verifier_version(VERIFIER_ID, {})
    failing = Verification(grade(expected=task.test_ids, reports=()), 0.5)
    grades = {}
    for fault in Fault:
        worker = VerifierWorker(
            tasks, FakeGrader({SNAPSHOT: failing if fault is Fault.PASS_ALL else _passing(task)}),
            MemoryObjectStore(), fixed_origin(), fault=fault,
        )  # fmt: skip
        grades[fault] = worker.handle(verify_request(_meta(task, snapshot_id=SNAPSHOT)))  # type: ignore[arg-type]
    assert (grades[Fault.PASS_ALL].verdict, grades[Fault.PASS_ALL].reward) == (Verdict.PASS, 1.0)
    assert grades[Fault.FAIL_ALL].verdict is Verdict.FAIL and grades[Fault.FAIL_ALL].reward < 0


def test_a_canary_is_graded_afresh_while_an_episode_grade_may_come_from_the_cache(
    tasks: FolderTasks, task: Task
) -> None:
    grader = FakeGrader({SNAPSHOT: _passing(task)})
    worker = VerifierWorker(tasks, grader, MemoryObjectStore(), fixed_origin())
    request = verify_request(_meta(task, snapshot_id=SNAPSHOT))  # type: ignore[arg-type]
    worker.handle(request)
    worker.handle(request)
    assert len(grader.calls) == 1
    worker.handle_canary(request)
    worker.handle_canary(request)
    assert len(grader.calls) == 3


def _partial(task: Task) -> Verification:
    first, *rest = task.test_ids
    reports = [(first, Outcome.PASSED), *((test_id, Outcome.FAILED) for test_id in rest)]
    return Verification(grade(expected=task.test_ids, reports=reports), 0.5)


def test_the_reward_is_composed_by_the_configuration_and_each_component_recorded(
    tasks: FolderTasks, task: Task
) -> None:
    import dataclasses

    from actors.tasks.reward_config import DEFAULT, parse
    from actors.verifier.versions import ImageIds, Versioner, verifier_version

    config = parse("[weights]\nefficiency = 0.5\n")
    objects = MemoryObjectStore()
    image_ids = ImageIds(lambda ref: "sha256:one", lambda: 0.0)
    worker = VerifierWorker(
        tasks, FakeGrader({SNAPSHOT: _partial(task), "tampered": Verification(
            grade(expected=task.test_ids, reports=(), tampered_paths=("tests/x.py",)), 0.1)}),
        objects, fixed_origin(), reward=config,
        versions=Versioner(verifier_version(VERIFIER_ID), image_ids, "default-image", config),
    )  # fmt: skip
    request = dataclasses.replace(
        verify_request(_meta(task, snapshot_id=SNAPSHOT)),  # type: ignore[arg-type]
        steps_used=3,
        step_budget=12,
    )
    answer = worker.handle(request)
    outcome = 1 / len(task.test_ids) - 0.2
    assert answer.verdict is Verdict.PARTIAL and answer.outcome_reward == pytest.approx(outcome)
    assert dict(answer.components) == {"efficiency": 0.75}
    assert answer.reward == pytest.approx(outcome + 0.5 * 0.75)
    assert answer.versions is not None and answer.versions.reward_config == config.version != DEFAULT.version
    report = json.loads(objects.get(answer.report))  # type: ignore[arg-type]
    assert report["components"] == {"efficiency": 0.75} and report["reward_config"] == config.canonical()
    assert default_codec().decode(default_codec().encode(answer)) == answer
    # A penalty is never softened: the component is recorded, and not added.
    tampered = worker.handle(dataclasses.replace(request, meta=_meta(task, snapshot_id="tampered")))  # type: ignore[arg-type]
    assert (tampered.reward, tampered.outcome_reward, dict(tampered.components)) == (
        -1.0,
        -1.0,
        {"efficiency": 0.75},
    )
    # The same workspace, graded once, at another step count: the composition is the request's own.
    slower = worker.handle(dataclasses.replace(request, steps_used=12))
    assert slower.outcome_reward == answer.outcome_reward and slower.reward == pytest.approx(outcome)


def test_a_weighted_component_the_request_cannot_give_is_an_error_never_a_guess(
    tasks: FolderTasks, task: Task
) -> None:
    """A request from a streams worker that predates step counts (VerifyRequest v1) cannot be composed
    under a configuration that weighs efficiency: it is not trained on, and the report says why."""
    from actors.tasks.reward_config import parse

    objects = MemoryObjectStore()
    worker = VerifierWorker(
        tasks, FakeGrader({SNAPSHOT: _passing(task)}), objects, fixed_origin(),
        reward=parse("[weights]\nefficiency = 0.5\n"),
    )  # fmt: skip
    answer = worker.handle(verify_request(_meta(task, snapshot_id=SNAPSHOT)))  # type: ignore[arg-type]
    assert answer.verdict is Verdict.ERROR and answer.reward == 0.0
    assert "efficiency" in json.loads(objects.get(answer.report))["detail"]  # type: ignore[arg-type]
    # A canary is the outcome alone: it checks the grader, whatever the configuration weighs.
    canary = worker.handle_canary(verify_request(_meta(task, snapshot_id=SNAPSHOT)))  # type: ignore[arg-type]
    assert (canary.verdict, canary.reward, canary.components) == (Verdict.PASS, 1.0, ())


def test_without_a_configuration_the_reward_is_the_brief_rule_and_efficiency_is_still_measured(
    tasks: FolderTasks, task: Task
) -> None:
    import dataclasses

    worker = VerifierWorker(
        tasks, FakeGrader({SNAPSHOT: _passing(task)}), MemoryObjectStore(), fixed_origin()
    )
    request = dataclasses.replace(
        verify_request(_meta(task, snapshot_id=SNAPSHOT)),  # type: ignore[arg-type]
        steps_used=30,
        step_budget=12,  # more than the budget (a truncation's last step): capped
    )
    answer = worker.handle(request)
    assert (answer.reward, answer.outcome_reward, dict(answer.components)) == (1.0, 1.0, {"efficiency": 0.0})


def test_resource_measures_become_components_against_the_requests_limits(
    tasks: FolderTasks, task: Task
) -> None:
    import dataclasses

    from actors.tasks.change import ChangeSize
    from actors.tasks.verify import Resources
    from sandbox_agent.limits import MIB

    measures = Resources(
        test_wall_s=7.5, memory_peak_bytes=128 * MIB, left_running=2, change=ChangeSize(1, 30, 20)
    )
    graded = dataclasses.replace(_passing(task), resources=measures)
    worker = VerifierWorker(tasks, FakeGrader({SNAPSHOT: graded}), MemoryObjectStore(), fixed_origin())
    request = verify_request(_meta(task, snapshot_id=SNAPSHOT))  # type: ignore[arg-type]  # 30 s, 512 MiB
    components = dict(worker.handle(request).components)
    assert components == {"speed": 0.75, "memory": 0.75, "no_leftovers": 0.0, "small_change": 0.5}
    unmeasured = dataclasses.replace(_passing(task), resources=Resources())
    worker = VerifierWorker(tasks, FakeGrader({SNAPSHOT: unmeasured}), MemoryObjectStore(), fixed_origin())
    assert worker.handle(request).components == ()  # nothing measured, nothing recorded


def test_an_intermediate_workspace_is_graded_from_the_same_cache_and_answered_as_step_graded(
    tasks: FolderTasks, task: Task
) -> None:
    from schemas.progress import StepGraded

    grader = FakeGrader({SNAPSHOT: _partial(task)})
    worker = VerifierWorker(tasks, grader, MemoryObjectStore(), fixed_origin("verifier"))
    request = verify_request(_meta(task, step=2, snapshot_id=SNAPSHOT))  # type: ignore[arg-type]
    graded = worker.handle_progress(request)
    assert isinstance(graded, StepGraded) and graded.verdict is Verdict.PARTIAL
    assert (graded.passed, graded.total, graded.meta.step, graded.meta.snapshot_id) == (
        1, len(task.test_ids), 2, SNAPSHOT,
    )  # fmt: skip
    assert graded.meta.producer.kind == "verifier" and graded.rate == 1 / len(task.test_ids)
    assert default_codec().decode(default_codec().encode(graded)) == graded
    worker.handle(request)  # the final grade of the same workspace: no second sandbox
    assert len(grader.calls) == 1


def test_intermediate_workspaces_go_to_the_progress_grader_and_share_the_cache(
    tasks: FolderTasks, task: Task
) -> None:
    episodes, progress = FakeGrader({SNAPSHOT: _passing(task)}), FakeGrader({SNAPSHOT: _passing(task)})
    worker = VerifierWorker(tasks, episodes, MemoryObjectStore(), fixed_origin(), progress_grader=progress)
    request = verify_request(_meta(task, snapshot_id=SNAPSHOT))  # type: ignore[arg-type]
    worker.handle_progress(request)
    assert (len(progress.calls), len(episodes.calls)) == (1, 0)
    worker.handle(request)  # the final grade of the same workspace: from the cache
    assert (len(progress.calls), len(episodes.calls)) == (1, 0)
