"""The reaper's decision and the owner identity it rests on: which sandboxes are orphans, which not."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sandbox_agent.docker_backend import SANDBOX_LABEL
from sandbox_agent.owner import OWNER_LABEL, Liveness, Owner, ProcProcesses, current, judge, owner_labels
from sandbox_agent.reaper import Labelled, Reaper, orphans

HERE = Owner("host-a", "b00t0000cafe", "4026531836", 100, 5000)


class FakeProcesses:
    def __init__(self, running: dict[int, int]) -> None:
        self.running = running  # pid -> start time

    def start_time(self, pid: int) -> int | None:
        return self.running.get(pid)


def sandbox(container_id: str, owner: Owner | str | None) -> Labelled:
    labels = {SANDBOX_LABEL: "1"}
    if owner is not None:
        labels[OWNER_LABEL] = owner if isinstance(owner, str) else owner.text()
    return Labelled(container_id, labels)


def peer(pid: int, start: int, **changes: str) -> Owner:
    fields = {"host": HERE.host, "boot": HERE.boot, "pidns": HERE.pidns, **changes}
    return Owner(fields["host"], fields["boot"], fields["pidns"], pid, start)


@pytest.mark.unit
def test_an_owner_round_trips_through_its_text_even_with_dots_in_the_host_name() -> None:
    owner = peer(7, 123, host="node-1.example.org")
    assert Owner.parse(owner.text()) == owner


@pytest.mark.unit
@pytest.mark.parametrize("text", ["", "1", "12345", "a.b.c.d.e", "1.2.boot.ns.", "1.2.b-t.3.h", "x.2.b.3.h"])
def test_a_label_someone_else_wrote_is_no_owner(text: str) -> None:
    assert Owner.parse(text) is None


@pytest.mark.unit
def test_a_reused_pid_does_not_keep_a_dead_owner_alive() -> None:
    processes = FakeProcesses({200: 9999})  # pid 200 runs, but started after the owner did
    assert judge(peer(200, 6000), HERE, processes) is Liveness.DEAD
    assert judge(peer(200, 9999), HERE, processes) is Liveness.ALIVE


@pytest.mark.unit
def test_owners_of_an_earlier_boot_are_dead_and_other_hosts_or_namespaces_are_not_judged() -> None:
    processes = FakeProcesses({200: 6000})
    assert judge(peer(200, 6000, boot="0ldb00t00000"), HERE, processes) is Liveness.DEAD
    assert judge(peer(200, 1, host="host-b"), HERE, processes) is Liveness.UNKNOWN
    assert judge(peer(200, 1, pidns="4026532000"), HERE, processes) is Liveness.UNKNOWN


@pytest.mark.unit
def test_orphans_are_the_sandboxes_of_dead_owners_only() -> None:
    live, dead, reused = peer(200, 6000), peer(300, 7000), peer(400, 8000)
    processes = FakeProcesses({200: 6000, 400: 8001})
    containers = [
        sandbox("live", live),
        sandbox("dead", dead),
        sandbox("reused", reused),
        sandbox("mine", HERE),
        sandbox("elsewhere", peer(300, 7000, host="host-b")),
        sandbox("no-owner", None),
        sandbox("garbled", "not an owner"),
        Labelled("kafka", {OWNER_LABEL: dead.text()}),  # not a sandbox: never touched
    ]
    assert orphans(containers, HERE, processes) == ["dead", "reused"]


class FakeContainers:
    def __init__(self, containers: list[Labelled], failing: set[str] | None = None) -> None:
        self.containers = containers
        self.failing = failing or set()

    def sandboxes(self) -> list[Labelled]:
        return list(self.containers)

    def remove(self, container_id: str) -> None:
        if container_id in self.failing:
            raise OSError("engine said no")
        self.containers = [c for c in self.containers if c.id != container_id]


@pytest.mark.unit
def test_a_sweep_removes_orphans_and_a_failed_removal_is_retried_by_the_next() -> None:
    containers = FakeContainers([sandbox("a", peer(300, 1)), sandbox("b", peer(301, 1))], failing={"b"})
    reaper = Reaper(containers, here=HERE, processes=FakeProcesses({}))
    assert reaper.sweep() == ["a"]
    containers.failing.clear()
    assert reaper.sweep() == ["b"]
    assert containers.containers == []


@pytest.mark.unit
def test_a_process_that_cannot_be_named_reaps_nothing() -> None:
    containers = FakeContainers([sandbox("a", peer(300, 1))])
    reaper = Reaper(containers, processes=FakeProcesses({}))
    reaper.here = None
    assert reaper.sweep() == []
    assert len(containers.containers) == 1


@pytest.mark.unit
def test_this_process_is_alive_by_its_own_judgement_and_a_finished_child_is_dead() -> None:
    me = current()
    assert me is not None
    assert owner_labels() == {OWNER_LABEL: me.text()}
    processes = ProcProcesses()
    assert judge(me, me, processes) is Liveness.ALIVE
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        start = processes.start_time(child.pid)
        assert start is not None
        owner = peer(child.pid, start, host=me.host, boot=me.boot, pidns=me.pidns)
        assert judge(owner, me, processes) is Liveness.ALIVE
        child.kill()
        child.wait()
        assert judge(owner, me, processes) is Liveness.DEAD
    finally:
        child.kill()
        child.wait()


@pytest.mark.unit
def test_a_zombie_runs_nothing(tmp_path: Path) -> None:
    stat = tmp_path / "77" / "stat"
    stat.parent.mkdir()
    stat.write_text("77 (odd) name) Z 1 77 77 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 4242 0 0\n")
    assert ProcProcesses(tmp_path).start_time(77) is None
    stat.write_text("77 (odd) name) S 1 77 77 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 4242 0 0\n")
    assert ProcProcesses(tmp_path).start_time(77) == 4242
