"""A real run bundled (`trialog bundle`), then audited, rechecked and reproduced from the bundle alone.

The run's own store is moved out of reach and TRIALOG_HOME is a fresh folder while the bundle is read, and
the broker named is one where nothing listens: Kafka and the run's store are never read, only the bundle
(and Docker, for the sandboxes the recheck and the reproduction grade in).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ops.cli.main import main as trialog
from ops.run_bundle import Bundle
from schemas.topics import TOPICS
from tests.integration.audit_side.conftest import EPISODES, RealRun

CapSys = pytest.CaptureFixture[str]
NOWHERE = ["--bootstrap", "127.0.0.1:9"]  # nothing listens there: a read of Kafka would fail at once


def _json(argv: list[str], capsys: CapSys) -> tuple[int, dict[str, Any]]:
    code = trialog(argv)
    captured = capsys.readouterr()
    assert captured.out.strip(), captured.err
    return code, json.loads(captured.out)


@pytest.fixture
def elsewhere(real_run: RealRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A machine that never ran the run: a fresh TRIALOG_HOME, and the run's store out of reach."""
    monkeypatch.setenv("TRIALOG_HOME", str(tmp_path / "fresh-home"))
    hidden = real_run.objects.with_name("objects.out-of-reach")
    real_run.objects.rename(hidden)
    try:
        yield tmp_path
    finally:
        hidden.rename(real_run.objects)


def test_a_bundled_run_is_audited_rechecked_and_reproduced_from_the_bundle_alone(
    real_run: RealRun, tmp_path: Path, capsys: CapSys, request: pytest.FixtureRequest
) -> None:
    out = tmp_path / "bundle"
    started = time.monotonic()
    code, summary = _json(["bundle", real_run.name, str(out), "--json", *real_run.options()], capsys)
    bundled_s = time.monotonic() - started
    assert code == 0, summary
    assert set(summary["records"]) == {topic.name for topic in TOPICS}  # every topic, however many
    assert summary["records"]["episode.events"] > 0 and summary["records"]["tasks"] == 1
    assert summary["blobs"] > 0 and summary["blobs_copied"] == summary["blobs"]
    assert summary["missing_blobs"] == [] and summary["broken_snapshots"] == []
    code, from_kafka = _json(["audit", real_run.name, "--json", *real_run.options()], capsys)
    assert code == 0
    manifest = Bundle.open(out).manifest
    assert any(recipe["image"].startswith("trialog-sandbox:") for recipe in manifest["images"]["recipes"])
    assert manifest["images"]["named_by_log"] and manifest["software"]["requirements_lock"]

    request.getfixturevalue("elsewhere")  # from here on: no run store, a fresh home, no Kafka
    code, from_bundle = _json(["audit", "--bundle", str(out), "--json", *NOWHERE], capsys)
    assert code == 0 and from_bundle == from_kafka  # the same report, the run's name included

    started = time.monotonic()
    code, report = _json(["audit", "--bundle", str(out), "--recheck", "--json", *NOWHERE], capsys)
    rechecked_s = time.monotonic() - started
    assert report["healthy"] is True, report
    assert report["recheck"]["rechecked"] == EPISODES and report["recheck"]["differences"] == 0, report
    assert report["recheck"]["ok"] is True and code == 0

    episode = next(iter(sorted(_episodes(out, capsys))))
    started = time.monotonic()
    code, reproduced = _json(["reproduce", episode, "--bundle", str(out), "--json", *NOWHERE], capsys)
    reproduced_s = time.monotonic() - started
    assert reproduced["same"] is True and code == 0, reproduced
    assert reproduced["reward"]["reproduced"] == 1.0
    with capsys.disabled():
        print(
            f"bundle {bundled_s:.1f} s, recheck from it {rechecked_s:.1f} s, reproduce {reproduced_s:.1f} s"
        )


def _episodes(out: Path, capsys: CapSys) -> list[str]:
    code, replayed = _json(["replay", "--bundle", str(out), "--json", *NOWHERE], capsys)
    assert code == 0 and len(replayed["episodes"]) == EPISODES
    return [episode["episode_id"] for episode in replayed["episodes"]]


def test_a_hashes_only_bundle_audits_and_says_what_a_recheck_lacks(
    real_run: RealRun, tmp_path: Path, capsys: CapSys, request: pytest.FixtureRequest
) -> None:
    out = tmp_path / "hashes"
    code, summary = _json(
        ["bundle", real_run.name, str(out), "--hashes-only", "--json", *real_run.options()], capsys
    )
    assert code == 0 and summary["blobs"] > 0 and summary["blobs_copied"] == 0
    assert not any(path.is_file() for path in (out / "objects").rglob("*"))
    request.getfixturevalue("elsewhere")
    code, report = _json(["audit", "--bundle", str(out), "--json", *NOWHERE], capsys)
    assert code == 0 and report["healthy"] is True and report["completed"] == EPISODES
    code, error = _json(["audit", "--bundle", str(out), "--recheck", "--json", *NOWHERE], capsys)
    assert (
        code == 2 and "written with --hashes-only" in error["error"] and "--objects LOCATION" in error["hint"]
    )
    assert trialog(["bundle", real_run.name, str(out), *real_run.options()]) == 2  # OUT is not empty
    assert "is not an empty folder" in capsys.readouterr().err
