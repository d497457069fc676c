"""Where a phase's CPU minutes go: for each group of processes, the CPU seconds it used and the share of
the wall time it was runnable (on a CPU or waiting on a run queue), sampled from /proc.

What it measures. Linux keeps, for every thread, the nanoseconds it ran on a CPU and the nanoseconds it
waited on a run queue while runnable (/proc/<pid>/task/<tid>/schedstat). A `Profiler` reads them for every
thread of every process every `interval_s`, and adds each thread's increase since the previous sample to
its process's group (`classify`: the worker kinds, Kafka, Jaeger, the Docker engine, the sandbox
containers, the demo process itself, the rest). Per group it reports

- the CPU share in cores, cpu s / wall s: 0.66 cores is a third of a 2-core machine;
- the runnable share, (cpu s + run-queue wait s) / wall s: how much of the phase the group had work ready.
  Above 100 % means more than one of its threads was runnable on average; a runnable share well above the
  CPU share means the group waited for a CPU rather than for work.

The machine's own busy CPU seconds (/proc/stat) cover everything that ran, so what the sampled threads do
not account for is reported as "short-lived/unattributed".

Limits.
- A process that starts and exits between two samples (a docker CLI call, a test run in a sandbox) is
  never seen: its CPU is only in the unattributed remainder. A thread that exits keeps the counters of its
  last sample; what it used after that is in the remainder too, as is the CPU the kernel spends on
  interrupts outside any thread.
- Threads are read one by one because /proc/<pid>/schedstat is the main thread's alone: a JVM's or
  torch's worker threads would be missed.
- Only the processes of the profiler's PID namespace are visible (those of a hidepid /proc neither), while
  /proc/stat counts the whole machine: what the profiler cannot see lands in the remainder.
- A kernel without schedstat (no CONFIG_SCHED_INFO) gives utime+stime instead, in clock ticks, and no
  run-queue wait: the runnable share is then unknown (None, "n/a").
- A process belongs to the group it has at each sample: one that execs into something else moves.
- The profiler's own sampling runs in a thread of the demo process, so its cost is in "demo (scheduler)".
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

DEMO = "demo (scheduler)"
KAFKA = "kafka"
JAEGER = "jaeger"
DOCKER_ENGINE = "docker engine"
SANDBOX_CONTAINERS = "sandbox containers"
OTHER = "other"
UNATTRIBUTED = "short-lived/unattributed"

# `python -m ops.cli worker KIND ...` (ops.run_workers, ops.demo.run) or `trialog worker KIND ...`; a search,
# not argv positions, so a process that rewrote its command line into one string still matches.
_WORKER_COMMAND = re.compile(r"(?:\bops\.cli|\btrialog) worker ([a-z][\w-]*)")
_DOCKER_ENGINE_COMMS = frozenset({"dockerd", "containerd"})
# containerd-shim-runc-v2 shows as "containerd-shim": the kernel keeps 15 characters of a comm.
_SHIM_COMM = "containerd-shim"

_NS_PER_S = 1e9


@dataclass(frozen=True)
class ProcessEntry:
    ppid: int
    comm: str
    cmdline: str  # the arguments joined by spaces; empty for kernel threads and zombies
    started_s: float = 0.0  # since boot (/proc/<pid>/stat starttime): tells a process born between samples


ProcessTable = Mapping[int, ProcessEntry]


def _own_groups(pid: int, entry: ProcessEntry, demo_pid: int) -> tuple[str, str] | None:
    """(the group of the process, the group its descendants inherit) when the process itself says which;
    checked in this order because a worker's options may name Jaeger's endpoint."""
    if pid == demo_pid:
        return DEMO, DEMO
    if worker := _WORKER_COMMAND.search(entry.cmdline):
        return worker.group(1), worker.group(1)
    cmdline = entry.cmdline.lower()
    if entry.comm == "java" and "kafka" in cmdline:
        return KAFKA, KAFKA
    if "jaeger" in cmdline:
        return JAEGER, JAEGER
    if entry.comm.startswith(_SHIM_COMM):
        # A shim is the engine's; what runs under it is a container's own work.
        return DOCKER_ENGINE, SANDBOX_CONTAINERS
    if entry.comm in _DOCKER_ENGINE_COMMS:
        return DOCKER_ENGINE, DOCKER_ENGINE
    return None


def group_of(pid: int, table: ProcessTable, demo_pid: int) -> str:
    """The group of `pid`: its own when its command says, else the one its nearest such ancestor hands
    down (a worker's child is that worker's, a container's process is the sandbox containers'), else
    "other"."""
    if own := _own_groups(pid, table[pid], demo_pid):
        return own[0]
    seen = {pid}
    ancestor = table[pid].ppid
    # `seen` guards against a ppid cycle, which a table read while pids are reused can show.
    while ancestor in table and ancestor not in seen:
        if inherited := _own_groups(ancestor, table[ancestor], demo_pid):
            return inherited[1]
        seen.add(ancestor)
        ancestor = table[ancestor].ppid
    return OTHER


def classify(table: ProcessTable, demo_pid: int) -> dict[int, str]:
    """The group of every process of `table`."""
    return {pid: group_of(pid, table, demo_pid) for pid in table}


@dataclass(frozen=True)
class TaskCounters:
    """What one thread has used since it started."""

    cpu_s: float
    runqueue_wait_s: float | None  # None where the kernel has no schedstat

    def minus(self, earlier: TaskCounters) -> TaskCounters:
        return TaskCounters(self.cpu_s - earlier.cpu_s, _minus(self.runqueue_wait_s, earlier.runqueue_wait_s))

    def plus(self, other: TaskCounters) -> TaskCounters:
        return TaskCounters(self.cpu_s + other.cpu_s, _plus(self.runqueue_wait_s, other.runqueue_wait_s))


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _plus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b


NOTHING = TaskCounters(0.0, 0.0)


@dataclass(frozen=True)
class MachineCounters:
    """The whole machine's CPU time since boot (/proc/stat), summed over its CPUs."""

    busy_s: float  # user + nice + system + irq + softirq + steal
    steal_s: float  # taken by the hypervisor: busy, but not by anything on this machine
    idle_s: float  # idle + iowait


