from __future__ import annotations

from pathlib import Path

from actors.tasks.reward import Verdict
from actors.tasks.validate import Admission, RunOutcome, judge

FAIL = (Verdict.FAIL, ("tests/test_a.py::test_x",))
PASS = (Verdict.PASS, ())


def run(
    repo: tuple[Verdict, tuple[str, ...]], gold: tuple[Verdict, tuple[str, ...]], timed_out: bool = False
) -> RunOutcome:
    return RunOutcome(repo, gold, timed_out, 1.0)


def test_a_solvable_stable_task_is_valid() -> None:
    assert judge([run(FAIL, PASS)] * 3) == (Admission.VALID, ())


def test_any_timeout_wins() -> None:
    verdict, reasons = judge([run(FAIL, PASS), run(FAIL, PASS, timed_out=True)])
    assert verdict is Admission.TIMEOUT
    assert reasons == ("1 of 2 runs timed out",)


def test_differing_outcomes_are_flaky() -> None:
    assert judge([run(FAIL, PASS), run(FAIL, FAIL)])[0] is Admission.FLAKY
    other_failure = (Verdict.FAIL, ("tests/test_a.py::test_y",))
    assert judge([run(FAIL, PASS), run(other_failure, PASS)])[0] is Admission.FLAKY


def test_a_repo_that_already_passes_is_rejected() -> None:
    assert judge([run(PASS, PASS)])[0] is Admission.ALREADY_PASSING


def test_a_solution_that_does_not_pass_is_rejected() -> None:
    verdict, reasons = judge([run(FAIL, FAIL)] * 2)
    assert verdict is Admission.GOLD_FAILS
    assert "tests/test_a.py::test_x" in reasons[0]


def test_a_published_task_carries_its_repo_snapshot_and_limits(tmp_path: Path) -> None:
    import dataclasses

    from actors.tasks.publish import initial_snapshot, resource_limits, task_record
    from actors.tasks.spec import TaskLimits, load_task
    from ops.paths import REPO_ROOT
    from sandbox_agent.hosttree import read_tree
    from sandbox_agent.manifest import SnapshotId
    from sandbox_agent.snapshots import SnapshotStore
    from schemas.blobs import BlobRef, LocalObjectStore
    from schemas.common import Producer
    from schemas.sources import FixedClock, Origin, SequentialIds
    from streams.tables import task_info

    task = load_task(REPO_ROOT / "examples" / "tasks" / "easy-fix-range")
    store = LocalObjectStore(tmp_path / "objects")
    snapshot = initial_snapshot(task, store)
    assert initial_snapshot(task, store) == snapshot  # content-addressed: same tree, same id
    restored = SnapshotStore(store).load(SnapshotId.parse(snapshot))
    assert restored == read_tree(task.repo_dir)[0]
    assert resource_limits(task) is None
    limited = dataclasses.replace(task, spec=dataclasses.replace(task.spec, limits=TaskLimits(pids=64)))
    limits = resource_limits(limited)
    assert limits is not None and limits.pids == 64

    origin = Origin(Producer("test", "1"), FixedClock(), SequentialIds())
    info = task_info(task_record(limited, BlobRef.of(b"x"), origin, "img", snapshot))
    assert (info.initial_snapshot_id, info.limits) == (snapshot, limits)
