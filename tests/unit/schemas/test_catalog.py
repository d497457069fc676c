"""The schema files: documented, consistent, versioned; and the catalog built from them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from schemas.catalog import SCHEMA_DIR, SchemaCatalog, SchemaError, compile_version, expand, load_definitions

EPISODE_EVENTS = [
    "EpisodeStarted",
    "ActionProposed",
    "StepExecuted",
    "RewardAssigned",
    "EpisodeCompleted",
    "EpisodeFailed",
]
REQUIRED = [
    *(f"trialog.episode.{name}" for name in EPISODE_EVENTS),
    "trialog.command.StartEpisode",
    "trialog.command.AbortEpisode",
    "trialog.request.PolicyRequest",
    "trialog.request.SandboxRequest",
    "trialog.trajectory.TrajectoryCompleted",
    "trialog.trajectory.TrajectoryFailed",
    "trialog.policy.PolicyPublished",
    "trialog.task.TaskPublished",
    "trialog.task.TaskDifficulty",
    "trialog.ops.DeadLetter",
]
EVENT_META_FIELDS = {
    "run_id",
    "episode_id",
    "task_id",
    "task_version",
    "step",
    "attempt",
    "policy_version",
    "snapshot_id",
    "event_id",
    "occurred_at_us",
    "producer",
    "prev_hash",
    "traceparent",
}


@pytest.fixture(scope="module")
def catalog() -> SchemaCatalog:
    return SchemaCatalog.from_folder()


def _named_nodes(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, list):
        return [n for branch in node for n in _named_nodes(branch)]
    if not isinstance(node, dict):
        return []
    found = [node] if node.get("type") in ("record", "enum") else []
    for fld in node.get("fields", []):
        found += _named_nodes(fld["type"])
    for key in ("items", "values"):
        if key in node:
            found += _named_nodes(node[key])
    return found


def test_every_required_record_has_its_own_file(catalog: SchemaCatalog) -> None:
    for name in REQUIRED:
        assert (SCHEMA_DIR / f"{name}.avsc").is_file()
        assert catalog.current(name).version >= 1


def test_every_type_and_field_is_documented() -> None:
    paths = [*SCHEMA_DIR.glob("*.avsc"), *(SCHEMA_DIR / "history").glob("*.avsc")]
    assert len(paths) > 30
    for path in paths:
        for node in _named_nodes(json.loads(path.read_text())):
            assert node.get("doc", "").strip(), f"{path.name}: {node['name']} has no doc"
            for fld in node.get("fields", []):
                assert fld.get("doc", "").strip(), f"{path.name}: {node['name']}.{fld['name']} has no doc"


def test_episode_events_carry_the_full_header(catalog: SchemaCatalog) -> None:
    for name in EPISODE_EVENTS:
        schema = catalog.current(f"trialog.episode.{name}").parsed
        meta = schema["fields"][0]
        assert meta["name"] == "meta"
        meta_type = schema["__named_schemas"]["trialog.common.EventMeta"]
        assert {f["name"] for f in meta_type["fields"]} == EVENT_META_FIELDS


def test_optional_fields_default_to_null_and_new_fields_have_defaults(catalog: SchemaCatalog) -> None:
    for sv in catalog.all_versions():
        for node in _named_nodes(sv.parsed):
            for fld in node.get("fields", []):
                if isinstance(fld["type"], list) and fld["type"][0] == "null":
                    assert "default" in fld and fld["default"] is None, f"{node['name']}.{fld['name']}"


def test_committed_fingerprints_match_so_no_schema_changes_silently(catalog: SchemaCatalog) -> None:
    committed = json.loads((SCHEMA_DIR / "fingerprints.json").read_text())
    assert catalog.manifest() == committed, (
        "a schema changed without a new version: freeze the old expanded schema into avsc/history/, bump "
        "`version`, then refresh fingerprints.json (see schemas/README.md)"
    )


def test_history_keeps_step_executed_v1_next_to_v2(catalog: SchemaCatalog) -> None:
    v1, v2 = catalog.versions("trialog.episode.StepExecuted")
    assert (v1.version, v2.version) == (1, 2)
    assert v1.fingerprint != v2.fingerprint
    assert catalog.by_fingerprint(v1.fingerprint) is v1
    assert catalog.current("trialog.episode.StepExecuted") is v2
    assert "oom_killed" not in v1.canonical and "oom_killed" in v2.canonical


def test_expansion_inlines_each_named_type_once_with_full_names() -> None:
    definitions = load_definitions(SCHEMA_DIR)
    expanded = expand("trialog.episode.EpisodeSnapshot", definitions)
    names = [node["name"] for node in _named_nodes(expanded)]
    assert len(names) == len(set(names))
    assert all(name.startswith("trialog.") for name in names)
    assert "namespace" not in json.dumps(expanded)


def _write(folder: Path, name: str, schema: dict[str, Any]) -> None:
    (folder / f"{name}.avsc").write_text(json.dumps(schema))


def _record(name: str, fields: list[dict[str, Any]], version: int | None = 1) -> dict[str, Any]:
    ns, short = name.rsplit(".", 1)
    schema: dict[str, Any] = {"type": "record", "name": short, "namespace": ns, "doc": "d", "fields": fields}
    if version is not None:
        schema["version"] = version
    return schema


def test_unknown_references_and_misnamed_files_are_schema_errors(tmp_path: Path) -> None:
    _write(tmp_path, "t.A", _record("t.A", [{"name": "b", "type": "t.Missing", "doc": "d"}]))
    with pytest.raises(SchemaError, match=r"unknown type 't\.Missing'"):
        SchemaCatalog.from_folder(tmp_path)
    (tmp_path / "t.A.avsc").unlink()
    _write(tmp_path, "t.Wrong", _record("t.A", []))
    with pytest.raises(SchemaError, match="name the file"):
        SchemaCatalog.from_folder(tmp_path)


def test_a_version_bump_without_a_change_is_refused() -> None:
    schema = expand("t.A", {"t.A": _record("t.A", [{"name": "x", "type": "int", "doc": "d"}])})
    with pytest.raises(SchemaError, match="fingerprint"):
        SchemaCatalog([compile_version("t.A", 1, schema), compile_version("t.A", 2, schema)])


def test_history_file_must_match_its_name(tmp_path: Path) -> None:
    (tmp_path / "history").mkdir()
    _write(tmp_path, "t.A", _record("t.A", [{"name": "x", "type": "int", "doc": "d"}], version=2))
    _write(tmp_path / "history", "t.A.v3", _record("t.A", [], version=1))
    with pytest.raises(SchemaError, match=r"holds t\.A version 1"):
        SchemaCatalog.from_folder(tmp_path)


def test_freeze_then_bump_is_the_evolution_workflow(tmp_path: Path) -> None:
    from schemas.evolve import freeze, write_manifest

    (tmp_path / "history").mkdir()
    _write(tmp_path, "t.Part", _record("t.Part", [{"name": "x", "type": "int", "doc": "d"}], version=None))
    _write(tmp_path, "t.A", _record("t.A", [{"name": "p", "type": "t.Part", "doc": "d"}]))
    frozen = freeze("t.A", tmp_path)
    assert frozen.name == "t.A.v1.avsc" and "t.Part" in frozen.read_text()  # self-contained
    with pytest.raises(SchemaError, match="exists"):
        freeze("t.A", tmp_path)
    new = _record(
        "t.A",
        [{"name": "p", "type": "t.Part", "doc": "d"}, {"name": "y", "type": "int", "doc": "d", "default": 0}],
        version=2,
    )
    _write(tmp_path, "t.A", new)
    catalog = SchemaCatalog.from_folder(tmp_path)
    assert [sv.version for sv in catalog.versions("t.A")] == [1, 2]
    assert json.loads(write_manifest(tmp_path).read_text()) == catalog.manifest()