@dataclass(frozen=True)
class Snapshot:
    at_s: float  # the profiler's clock
    uptime_s: float  # since boot, read before the processes: compared with their `started_s`
    machine: MachineCounters
    processes: ProcessTable  # only those whose threads were listed
    tasks: Mapping[tuple[int, int], TaskCounters]  # by (pid, tid)


def _split_stat(text: str) -> tuple[str, list[str]]:
    """(comm, the fields after it) of a /proc/<pid>/stat line; the comm may hold spaces and ')'."""
    opening, closing = text.index("("), text.rindex(")")
    return text[opening + 1 : closing], text[closing + 1 :].split()


def read_machine(proc: Path, clk_tck: int) -> MachineCounters:
    """The `cpu` line of /proc/stat (older kernels stop before steal: the missing fields are 0)."""
    for line in (proc / "stat").read_text().splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            user, nice, system, idle, iowait, irq, softirq, steal = ([int(f) for f in fields[1:9]] + [0] * 8)[
                :8
            ]
            # guest and guest_nice are left out: the kernel already counts them in user and nice.
            return MachineCounters(
                busy_s=(user + nice + system + irq + softirq + steal) / clk_tck,
                steal_s=steal / clk_tck,
                idle_s=(idle + iowait) / clk_tck,
            )
    raise ValueError(f"no cpu line in {proc / 'stat'}")


def _read_task(task: Path, clk_tck: int) -> TaskCounters | None:
    """A thread's counters, or None when it exited while being read."""
    try:
        on_cpu_ns, waiting_ns, *_slices = (task / "schedstat").read_text().split()
        return TaskCounters(int(on_cpu_ns) / _NS_PER_S, int(waiting_ns) / _NS_PER_S)
    except OSError:
        pass  # no schedstat on this kernel, or the thread is gone: stat tells which
    try:
        _comm, fields = _split_stat((task / "stat").read_text())
    except OSError:
        return None
    return TaskCounters((int(fields[11]) + int(fields[12])) / clk_tck, None)


def _read_process(directory: Path, clk_tck: int) -> tuple[ProcessEntry, dict[int, TaskCounters]] | None:
    """A process and its threads' counters, or None when it exited while being read."""
    try:
        comm, fields = _split_stat((directory / "stat").read_text())
        arguments = (directory / "cmdline").read_bytes().split(b"\0")
        tids = [int(task.name) for task in (directory / "task").iterdir() if task.name.isdigit()]
    except OSError:
        return None
    entry = ProcessEntry(
        ppid=int(fields[1]),
        comm=comm,
        cmdline=b" ".join(arguments).decode(errors="replace").strip(),
        started_s=int(fields[19]) / clk_tck,
    )
    tasks = {
        tid: counters
        for tid in tids
        if (counters := _read_task(directory / "task" / str(tid), clk_tck)) is not None
    }
    return entry, tasks


def read_snapshot(proc: Path, *, clock: Callable[[], float], clk_tck: int) -> Snapshot:
    """Every process under `proc` (a /proc-like folder) with its threads' counters, and the machine's.

    A process or thread that exits while being read is left out: one that was in the previous snapshot
    keeps what it had there."""
    at_s = clock()
    uptime_s = float((proc / "uptime").read_text().split()[0])
    machine = read_machine(proc, clk_tck)
    processes: dict[int, ProcessEntry] = {}
    tasks: dict[tuple[int, int], TaskCounters] = {}
    for directory in proc.iterdir():
        if not directory.name.isdigit():
            continue
        if (read := _read_process(directory, clk_tck)) is None:
            continue
        pid = int(directory.name)
        processes[pid], by_tid = read
        tasks.update(((pid, tid), counters) for tid, counters in by_tid.items())
    return Snapshot(at_s=at_s, uptime_s=uptime_s, machine=machine, processes=processes, tasks=tasks)


