"""compose-check, the validator the tests run on `ops/deploy/compose.yaml`: a small Go program of this
repository (`ops/compose_check/main.go`) over compose-go, the library `docker compose` itself reads compose
files with (the Compose Specification's JSON schema, interpolation, then the loader's checks). This
project's Docker engine is Debian's docker.io, without the compose plugin; building the reader it uses is
the closest real check of the file. Built like the stack's other Go programs, into the cache, once per
version of its source."""

from __future__ import annotations

import hashlib
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ops.paths import REPO_ROOT, Paths
from ops.stack import go_tools

MODULE = "github.com/compose-spec/compose-go/v2"
SOURCE_DIR = REPO_ROOT / "ops" / "compose_check"  # main.go, and the go.mod/go.sum that pin compose-go


def version() -> str:
    """The compose-go version the program is built against."""
    return go_tools.pinned_version(SOURCE_DIR, MODULE)


def binary(paths: Paths) -> Path:
    """Build `compose-check` once per version of its source (the name carries a hash of it)."""
    digest = hashlib.sha256()
    for name in ("main.go", "go.mod", "go.sum"):
        digest.update((SOURCE_DIR / name).read_bytes())
    name = f"compose-check-{version()}-{digest.hexdigest()[:12]}"
    return go_tools.build(paths, f"compose-check (compose-go {version()})", name, SOURCE_DIR, ".")


@dataclass(frozen=True)
class Checked:
    """What compose-check said of a file: the project it loaded, or the loader's error."""

    project: dict[str, Any] | None
    error: str


def check(paths: Paths, compose_file: Path, env: dict[str, str] | None = None) -> Checked:
    """Load `compose_file` as `docker compose` would; `env` is the environment it interpolates from."""
    result = subprocess.run(
        [str(binary(paths)), str(compose_file)], capture_output=True, text=True, env=env or {}, timeout=60
    )
    if result.returncode != 0:
        return Checked(None, result.stderr.strip())
    return Checked(json.loads(result.stdout), "")
