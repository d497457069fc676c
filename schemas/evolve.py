"""Tools for changing a schema the safe way (see schemas/README.md, "Evolving a schema").

python -m schemas.evolve freeze trialog.episode.StepExecuted   # before editing: keep today's version
python -m schemas.evolve manifest                              # after editing and bumping: record it
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from schemas.catalog import HISTORY_DIR_NAME, SCHEMA_DIR, SchemaCatalog, SchemaError, expand, load_definitions

MANIFEST = "fingerprints.json"


def freeze(name: str, folder: Path = SCHEMA_DIR) -> Path:
    """Copy the current version of `name`, expanded and self-contained, into history/."""
    definitions = load_definitions(folder)
    if "version" not in definitions.get(name, {}):
        raise SchemaError(f"{name} is not a message schema in {folder}")
    schema = expand(name, definitions)
    path = folder / HISTORY_DIR_NAME / f"{name}.v{schema['version']}.avsc"
    if path.exists():
        raise SchemaError(f"{path} exists: bump `version` in {name}.avsc after freezing, not before")
    path.write_text(json.dumps(schema, indent=2) + "\n")
    return path


def write_manifest(folder: Path = SCHEMA_DIR) -> Path:
    """Record every version's fingerprint; the unit tests compare the catalog against this file."""
    path = folder / MANIFEST
    manifest = SchemaCatalog.from_folder(folder).manifest()
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m schemas.evolve", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("freeze", help="copy a message's current version into history/").add_argument("name")
    commands.add_parser("manifest", help="rewrite fingerprints.json from the schema files")
    args = parser.parse_args(argv)
    path = freeze(args.name) if args.command == "freeze" else write_manifest()
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
