"""The reaper: remove sandbox containers whose owner process is gone, so a SIGKILLed worker leaks nothing.

Every sandbox a `DockerBackend` creates carries `SANDBOX_LABEL` and `OWNER_LABEL` (its creating process,
`sandbox_agent.owner`). A worker that exits cleanly destroys its sandboxes; one that is killed cannot. So
every sandbox and verifier worker runs a `Reaper` from its start (a restarted worker reclaims its
predecessor's sandboxes at once) and then every few seconds (a dead peer's are reclaimed by whichever
worker of the host runs). The decision (`orphans`) is pure; the engine is behind `Containers`.

Kept, on purpose: containers without `SANDBOX_LABEL` (a test's Kafka, anything not a sandbox), sandboxes
without an owner label or with one that cannot be parsed (made before owners were recorded, or by someone
else), and sandboxes of owners on another host or in another pid namespace (they cannot be judged from
here; that host's workers reap them). Only the owner is checked, never a sandbox's age: a live owner's
sandbox is never removed, however old.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import docker
from docker.errors import APIError, DockerException, NotFound

from sandbox_agent.defaults import DEFAULT_REAP_EVERY_S
from sandbox_agent.docker_backend import SANDBOX_LABEL
from sandbox_agent.owner import OWNER_LABEL, Liveness, Owner, Processes, ProcProcesses, current, judge

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Labelled:
    id: str
    labels: Mapping[str, str]


class Containers(Protocol):
    def sandboxes(self) -> list[Labelled]:
        """Every container (running or not) with an owner and the sandbox label."""
        ...

    def remove(self, container_id: str) -> None: ...


def orphans(containers: Iterable[Labelled], here: Owner, processes: Processes) -> list[str]:
    """The ids of the sandboxes whose owner is judged dead from `here` (never `here`'s own)."""
    found: list[str] = []
    for container in containers:
        if SANDBOX_LABEL not in container.labels:
            continue
        owner = Owner.parse(container.labels.get(OWNER_LABEL, ""))
        if owner is None or owner == here:
            continue
        if judge(owner, here, processes) is Liveness.DEAD:
            found.append(container.id)
    return found


class DockerContainers:
    """`Containers` on a Docker engine."""

    def __init__(self, client: docker.DockerClient) -> None:
        self._api: Any = client.api

    def sandboxes(self) -> list[Labelled]:
        listed = self._api.containers(all=True, filters={"label": [SANDBOX_LABEL, OWNER_LABEL]})
        return [Labelled(each["Id"], each.get("Labels") or {}) for each in listed]

    def remove(self, container_id: str) -> None:
        try:
            self._api.remove_container(container_id, force=True, v=True)
        except NotFound:
            pass
        except APIError as exc:
            if exc.status_code != 409:  # 409: another reaper is removing it already
                raise


class Reaper:
    """Sweeps once on `start`, then every `every_s` in a daemon thread until `close`."""

    def __init__(
        self,
        containers: Containers,
        *,
        every_s: float = DEFAULT_REAP_EVERY_S,
        here: Owner | None = None,
        processes: Processes | None = None,
    ) -> None:
        if every_s <= 0:
            raise ValueError("the reaper's interval is positive")
        self.containers = containers
        self.every_s = every_s
        self.here = here or current()
        self.processes = processes or ProcProcesses()
        self.removed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sandbox-reaper", daemon=True)

    def sweep(self) -> list[str]:
        """Remove the orphans found now; returns their ids. An engine error is logged, never raised: the
        next sweep tries again, and a worker does not stop serving because its clean-up failed."""
        if self.here is None:
            return []  # this process cannot be named, so it cannot tell a live owner from a dead one
        try:
            found = orphans(self.containers.sandboxes(), self.here, self.processes)
        except (DockerException, OSError) as exc:
            log.warning("sandbox reaper: cannot list sandboxes: %s", exc)
            return []
        removed: list[str] = []
        for container_id in found:
            try:
                self.containers.remove(container_id)
            except (DockerException, OSError) as exc:
                log.warning("sandbox reaper: cannot remove %s: %s", container_id[:12], exc)
                continue
            removed.append(container_id)
        if removed:
            self.removed += len(removed)
            log.info("sandbox reaper: removed %d sandboxes of dead owners", len(removed))
        return removed

    def start(self) -> Reaper:
        self.sweep()
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.sweep()
            except Exception:  # a reaper thread that died would leak silently from then on
                log.exception("sandbox reaper: a sweep failed")
