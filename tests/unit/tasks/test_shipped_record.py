"""The shipped task set's validation record (examples/synth/validated.jsonl) covers every task of the
manifest, at the version the manifest names, valid under `tasks validate --runs 5`. A task re-cut without
being validated again (its version changes) or added to the set without a record fails here: the claim
"every shipped task is valid at --runs 5" stays true of what is shipped, not of an older set."""

from __future__ import annotations

import json
from pathlib import Path

from actors.tasks.synth.manifest import read_manifest

SYNTH = Path(__file__).resolve().parents[3] / "examples" / "synth"


def _record() -> dict[str, dict[str, object]]:
    entries: dict[str, dict[str, object]] = {}
    for line in (SYNTH / "validated.jsonl").read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        entries[entry["task"]] = entry  # the last line of a task wins, as `--record` reads it
    return entries


def test_every_shipped_task_is_recorded_valid_at_five_runs_at_its_version() -> None:
    record = _record()
    manifest = {entry.task_id: entry for entry in read_manifest(SYNTH / "tasks.jsonl.gz")}
    missing = sorted(set(manifest) - set(record))
    assert not missing, f"{len(missing)} shipped tasks have no --runs 5 record, e.g. {missing[:3]}"
    for task_id, entry in manifest.items():
        verdict = record[task_id]
        assert verdict["version"] == entry.version, f"{task_id}: recorded at another version"
        assert verdict["verdict"] == "valid", (task_id, verdict["reasons"])
        assert verdict["runs_asked"] == 5, task_id
        runs = verdict["runs"]
        assert isinstance(runs, list) and len(runs) == 5, task_id
        assert all(run["gold"] == "pass" and run["repo"] != "pass" for run in runs), task_id


def test_the_record_holds_no_task_the_manifest_does_not_ship() -> None:
    shipped = {entry.task_id for entry in read_manifest(SYNTH / "tasks.jsonl.gz")}
    assert set(_record()) <= shipped
