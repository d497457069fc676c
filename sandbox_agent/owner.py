"""Who owns a sandbox or a scratch folder: one process, named so that its death can be told for certain.

A worker that is SIGKILLed (or whose host loses power) runs no clean-up: its sandboxes keep running and its
temp folders stay. Whoever finds them later must tell "the owner is gone" from "the owner is busy". A pid
alone cannot: pids are reused, so a dead worker's pid may name a live process a minute later and keep the
orphans alive forever. An `Owner` is therefore the pid together with the process's start time (clock ticks
since boot, from /proc), the boot id and the pid namespace (a pid means something only inside one
namespace of one boot) and the host name. A process is the owner iff all of these match.

What a judge can tell (`judge`): an owner on this host, this boot, this pid namespace is alive iff a
process with its pid and start time runs (a zombie is dead: it runs nothing); an owner of this host from
an earlier boot is dead. An owner on another host, or in another pid namespace, cannot be judged from here
and is kept (its own host's workers reap it). Without /proc (not Linux) nothing is judged: nothing is
reaped, rather than everything.
"""

from __future__ import annotations

import enum
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

OWNER_LABEL = "dev.trialog.owner"
_HOST_CHARS = re.compile(r"[^A-Za-z0-9.-]")
_BOOT_CHARS = 12  # 48 bits of the boot id: enough to tell boots of one host apart


@dataclass(frozen=True, slots=True)
class Owner:
    host: str
    boot: str
    pidns: str
    pid: int
    start: int  # the process's start time, in clock ticks since boot

    def text(self) -> str:
        """A form usable as a container label and in a file name: `PID.START.BOOT.PIDNS.HOST`."""
        return f"{self.pid}.{self.start}.{self.boot}.{self.pidns}.{self.host}"

    @classmethod
    def parse(cls, text: str) -> Owner | None:
        """The owner `text()` wrote; None for anything else (a label someone else wrote, a damaged name)."""
        parts = text.split(".", 4)
        if len(parts) != 5:
            return None
        pid, start, boot, pidns, host = parts
        if not (pid.isdigit() and start.isdigit() and boot.isalnum() and pidns.isdigit() and host):
            return None
        return cls(host, boot, pidns, int(pid), int(start))

    def same_place(self, other: Owner) -> bool:
        """Whether `other`'s pid can be looked up from this owner's process (same host and pid namespace)."""
        return self.host == other.host and self.pidns == other.pidns


class Liveness(enum.Enum):
    ALIVE = "alive"
    DEAD = "dead"
    UNKNOWN = "unknown"  # another host or pid namespace: not ours to judge


class Processes(Protocol):
    def start_time(self, pid: int) -> int | None:
        """The start time of the running process `pid`; None when there is none (or only a zombie)."""
        ...


def judge(owner: Owner, here: Owner, processes: Processes) -> Liveness:
    """Whether `owner` still runs, as seen from the process `here`."""
    if owner.host != here.host:
        return Liveness.UNKNOWN
    if owner.boot != here.boot:
        return Liveness.DEAD  # this host rebooted since: every process of that boot is gone
    if owner.pidns != here.pidns:
        return Liveness.UNKNOWN
    return Liveness.ALIVE if processes.start_time(owner.pid) == owner.start else Liveness.DEAD


class ProcProcesses:
    """`Processes` from Linux's /proc."""

    def __init__(self, proc: Path = Path("/proc")) -> None:
        self.proc = proc

    def start_time(self, pid: int) -> int | None:
        return _stat_start(self.proc / str(pid) / "stat")


def _stat_start(stat: Path) -> int | None:
    try:
        text = stat.read_text(errors="replace")
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: the fields that follow start after the
    # last ')'. After it: field 3 is the state, field 22 the start time.
    fields = text.rpartition(")")[2].split()
    if len(fields) < 20 or fields[0] in ("Z", "X") or not fields[19].isdigit():
        return None
    return int(fields[19])


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _pidns() -> str | None:
    try:
        link = os.readlink("/proc/self/ns/pid")  # "pid:[4026531836]"
    except OSError:
        return None
    digits = "".join(ch for ch in link if ch.isdigit())
    return digits or None


_current: tuple[int, Owner | None] | None = None


def current() -> Owner | None:
    """This process as an owner; None where it cannot be named for certain (no /proc)."""
    global _current
    pid = os.getpid()
    if _current is None or _current[0] != pid:  # recomputed in a forked child: it is another owner
        _current = (pid, _identify(pid))
    return _current[1]


def _identify(pid: int) -> Owner | None:
    start = _stat_start(Path(f"/proc/{pid}/stat"))
    boot = _read("/proc/sys/kernel/random/boot_id")
    pidns = _pidns()
    if start is None or boot is None or pidns is None:
        return None
    host = _HOST_CHARS.sub("-", socket.gethostname()) or "localhost"
    return Owner(host, boot.replace("-", "")[:_BOOT_CHARS], pidns, pid, start)


def owner_labels() -> dict[str, str]:
    """The label naming this process as the owner of a container (none where it cannot be named)."""
    me = current()
    return {} if me is None else {OWNER_LABEL: me.text()}
