"""Where trialog keeps things: run-time state under one home folder, downloads and builds under one cache."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Paths:
    """`home` holds what a running stack writes (pids, logs, data); `cache` holds what can be rebuilt."""

    home: Path
    cache: Path

    @classmethod
    def from_env(cls) -> Paths:
        home = Path(os.environ.get("TRIALOG_HOME", REPO_ROOT / ".trialog"))
        cache = Path(os.environ.get("TRIALOG_CACHE", Path.home() / ".cache" / "trialog"))
        return cls(home=home.resolve(), cache=cache.resolve())

    def component(self, name: str) -> Path:
        path = self.home / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    @property
    def objects(self) -> Path:
        """The default object store (snapshots, task bundles, large payloads): one folder per stack."""
        return self.component("objects")

    def cached(self, name: str) -> Path:
        path = self.cache / name
        path.mkdir(parents=True, exist_ok=True)
        return path