def _used_between(key: tuple[int, int], previous: Snapshot, current: Snapshot) -> TaskCounters:
    """What thread `key` of `current` used since `previous`.

    A process started after `previous` was read, or a new thread of a process `previous` listed, was born
    in the interval: all of its counters count (a worker's start, its imports and model load, are part of
    the phase). A process older than `previous` counts from the first sample that saw it (the phase's
    first sample for those already running then; a later one for a process a read missed): what it used
    before is not known to be the phase's.
    """
    pid, _tid = key
    now = current.tasks[key]
    process, before = current.processes[pid], previous.processes.get(pid)
    if process.started_s >= previous.uptime_s:
        return now
    if before is None or before.started_s != process.started_s:
        return NOTHING
    earlier = previous.tasks.get(key)
    # Counters that went back belong to a thread born since that reuses the tid.
    if earlier is None or now.cpu_s < earlier.cpu_s:
        return now
    return now.minus(earlier)


def interval_usage(previous: Snapshot, current: Snapshot, demo_pid: int) -> dict[str, TaskCounters]:
    """What each group used between two snapshots, by the groups of `current` (every group with a live
    thread is there, at zero when it used nothing)."""
    groups = classify(current.processes, demo_pid)
    usage: dict[str, TaskCounters] = {}
    for key in current.tasks:
        group = groups[key[0]]
        usage[group] = usage.get(group, NOTHING).plus(_used_between(key, previous, current))
    return usage


@dataclass(frozen=True)
class GroupProfile:
    name: str
    cpu_s: float
    runqueue_wait_s: float | None  # None where the kernel has no schedstat
    cpu_cores: float  # cpu_s / wall: the cores the group kept busy on average
    runnable_share: float | None  # (cpu_s + runqueue_wait_s) / wall: above 1 with several runnable threads


@dataclass(frozen=True)
class Profile:
    wall_s: float
    cores: int
    groups: tuple[GroupProfile, ...]  # the most CPU first
    attributed_cpu_s: float  # the sum over the groups
    machine_busy_cpu_s: float  # /proc/stat: user + nice + system + irq + softirq + steal
    machine_steal_s: float
    # Busy but not in any sampled thread: processes that lived between two samples, interrupts, what the
    # profiler cannot see. The hypervisor's steal is not a process's, so it is left out. Slightly negative
    # is possible: the kernel counts /proc/stat in ticks and schedstat in nanoseconds.
    unattributed_cpu_s: float
    machine_idle_share: float  # idle + iowait over all the machine's CPU time

    def to_json(self) -> dict[str, Any]:
        return {
            "wall_s": round(self.wall_s, 1),
            "cores": self.cores,
            "groups": {
                group.name: {
                    "cpu_s": round(group.cpu_s, 2),
                    "runqueue_wait_s": _rounded(group.runqueue_wait_s, 2),
                    "cpu_cores": round(group.cpu_cores, 3),
                    "runnable_share": _rounded(group.runnable_share, 3),
                }
                for group in self.groups
            },
            "attributed_cpu_s": round(self.attributed_cpu_s, 2),
            "unattributed_cpu_s": round(self.unattributed_cpu_s, 2),
            "machine_busy_cpu_s": round(self.machine_busy_cpu_s, 2),
            "machine_steal_s": round(self.machine_steal_s, 2),
            "machine_idle_share": round(self.machine_idle_share, 3),
        }

    def lines(self) -> list[str]:
        """One line per group, the most CPU first, then the unattributed remainder and the machine."""
        width = max([len(UNATTRIBUTED), *(len(group.name) for group in self.groups)])
        lines = []
        for group in self.groups:
            runnable = "n/a" if group.runnable_share is None else f"{group.runnable_share:.0%}"
            waited = (
                "" if group.runqueue_wait_s is None else f", {group.runqueue_wait_s:.1f} s on a run queue"
            )
            lines.append(
                f"{group.name:<{width}} {group.cpu_cores:5.2f} cores, runnable {runnable}"
                f" ({group.cpu_s:.1f} cpu s{waited})"
            )
        lines.append(
            f"{UNATTRIBUTED:<{width}} {self._cores(self.unattributed_cpu_s):5.2f} cores"
            f" ({self.unattributed_cpu_s:.1f} cpu s: processes between samples, interrupts)"
        )
        stolen = f", {self.machine_steal_s:.1f} s stolen by the hypervisor" if self.machine_steal_s else ""
        lines.append(
            f"{'machine':<{width}} {self._cores(self.machine_busy_cpu_s):5.2f} of {self.cores} cores busy"
            f" over {self.wall_s:.0f} s, idle {self.machine_idle_share:.0%}{stolen}"
        )
        return lines

    def _cores(self, cpu_s: float) -> float:
        return cpu_s / self.wall_s if self.wall_s > 0 else 0.0


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def profile_of(first: Snapshot, last: Snapshot, usage: Mapping[str, TaskCounters], *, cores: int) -> Profile:
    """The profile of the phase from `first` to `last`, given what each group used over it."""
    wall_s = last.at_s - first.at_s

    def per_wall(seconds: float) -> float:
        return seconds / wall_s if wall_s > 0 else 0.0

    groups = tuple(
        GroupProfile(
            name=name,
            cpu_s=used.cpu_s,
            runqueue_wait_s=used.runqueue_wait_s,
            cpu_cores=per_wall(used.cpu_s),
            runnable_share=None
            if used.runqueue_wait_s is None
            else per_wall(used.cpu_s + used.runqueue_wait_s),
        )
        for name, used in sorted(usage.items(), key=lambda item: (-item[1].cpu_s, item[0]))
    )
    attributed_s = sum(group.cpu_s for group in groups)
    busy_s = last.machine.busy_s - first.machine.busy_s
    steal_s = last.machine.steal_s - first.machine.steal_s
    idle_s = last.machine.idle_s - first.machine.idle_s
    return Profile(
        wall_s=wall_s,
        cores=cores,
        groups=groups,
        attributed_cpu_s=attributed_s,
        machine_busy_cpu_s=busy_s,
        machine_steal_s=steal_s,
        unattributed_cpu_s=busy_s - steal_s - attributed_s,
        machine_idle_share=idle_s / (busy_s + idle_s) if busy_s + idle_s > 0 else 0.0,
    )


