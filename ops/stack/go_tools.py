"""Go programs the stack builds from source (Jaeger, SeaweedFS, Toxiproxy): each from a small pinned tool
module under ops/ (a go.mod with a `tool` directive and its go.sum), with Go's caches under the trialog
cache, once; later calls reuse the binary."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from ops.paths import Paths
from streams.errors import StackError


def go_command(what: str) -> str:
    """The `go` command, to build `what` (for the error when there is none)."""
    # Go's official tarball lives in /usr/local/go, which is not always on a non-login PATH.
    for candidate in (shutil.which("go"), "/usr/local/go/bin/go"):
        if candidate and Path(candidate).exists():
            return candidate
    raise StackError(f"Go is not installed, so {what} cannot be built", "install Go 1.26+ and retry")


def pinned_version(module_dir: Path, module: str) -> str:
    """The version of `module` that the tool module in `module_dir` requires (its go.mod)."""
    found = re.search(rf"^\s*{re.escape(module)} (v\S+)", (module_dir / "go.mod").read_text(), re.M)
    if found is None:
        raise StackError(f"{module_dir / 'go.mod'} does not require {module}", "restore it from git")
    return found.group(1)


def build(
    paths: Paths,
    what: str,
    binary_name: str,
    module_dir: Path,
    package: str,
    extra: Sequence[str] = (),
) -> Path:
    """`~/.cache/trialog/bin/<binary_name>`, built once with `go build` in `module_dir` (read-only module
    graph: the go.sum there is the whole supply chain); `extra` are more `go build` flags."""
    target = paths.cached("bin") / binary_name
    if target.exists():
        return target
    go_cache = paths.cached("go")
    env = {
        **os.environ,
        "GOPATH": str(go_cache / "path"),
        "GOMODCACHE": str(go_cache / "mod"),
        "GOCACHE": str(go_cache / "build"),
        "GOFLAGS": "-mod=readonly",
        "CGO_ENABLED": "0",
    }
    partial = target.with_suffix(".partial")
    argv = [go_command(what), "build", "-trimpath", *extra, "-o", str(partial), package]
    result = subprocess.run(argv, cwd=module_dir, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise StackError(
            f"building {what} failed:\n{result.stderr.strip()[-1500:]}",
            "check that the Go module proxy is reachable (go env GOPROXY)",
        )
    partial.rename(target)  # only a finished build is ever found by the check above
    return target
