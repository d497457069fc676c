"""The Docker engine: Debian's docker.io, started with no bridge network and no iptables rules.

An engine that already answers (DOCKER_HOST, or the system socket) is used as it is and never stopped by
trialog; otherwise trialog starts its own `dockerd` with its data under the stack's home folder (with
`TRIALOG_CRUN=1`, Debian's crun registered as the runtime `crun` beside the default runc:
`ops/stack/runtimes.py`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import docker
from docker.errors import DockerException

from ops import process
from ops.paths import Paths
from ops.stack import runtimes
from ops.stack.apt import ensure_commands
from ops.stack.health import Health
from streams.errors import StackError

SYSTEM_SOCKET = "unix:///var/run/docker.sock"
# Unix socket paths are limited to 108 bytes; a deep checkout falls back to a short path.
_MAX_SOCKET_PATH = 100

DOCKERD_FLAGS = (
    "--bridge=none",
    "--iptables=false",
    "--ip-forward=false",
    "--ip-masq=false",
    "--userland-proxy=false",
)


@dataclass(frozen=True)
class Engine:
    url: str
    owned: bool

    def client(self, timeout_s: int = 120) -> docker.DockerClient:
        return docker.DockerClient(base_url=self.url, timeout=timeout_s)


def _state_file(paths: Paths) -> Path:
    return paths.component("docker") / "engine.json"


def _own_socket(paths: Paths) -> str:
    path = paths.component("docker") / "docker.sock"
    if len(str(path)) > _MAX_SOCKET_PATH:
        import hashlib

        digest = hashlib.sha256(str(path).encode()).hexdigest()[:12]
        path = Path(f"/run/trialog-{digest}.sock")
    return f"unix://{path}"


def ping(url: str, timeout_s: int = 5) -> str | None:
    """None when the engine answers, else why not."""
    try:
        client = docker.DockerClient(base_url=url, timeout=timeout_s)
        try:
            client.ping()
        finally:
            client.close()
    except DockerException as exc:
        return str(exc).splitlines()[0][:300]
    return None


def current(paths: Paths) -> Engine | None:
    """The engine this stack uses, if one answers now."""
    state = _state_file(paths)
    if state.exists():
        recorded = json.loads(state.read_text())
        if ping(recorded["url"]) is None:
            return Engine(url=recorded["url"], owned=bool(recorded["owned"]))
    for url in (os.environ.get("DOCKER_HOST", ""), _own_socket(paths), SYSTEM_SOCKET):
        if url and ping(url) is None:
            return Engine(url=url, owned=url == _own_socket(paths))
    return None


NO_ENGINE_HINT = "start the local stack: trialog up"


def require(paths: Paths) -> Engine:
    """The engine this stack uses, or a `StackError` with the fix at once (for a command that needs one)."""
    engine = current(paths)
    if engine is None:
        raise StackError("no Docker engine answers", NO_ENGINE_HINT)
    return engine


def ensure(paths: Paths) -> Engine:
    engine = current(paths)
    if engine is None:
        engine = _start(paths)
    _state_file(paths).write_text(json.dumps({"url": engine.url, "owned": engine.owned}))
    return engine


def _start(paths: Paths) -> Engine:
    ensure_commands({"dockerd": "docker.io"})
    if os.geteuid() != 0:
        raise StackError(
            "no Docker engine answers and dockerd can only be started as root",
            "run `trialog up` as root, or start Docker yourself and set DOCKER_HOST",
        )
    home = paths.component("docker")
    url = _own_socket(paths)
    pid_file, log_file = home / "dockerd.pid", home / "dockerd.log"
    # Opt-in (it changes the host); None: runc only, as an engine without crun always was.
    crun = runtimes.ensure_crun() if runtimes.crun_wanted(dict(os.environ)) else None
    argv = [
        "dockerd",
        *DOCKERD_FLAGS,
        *runtimes.dockerd_flags(crun),
        f"--data-root={home / 'data'}",
        f"--exec-root={home / 'exec'}",
        f"--pidfile={home / 'dockerd.self.pid'}",
        f"--host={url}",
    ]
    process.start_detached(argv, pid_file=pid_file, log_file=log_file)
    if not process.wait_until(lambda: ping(url, timeout_s=2) is None, timeout_s=60):
        raise StackError(
            f"dockerd did not answer on {url} within 60 s; last log lines:\n{process.log_tail(log_file)}",
            f"see {log_file}; a Docker engine needs root, cgroups and overlayfs support",
        )
    return Engine(url=url, owned=True)


def stop(paths: Paths) -> bool:
    """Stop dockerd if trialog started it; an engine someone else runs is left alone."""
    home = paths.component("docker")
    stopped = process.stop(home / "dockerd.pid", grace_s=30)
    _state_file(paths).unlink(missing_ok=True)
    return stopped


def health(paths: Paths) -> Health:
    engine = current(paths)
    if engine is None:
        return Health(False, "no Docker engine answers a ping; run `trialog up`")
    info = engine.client(timeout_s=5).info()
    owner = "started by trialog" if engine.owned else "external engine"
    return Health(True, f"Docker {info.get('ServerVersion', '?')} ({owner})", engine.url)
