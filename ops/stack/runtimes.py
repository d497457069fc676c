"""OCI runtimes for the Docker engine trialog starts: runc (the engine's default) and Debian's crun.

crun is a C runtime that starts containers faster than runc (no Go runtime to start for every container:
BENCHMARKS.md "compare: sandbox churn" measures it against runc). Asked for (`TRIALOG_CRUN=1 trialog up`),
the engine trialog starts gets it installed and registered as the runtime `crun`; sandboxes use it only when
asked (`trialog worker sandbox --runtime crun`), so runc stays the default and everything works without it.
It is opt-in because readying it changes the host (a Debian package, and on a hybrid cgroup host a cgroup
controller mounted: below), which a plain `trialog up` should not do.

On a host with cgroup v1 controllers mounted next to a v2 hierarchy (hybrid), crun refuses to create a
container while a controller is left on the v2 hierarchy (here: `hugetlb`, in no v1 mount); runc does not
mind. Such a controller is mounted as v1 beside the others before the engine starts (no cgroup of the v2
hierarchy uses it), which changes nothing for runc.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import docker

from ops.stack.apt import ensure_commands
from streams.errors import StackError

CRUN = "crun"
CGROUP_ROOT = Path("/sys/fs/cgroup")


def v1_mounted(proc_mounts: str) -> set[str]:
    """Controllers mounted as cgroup v1 somewhere, from /proc/mounts (a mount may carry several)."""
    mounted: set[str] = set()
    for line in proc_mounts.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] == "cgroup":
            mounted |= set(fields[3].split(","))
    return mounted


def stranded_controllers(unified_controllers: str, proc_mounts: str) -> list[str]:
    """On a hybrid host (controllers mounted as v1), those left on the v2 hierarchy (its
    cgroup.controllers): crun wants each of them as v1. Empty on a pure v1 or v2 host."""
    mounted = v1_mounted(proc_mounts)
    if not mounted:
        return []
    return [name for name in unified_controllers.split() if name not in mounted]


def dockerd_flags(crun: Path | None) -> list[str]:
    """The engine's runtime flags: crun registered by name when it is installed (runc needs none)."""
    return [f"--add-runtime={CRUN}={crun}"] if crun is not None else []


CRUN_ENV = "TRIALOG_CRUN"


def crun_wanted(env: dict[str, str]) -> bool:
    """Whether `TRIALOG_CRUN` asks for crun (1/true/yes; 0/false/no or unset: not)."""
    value = env.get(CRUN_ENV, "").strip().lower()
    if value in ("", "0", "false", "no"):
        return False
    if value in ("1", "true", "yes"):
        return True
    raise StackError(f"{CRUN_ENV}={env[CRUN_ENV]!r} is neither 1 nor 0", f"set {CRUN_ENV}=1 to register crun")


def ensure_crun() -> Path | None:
    """Install Debian's crun (as root) and ready the cgroups it needs; its path, or None where it cannot be
    had (not root, no package): the engine then runs with runc only, as before."""
    try:
        ensure_commands({CRUN: CRUN})
    except StackError:
        return None
    found = shutil.which(CRUN)
    if found is None:
        return None
    try:
        mount_missing_controllers()
    except StackError:
        return None  # crun could not create containers here; runc can
    return Path(found)


def mount_missing_controllers(
    unified: Path = CGROUP_ROOT / "unified", proc_mounts: Path = Path("/proc/mounts")
) -> list[str]:
    """Mount each controller stranded on a hybrid host's v2 hierarchy as v1 under /sys/fs/cgroup/NAME
    (root only); the ones mounted."""
    controllers = unified / "cgroup.controllers"
    if not controllers.exists():  # no v2 hierarchy beside v1 (or a pure v2 host): nothing stranded
        return []
    missing = stranded_controllers(controllers.read_text(), proc_mounts.read_text())
    if missing and os.geteuid() != 0:
        raise StackError(f"cgroup controllers not mounted: {', '.join(missing)}", "run `trialog up` as root")
    for name in missing:
        target = CGROUP_ROOT / name
        target.mkdir(exist_ok=True)
        done = subprocess.run(
            ["mount", "-t", "cgroup", "-o", name, "cgroup", str(target)], capture_output=True, text=True
        )
        if done.returncode != 0:
            raise StackError(f"cannot mount the {name} cgroup controller: {done.stderr.strip()}")
    return missing


def registered(client: docker.DockerClient) -> list[str]:
    """The runtimes the engine knows, its default first."""
    info: dict[str, Any] = client.info()
    default = str(info.get("DefaultRuntime", "runc"))
    return [default, *sorted(name for name in info.get("Runtimes", {}) if name != default)]


def require_registered(client: docker.DockerClient, name: str) -> None:
    """A `StackError` unless the engine has the runtime `name`: a sandbox asked to run on a runtime the
    engine lacks would fail at its first create, long after the worker said it serves."""
    known = registered(client)
    if name not in known:
        hint = "`trialog down`, then `TRIALOG_CRUN=1 trialog up` registers crun" if name == CRUN else ""
        raise StackError(f"the Docker engine has no runtime {name!r} (it has {', '.join(known)})", hint)