class Profiler:
    """Samples /proc every `interval_s` in a daemon thread between `start()` and `stop()`:

        profiler = Profiler().start()
        ...  # the phase
        profile = profiler.stop()

    or `with Profiler() as profiler: ...`, then `profiler.profile` (none when the block raised). The phase
    runs from the sample `start()` takes to the one `stop()` takes. `sample()` is what the thread calls; a
    test calls it directly instead of starting the thread.
    """

    def __init__(
        self,
        *,
        interval_s: float = 2.0,
        demo_pid: int | None = None,
        proc: Path = Path("/proc"),
        clock: Callable[[], float] = time.monotonic,
        clk_tck: int | None = None,
        cores: int | None = None,
    ) -> None:
        self.interval_s = interval_s
        self.demo_pid = os.getpid() if demo_pid is None else demo_pid
        self.proc = proc
        self.clock = clock
        self.clk_tck = os.sysconf("SC_CLK_TCK") if clk_tck is None else clk_tck
        self.cores = (os.cpu_count() or 1) if cores is None else cores
        self._lock = threading.Lock()  # a test's sample() and the thread's never interleave
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._failure: Exception | None = None
        self._first: Snapshot | None = None
        self._last: Snapshot | None = None
        self._usage: dict[str, TaskCounters] = {}
        self._profile: Profile | None = None

    def sample(self) -> None:
        """Read /proc now and add what each group used since the previous sample (the first is the base)."""
        with self._lock:
            current = read_snapshot(self.proc, clock=self.clock, clk_tck=self.clk_tck)
            if self._last is None:
                self._first = current
            else:
                for group, used in interval_usage(self._last, current, self.demo_pid).items():
                    self._usage[group] = self._usage.get(group, NOTHING).plus(used)
            self._last = current

    def start(self) -> Self:
        self.sample()
        self._thread = threading.Thread(target=self._sample_until_stopped, name="profiler", daemon=True)
        self._thread.start()
        return self

    def _sample_until_stopped(self) -> None:
        while not self._stopping.wait(self.interval_s):
            try:
                self.sample()
            except Exception as failure:  # handed to stop(): an exception in a thread is only printed
                self._failure = failure
                return

    def stop(self) -> Profile:
        """Stop sampling, take the last sample and return the phase's profile (raises what the sampling
        thread raised)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
        if self._failure is not None:
            raise self._failure
        self.sample()
        assert self._first is not None and self._last is not None  # sample() sets both
        self._profile = profile_of(self._first, self._last, self._usage, cores=self.cores)
        return self._profile

    @property
    def profile(self) -> Profile:
        """The profile `stop()` returned (the one a `with` block's end took)."""
        if self._profile is None:
            raise RuntimeError("the profiler has not been stopped")
        return self._profile

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc_value is None:
            self.stop()
            return
        # The block failed: stop sampling without a last read that could raise over its exception.
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
