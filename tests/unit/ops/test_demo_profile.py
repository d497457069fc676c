"""ops.demo.profile: the grouping of a process tree, the per-thread delta math on a fake /proc written at
successive instants (samples taken by hand, no thread timing), and one read of the real /proc."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ops.demo.profile import (
    DEMO,
    DOCKER_ENGINE,
    JAEGER,
    KAFKA,
    OTHER,
    SANDBOX_CONTAINERS,
    UNATTRIBUTED,
    MachineCounters,
    ProcessEntry,
    Profile,
    Profiler,
    Snapshot,
    TaskCounters,
    classify,
    profile_of,
    read_snapshot,
)

CLK_TCK = 100
DEMO_PID = 100


def entry(ppid: int, comm: str, cmdline: str) -> ProcessEntry:
    return ProcessEntry(ppid=ppid, comm=comm, cmdline=cmdline)


def test_classify_a_demo_process_tree() -> None:
    worker = "/venv/bin/python -m ops.cli worker"
    table = {
        1: entry(0, "systemd", "/sbin/init"),
        DEMO_PID: entry(1, "trialog", "/venv/bin/python /venv/bin/trialog demo"),
        200: entry(DEMO_PID, "python", f"{worker} rollout --run r1 --otlp-endpoint http://jaeger:4317"),
        201: entry(200, "sh", "sh -c nproc"),
        202: entry(201, "nproc", "nproc"),
        210: entry(DEMO_PID, "python", f"{worker} learner --run r1 --bootstrap localhost:9092"),
        220: entry(DEMO_PID, "trialog", "/venv/bin/python /venv/bin/trialog worker guard --run r1"),
        230: entry(DEMO_PID, "docker", "docker ps"),  # the demo's own child
        300: entry(1, "java", "/jdk/bin/java -Xmx1g -cp /cache/kafka/libs/* kafka.Kafka server.properties"),
        301: entry(1, "java", "/jdk/bin/java -jar unrelated.jar"),
        400: entry(1, "jaeger", "/cache/jaeger/jaeger --config x.yaml"),
        500: entry(1, "dockerd", "dockerd --data-root /home/t/.trialog/docker"),
        501: entry(500, "containerd", "containerd --config /var/run/docker/containerd/containerd.toml"),
        502: entry(500, "docker-proxy", "/usr/bin/docker-proxy -proto tcp"),
        600: entry(1, "containerd-shim", "/usr/bin/containerd-shim-runc-v2 -namespace moby -id abc"),
        601: entry(600, "python3", "python3 -m pytest -q tests"),
        602: entry(601, "python3", "python3 solution.py"),
        610: entry(600, "java", "java -cp /opt/kafka/libs/* kafka.Kafka"),  # a Kafka container: still Kafka
        700: entry(1, "sshd", "sshd: /usr/sbin/sshd -D"),
        800: entry(801, "a", "a"),  # a ppid cycle, as pid reuse mid-read can show: must end, as "other"
        801: entry(800, "b", "b"),
    }
    assert classify(table, DEMO_PID) == {
        1: OTHER,
        DEMO_PID: DEMO,
        200: "rollout",
        201: "rollout",
        202: "rollout",
        210: "learner",
        220: "guard",
        230: DEMO,
        300: KAFKA,
        301: OTHER,
        400: JAEGER,
        500: DOCKER_ENGINE,
        501: DOCKER_ENGINE,
        502: DOCKER_ENGINE,
        600: DOCKER_ENGINE,
        601: SANDBOX_CONTAINERS,
        602: SANDBOX_CONTAINERS,
        610: KAFKA,
        700: OTHER,
        800: OTHER,
        801: OTHER,
    }


@dataclass(frozen=True)
class FakeThread:
    cpu_s: float
    wait_s: float | None = 0.0  # None: no schedstat, the counters are only in the thread's stat


@dataclass(frozen=True)
class FakeProcess:
    ppid: int
    comm: str
    argv: tuple[str, ...]
    started_s: float
    threads: Mapping[int, FakeThread] = field(default_factory=dict)


@dataclass(frozen=True)
class FakeCpu:
    """The `cpu` line of /proc/stat, in seconds."""

    user: float = 0.0
    system: float = 0.0
    idle: float = 0.0
    steal: float = 0.0


def _stat_line(pid: int, comm: str, ppid: int, *, cpu_s: float, started_s: float) -> str:
    fields = ["0"] * 44  # the fields after the comm: field n of proc(5) is fields[n - 3]
    fields[0], fields[1] = "S", str(ppid)
    fields[11], fields[12] = str(round(cpu_s * CLK_TCK * 0.75)), str(round(cpu_s * CLK_TCK * 0.25))
    fields[19] = str(round(started_s * CLK_TCK))
    return f"{pid} ({comm}) {' '.join(fields)}\n"


def write_proc(root: Path, *, uptime_s: float, cpu: FakeCpu, processes: Mapping[int, FakeProcess]) -> None:
    """A /proc as `read_snapshot` reads it, replacing whatever `root` held: the previous instant's
    processes that are not in `processes` are gone."""
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()
    (root / "uptime").write_text(f"{uptime_s:.2f} 1.00\n")
    jiffies = [cpu.user, 0, cpu.system, cpu.idle, 0, 0, 0, cpu.steal, 0, 0]
    line = " ".join(str(round(seconds * CLK_TCK)) for seconds in jiffies)
    (root / "stat").write_text(f"cpu  {line}\ncpu0 {line}\nintr 0\nctxt 0\n")
    for pid, process in processes.items():
        directory = root / str(pid)
        (directory / "task").mkdir(parents=True)
        main_cpu_s = process.threads[pid].cpu_s if pid in process.threads else 0.0
        stat = _stat_line(pid, process.comm, process.ppid, cpu_s=main_cpu_s, started_s=process.started_s)
        (directory / "stat").write_text(stat)
        (directory / "cmdline").write_bytes(b"".join(argument.encode() + b"\0" for argument in process.argv))
        for tid, thread in process.threads.items():
            task = directory / "task" / str(tid)
            task.mkdir()
            task_stat = _stat_line(tid, process.comm, process.ppid, cpu_s=thread.cpu_s, started_s=0.0)
            (task / "stat").write_text(task_stat)
            if thread.wait_s is not None:
                cpu_ns, wait_ns = round(thread.cpu_s * 1e9), round(thread.wait_s * 1e9)
                (task / "schedstat").write_text(f"{cpu_ns} {wait_ns} 42\n")


def clock_at(*instants: float) -> Callable[[], float]:
    """A clock that gives `instants` in turn, then stays at the last one."""
    remaining = list(instants)

    def now() -> float:
        return remaining.pop(0) if len(remaining) > 1 else remaining[0]

    return now


def profiler_on(root: Path, *instants: float) -> Profiler:
    return Profiler(proc=root, clock=clock_at(*instants), clk_tck=CLK_TCK, cores=2, demo_pid=DEMO_PID)


ROLLOUT = ("python", "-m", "ops.cli", "worker", "rollout", "--run", "r1")
LEARNER = ("python", "-m", "ops.cli", "worker", "learner", "--run", "r1")


def test_interval_deltas_per_thread_and_what_was_born_in_between(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    write_proc(
        proc,
        uptime_s=100.0,
        cpu=FakeCpu(user=50.0, system=10.0, idle=100.0),
        processes={
            DEMO_PID: FakeProcess(1, "trialog", ("trialog", "demo"), 10.0, {DEMO_PID: FakeThread(3.0)}),
            200: FakeProcess(
                DEMO_PID, "python", ROLLOUT, 20.0, {200: FakeThread(10.0, 1.0), 201: FakeThread(2.0, 0.5)}
            ),
        },
    )
    profiler = profiler_on(proc, 1000.0, 1010.0)
    profiler.sample()
    write_proc(
        proc,
        uptime_s=110.0,
        cpu=FakeCpu(user=58.0, system=12.0, idle=110.0),
        processes={
            DEMO_PID: FakeProcess(1, "trialog", ("trialog", "demo"), 10.0, {DEMO_PID: FakeThread(4.0)}),
            200: FakeProcess(
                DEMO_PID,
                "python",
                ROLLOUT,
                20.0,
                # 200 and 201 count their increase; 202 is a thread born since: all of it counts.
                {200: FakeThread(14.0, 2.0), 201: FakeThread(3.0, 0.5), 202: FakeThread(0.5, 0.25)},
            ),
            # Started after the first sample (105 s > 100 s since boot): its start-up is the phase's.
            300: FakeProcess(DEMO_PID, "python", LEARNER, 105.0, {300: FakeThread(2.0, 0.0)}),
            # Older than the first sample but not in it: counts from now on, not its 7 s of history.
            400: FakeProcess(1, "a) (weird", ("sleeper",), 50.0, {400: FakeThread(7.0, 1.0)}),
        },
    )
    profiler.sample()

    profile = profiler.stop()  # a last sample of the unchanged tree adds nothing

    assert profile.wall_s == pytest.approx(10.0)
    assert profile.cores == 2
    by_name = {group.name: group for group in profile.groups}
    assert [group.name for group in profile.groups] == ["rollout", "learner", DEMO, OTHER]
    assert by_name["rollout"].cpu_s == pytest.approx(4.0 + 1.0 + 0.5)
    assert by_name["rollout"].runqueue_wait_s == pytest.approx(1.0 + 0.0 + 0.25)
    assert by_name["rollout"].cpu_cores == pytest.approx(0.55)
    assert by_name["rollout"].runnable_share == pytest.approx((5.5 + 1.25) / 10.0)
    assert by_name["learner"].cpu_s == pytest.approx(2.0)
    assert by_name[DEMO].cpu_s == pytest.approx(1.0)
    assert by_name[OTHER].cpu_s == 0.0
    assert profile.attributed_cpu_s == pytest.approx(8.5)
    assert profile.machine_busy_cpu_s == pytest.approx(10.0)
    assert profile.unattributed_cpu_s == pytest.approx(1.5)
    assert profile.machine_idle_share == pytest.approx(0.5)


def test_read_snapshot_parses_the_tables(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    write_proc(
        proc,
        uptime_s=100.0,
        cpu=FakeCpu(user=1.0),
        processes={400: FakeProcess(1, "a) (weird", ("sleep", "60"), 50.0, {400: FakeThread(7.0, 1.0)})},
    )
    snapshot = read_snapshot(proc, clock=lambda: 5.0, clk_tck=CLK_TCK)
    assert snapshot.at_s == 5.0
    assert snapshot.uptime_s == 100.0
    assert snapshot.processes == {
        400: ProcessEntry(ppid=1, comm="a) (weird", cmdline="sleep 60", started_s=50.0)
    }
    assert snapshot.tasks == {(400, 400): TaskCounters(cpu_s=7.0, runqueue_wait_s=1.0)}


def test_a_vanished_process_keeps_its_last_counters(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    demo = FakeProcess(1, "trialog", ("trialog", "demo"), 10.0, {DEMO_PID: FakeThread(1.0)})

    def at(uptime_s: float, busy_s: float, processes: Mapping[int, FakeProcess]) -> None:
        write_proc(proc, uptime_s=uptime_s, cpu=FakeCpu(user=busy_s, idle=100.0), processes=processes)

    at(
        100.0,
        10.0,
        {DEMO_PID: demo, 200: FakeProcess(DEMO_PID, "python", ROLLOUT, 20.0, {200: FakeThread(1.0)})},
    )
    profiler = profiler_on(proc, 0.0, 2.0, 4.0)
    profiler.sample()
    at(
        102.0,
        13.0,
        {DEMO_PID: demo, 200: FakeProcess(DEMO_PID, "python", ROLLOUT, 20.0, {200: FakeThread(3.0)})},
    )
    profiler.sample()
    at(104.0, 14.0, {DEMO_PID: demo})  # the rollout worker exited: what it used after 102 s is not seen
    profile = profiler.stop()

    rollout = next(group for group in profile.groups if group.name == "rollout")
    assert rollout.cpu_s == pytest.approx(2.0)
    assert rollout.runqueue_wait_s == pytest.approx(0.0)
    assert profile.machine_busy_cpu_s == pytest.approx(4.0)
    assert profile.unattributed_cpu_s == pytest.approx(2.0)


def test_a_reused_pid_counts_as_the_new_process_it_is(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    write_proc(
        proc,
        uptime_s=100.0,
        cpu=FakeCpu(),
        processes={200: FakeProcess(1, "python", ROLLOUT, 20.0, {200: FakeThread(1.0)})},
    )
    profiler = profiler_on(proc, 0.0, 2.0)
    profiler.sample()
    # Pid 200 exited and a learner born at 101 s got the same pid and already used more than 1 s.
    write_proc(
        proc,
        uptime_s=102.0,
        cpu=FakeCpu(user=5.0),
        processes={200: FakeProcess(1, "python", LEARNER, 101.0, {200: FakeThread(4.0)})},
    )
    profile = profiler.stop()
    assert {group.name: group.cpu_s for group in profile.groups} == {"learner": pytest.approx(4.0)}


def test_a_reused_tid_counts_as_the_new_thread_it_is(tmp_path: Path) -> None:
    proc = tmp_path / "proc"

    def at(uptime_s: float, threads: Mapping[int, FakeThread]) -> None:
        processes = {200: FakeProcess(1, "python", ROLLOUT, 20.0, threads)}
        write_proc(proc, uptime_s=uptime_s, cpu=FakeCpu(user=uptime_s), processes=processes)

    at(100.0, {200: FakeThread(1.0), 201: FakeThread(3.0, 1.0)})
    profiler = profiler_on(proc, 0.0, 2.0)
    profiler.sample()
    # Thread 201 exited and a thread born since got its tid: its counters went back, all of them are new.
    at(102.0, {200: FakeThread(1.5), 201: FakeThread(0.25, 0.5)})
    (rollout,) = profiler.stop().groups
    assert rollout.cpu_s == pytest.approx(0.5 + 0.25)
    assert rollout.runqueue_wait_s == pytest.approx(0.5)


def test_without_schedstat_cpu_comes_from_stat_and_the_wait_is_unknown(tmp_path: Path) -> None:
    proc = tmp_path / "proc"

    def at(uptime_s: float, cpu_s: float) -> None:
        threads = {200: FakeThread(cpu_s, wait_s=None)}
        processes = {200: FakeProcess(1, "python", ROLLOUT, 20.0, threads)}
        write_proc(proc, uptime_s=uptime_s, cpu=FakeCpu(user=cpu_s, idle=10.0), processes=processes)

    at(100.0, 1.0)
    profiler = profiler_on(proc, 0.0, 4.0)
    profiler.sample()
    at(104.0, 3.0)
    profile = profiler.stop()

    (rollout,) = profile.groups
    assert rollout.cpu_s == pytest.approx(2.0)
    assert rollout.runqueue_wait_s is None
    assert rollout.runnable_share is None
    assert "runnable n/a" in profile.lines()[0]
    assert profile.to_json()["groups"]["rollout"]["runnable_share"] is None


def _snapshot(at_s: float, busy_s: float, steal_s: float, idle_s: float) -> Snapshot:
    machine = MachineCounters(busy_s=busy_s, steal_s=steal_s, idle_s=idle_s)
    return Snapshot(at_s=at_s, uptime_s=at_s, machine=machine, processes={}, tasks={})


def _a_profile() -> Profile:
    usage = {
        DEMO: TaskCounters(cpu_s=1.0, runqueue_wait_s=0.5),
        "rollout": TaskCounters(cpu_s=6.6, runqueue_wait_s=1.2),
        KAFKA: TaskCounters(cpu_s=2.4, runqueue_wait_s=3.0),
    }
    first = _snapshot(0.0, busy_s=100.0, steal_s=1.0, idle_s=50.0)
    last = _snapshot(10.0, busy_s=114.0, steal_s=2.0, idle_s=56.0)
    return profile_of(first, last, usage, cores=2)


def test_the_unattributed_remainder_is_busy_time_no_sampled_thread_used() -> None:
    profile = _a_profile()
    assert profile.machine_busy_cpu_s == pytest.approx(14.0)
    assert profile.machine_steal_s == pytest.approx(1.0)
    assert profile.attributed_cpu_s == pytest.approx(10.0)
    # 14 s busy, of which 1 s the hypervisor's and 10 s the sampled threads'.
    assert profile.unattributed_cpu_s == pytest.approx(3.0)
    assert profile.machine_idle_share == pytest.approx(6.0 / 20.0)


def test_lines_and_json() -> None:
    profile = _a_profile()
    lines = profile.lines()
    assert [line.split(" ")[0] for line in lines] == [
        "rollout",
        "kafka",
        "demo",
        "short-lived/unattributed",
        "machine",
    ]
    assert "0.66 cores, runnable 78% (6.6 cpu s, 1.2 s on a run queue)" in lines[0]
    assert "0.24 cores, runnable 54%" in lines[1]
    assert lines[3].startswith(UNATTRIBUTED)
    assert " 0.30 cores (3.0 cpu s: processes between samples" in lines[3]
    assert "1.40 of 2 cores busy over 10 s, idle 30%, 1.0 s stolen by the hypervisor" in lines[4]
    # the numbers line up in one column
    assert len({line.index(" cores") for line in lines[:4]}) == 1

    document = json.loads(json.dumps(profile.to_json()))
    assert list(document["groups"]) == ["rollout", KAFKA, DEMO]
    assert document["groups"]["rollout"] == {
        "cpu_s": 6.6,
        "runqueue_wait_s": 1.2,
        "cpu_cores": 0.66,
        "runnable_share": 0.78,
    }
    assert document["wall_s"] == 10.0
    assert document["cores"] == 2
    assert document["unattributed_cpu_s"] == 3.0
    assert document["machine_idle_share"] == 0.3


def test_a_with_block_that_raises_leaves_no_profile(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    write_proc(proc, uptime_s=100.0, cpu=FakeCpu(), processes={})
    profiler = profiler_on(proc, 0.0, 1.0)
    with pytest.raises(KeyError), profiler:
        raise KeyError("the phase failed")
    with pytest.raises(RuntimeError, match="not been stopped"):
        _ = profiler.profile


def _burn_cpu(seconds: float) -> None:
    deadline = time.process_time() + seconds
    while time.process_time() < deadline:
        sum(range(1000))


def test_the_real_proc_sees_this_process_as_the_demo() -> None:
    snapshot = read_snapshot(Path("/proc"), clock=time.monotonic, clk_tck=os.sysconf("SC_CLK_TCK"))
    assert classify(snapshot.processes, os.getpid())[os.getpid()] == DEMO
    assert (os.getpid(), os.getpid()) in snapshot.tasks

    with Profiler(interval_s=0.02) as profiler:
        _burn_cpu(0.1)
    profile = profiler.profile

    demo = next(group for group in profile.groups if group.name == DEMO)
    assert demo.cpu_s >= 0.05  # schedstat counts ns; the 0.1 s burnt is this process's
    assert profile.wall_s > 0
    assert profile.machine_busy_cpu_s >= 0
    assert profile.cores == os.cpu_count()
