"""Starting the test S3 server (SeaweedFS) when a port it was given is taken before it binds it: the CI
failure of 2026-12-07 (the volume server could not listen, the whole `weed server` exited, and the fixture
waited 90 s on a dead process, then failed twelve tests)."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from ops import process
from ops.paths import Paths
from ops.stack import seaweedfs
from ops.stack.seaweedfs import SeaweedExited, SeaweedPorts


def _ports_with_volume(port: int) -> SeaweedPorts:
    free = SeaweedPorts(*process.free_ports(8))
    return dataclasses.replace(free, volume=port)


def test_a_server_that_loses_a_port_fails_at_once_with_the_reason(
    stack_paths: Paths, closed_port: Callable[[], int], tmp_path: Path
) -> None:
    # Bound and not listening: the start's own check that the port is free passes, and the server's bind
    # fails as if a connection had taken the port meanwhile.
    taken = closed_port()
    began = time.monotonic()
    with pytest.raises(SeaweedExited) as caught:
        seaweedfs.start(stack_paths, tmp_path / "weed", _ports_with_volume(taken), "trialog-test")
    assert time.monotonic() - began < seaweedfs.START_TIMEOUT_S / 3  # not the whole start timeout
    assert caught.value.lost_a_port, str(caught.value)
    assert str(taken) in str(caught.value)  # the fatal line names the port, not a goroutine's stack


def test_the_test_server_starts_again_on_other_ports_when_one_is_taken(
    stack_paths: Paths, closed_port: Callable[[], int], monkeypatch: pytest.MonkeyPatch
) -> None:
    taken = closed_port()
    chosen: list[SeaweedPorts] = []
    free = SeaweedPorts.free

    def first_one_taken() -> SeaweedPorts:
        chosen.append(_ports_with_volume(taken) if not chosen else free())
        return chosen[-1]

    monkeypatch.setattr(SeaweedPorts, "free", staticmethod(first_one_taken))
    home = stack_paths.component("test-seaweedfs") / uuid.uuid4().hex[:8]
    server = seaweedfs.start_on_free_ports(stack_paths, home, "trialog-test")
    try:
        assert len(chosen) == 2 and server.ports == chosen[1] and server.ports.volume != taken
        assert process.running_pid(server.pid_file) is not None
    finally:
        seaweedfs.remove(server)
