"""`DockerBackend`'s snapshot when the workspace listing comes back garbled: one more listing, then a
`SandboxError` (what the sandbox worker answers as a lost sandbox), never a bare `ValueError`.

The two-process suite beside a chaos run (2026-12-08, load 15-20) saw a listing through `docker exec` end
with exit code 0 or 1 and no output at all, not even the clock line `date` prints first."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sandbox_agent.backend import Sandbox
from sandbox_agent.docker_backend import DockerBackend
from sandbox_agent.errors import SandboxError
from sandbox_agent.limits import SandboxSpec
from sandbox_agent.listing import LISTING_ARGV
from schemas.blobs import LocalObjectStore

EMPTY_WORKSPACE = b"1796038706.0534962460\n"  # the clock line, then no entries


class Listings(DockerBackend):
    """A backend whose own commands answer from a script of (exit code, stdout) for each listing."""

    def __init__(self, objects: Path, answers: list[tuple[int, bytes]]) -> None:
        super().__init__(SimpleNamespace(api=None), LocalObjectStore(objects))  # type: ignore[arg-type]
        self.answers = answers
        self.listed = 0

    def _run(self, sandbox: Sandbox, argv: Sequence[str], **_: Any) -> tuple[int, bytes, bytes]:
        assert list(argv) == LISTING_ARGV
        self.listed += 1
        code, out = self.answers.pop(0)
        return code, out, b""


SANDBOX = Sandbox("c0ffee", SandboxSpec("trialog-sandbox:test"))


def test_a_listing_that_lost_its_output_is_taken_again(tmp_path: Path) -> None:
    backend = Listings(tmp_path, [(0, b""), (0, EMPTY_WORKSPACE)])
    twin = Listings(tmp_path, [(0, EMPTY_WORKSPACE)])
    assert backend.snapshot(SANDBOX) == twin.snapshot(SANDBOX)  # the empty workspace's snapshot
    assert backend.listed == 2


def test_a_listing_garbled_twice_is_a_sandbox_error(tmp_path: Path) -> None:
    backend = Listings(tmp_path, [(1, b""), (0, b"not a clock\n")])
    with pytest.raises(SandboxError, match="listing the workspace gave output that does not parse"):
        backend.snapshot(SANDBOX)
    assert backend.listed == 2
