"""Review, then publish, on a real broker: a rejected task version is never published, an accepted one is
published saying so, and the readers of the `tasks` topic work with the review records beside the tasks."""

from __future__ import annotations

import argparse
import json
import uuid
from pathlib import Path

import pytest

from actors.scheduler.core import Target
from actors.scheduler.worker import SchedulerProcess, SchedulerSettings
from actors.tasks.publish import publish_tasks, read_reviews
from actors.tasks.spec import load_task
from ops.cli.tasks import register
from schemas.blobs import LocalObjectStore
from schemas.origin import Origin
from schemas.publications import ReviewDecision, ReviewStatus, TaskPublished, TaskReviewed
from schemas.topics import TASKS
from streams.kafka.reader import read_to_end
from streams.rows import TaskCache
from tests.unit.tasks.helpers import make_task
from tests.unit.tasks.review_helpers import make_synthesized

pytestmark = pytest.mark.integration


def _review(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="trialog")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["tasks", "review", *argv])
    code: int = args.handler(args)
    return code


def test_review_then_publish(
    kafka_bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = f"review-{uuid.uuid4().hex[:8]}"
    reviewed = tmp_path / "reviewed"
    plain = make_task(reviewed / "calc-0", task_id="calc-0")
    synthesized = make_synthesized(reviewed / "calc-synth")
    unreviewed = make_task(tmp_path / "later" / "calc-late", task_id="calc-late")
    decisions = tmp_path / "decisions.json"
    decisions.write_text(
        json.dumps(
            {
                "calc-0": {"decision": "reject", "note": "the instruction gives the fix away"},
                "calc-synth": {"decision": "accept", "note": ""},
            }
        )
    )
    common = ("--decisions", str(decisions), "--bootstrap", kafka_bootstrap, "--run", run, "--json")
    assert _review(str(reviewed), "--sample", "2", "--reviewer", "ada", *common) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["sampled"] == ["calc-0", "calc-synth"]
    assert [(r["task"], r["decision"]) for r in report["reviews"]] == [
        ("calc-0", "rejected"),
        ("calc-synth", "accepted"),
    ]

    # Reviewed at their current versions: a second review leaves them out and records nothing.
    assert _review(str(reviewed), "--sample", "2", *common) == 0
    out, err = capsys.readouterr()
    again = json.loads(out)
    assert again["sampled"] == [] and again["already_reviewed"] == ["calc-0", "calc-synth"]
    assert "2 tasks already reviewed at their current version are left out" in err
    reviews = read_reviews(kafka_bootstrap, run)
    assert len(reviews) == 2
    assert reviews[("calc-0", load_task(plain).version)].note == "the instruction gives the fix away"

    publication = publish_tasks(
        [plain, synthesized, unreviewed],
        kafka_bootstrap,
        LocalObjectStore(tmp_path / "objects"),
        "img",
        run=run,
    )
    assert publication.published == ("calc-synth", "calc-late") and publication.rejected == ("calc-0",)
    assert publication.folders == (synthesized, unreviewed)

    records = [value for _topic, value in read_to_end(kafka_bootstrap, [TASKS.of(run)])]
    published = {r.task_id: r for r in records if isinstance(r, TaskPublished)}
    assert set(published) == {"calc-synth", "calc-late"}
    assert (published["calc-synth"].review, published["calc-synth"].reviewer) == (
        ReviewStatus.ACCEPTED,
        "ada",
    )
    assert (published["calc-late"].review, published["calc-late"].reviewer) == (ReviewStatus.UNREVIEWED, None)
    decided = [(r.task_id, r.decision) for r in records if isinstance(r, TaskReviewed)]
    assert decided == [("calc-0", ReviewDecision.REJECTED), ("calc-synth", ReviewDecision.ACCEPTED)]

    # The scheduler's rebuild and the streams worker's task cache read the topic, reviews and all.
    scheduler = SchedulerProcess(
        SchedulerSettings(kafka_bootstrap, Target(run, 1)), Origin.system("scheduler", "test"), say=print
    )
    scheduler.rebuild()
    assert set(scheduler.state.tasks) == {"calc-synth", "calc-late"}
    cache = TaskCache(kafka_bootstrap, TASKS.of(run))
    try:
        assert cache.catch_up() == 4 and set(cache.tasks) == {"calc-synth", "calc-late"}
    finally:
        cache.close()
