"""The Docker backend: every sandbox is a locked-down container whose PID 1 is trialog's exec server.

Isolation, for every sandbox: no network at all (`network_mode=none`: loopback only), commands as the
image's non-root user with no capabilities, no-new-privileges, trialog's pinned seccomp profile
(seccomp.json: Docker's default less ptrace and io_uring) and pinned ulimits (no core files, a fixed number
of open files and processes) rather than whatever the engine defaults to, a read-only root file system
with size-capped tmpfs mounts for /workspace and /tmp (so a full disk is the sandbox's own ENOSPC, never
the host's), no IPC namespace sharing and no /dev/shm, no log driver (PID 1's output cannot fill the host's
disk), and nothing from the host mounted (no Docker socket, no host paths).
Quotas: memory with swap off, CPUs, pids.

PID 1 (exec_server.py) reaps orphans, so a killed fork bomb leaves no zombies holding pids, and runs the
commands trialog sends down the attach stream: about a fork per command instead of a `docker exec`.
It runs as root with only CAP_SETUID, CAP_SETGID, CAP_SETPCAP and CAP_KILL, out of the agent's reach, and
starts every command as the agent's uid. Steps are isolated: when a command ends (or times out) every
process of the agent's uid is killed, so nothing a step starts lives into the next one, writes into its
output, or races trialog's own listing and tar commands (they run as the agent's uid, so they read what
the agent can read and write files the agent owns, but only while no agent process is alive). Where the
channel is not available (it broke, or the image's Python cannot harden and isolate the server) commands
go through `docker exec` as the agent's uid with the same semantics (`timeout -s KILL`, a process-group
wrapper, and `kill -KILL -1` as the agent's uid after every command: one docker exec more per step).
File transfers stream tar through a command (Docker's archive API cannot write into a read-only container
nor read tmpfs mounts).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
from docker.errors import APIError, ImageNotFound, NotFound
from docker.types import LogConfig, Ulimit

from sandbox_agent.backend import DEFAULT_EXEC_LIMITS, Sandbox
from sandbox_agent.docker_exec import (
    GROUP_WRAPPER,
    KILL_STRAGGLERS_ARGV,
    KILLED_EXIT_CODE,
    OOM_COUNTER_ARGV,
    SWEPT,
    ByteSink,
    ExecOutcome,
    Sink,
    judged_timed_out,
    oom_kill_count,
    run_exec,
)
from sandbox_agent.errors import SandboxError, SandboxFileNotFound, SandboxGone
from sandbox_agent.exec_channel import ChannelBroken, ChannelTimeout, ExecChannel, server_command
from sandbox_agent.exec_server import SWEEP_SIGNAL
from sandbox_agent.ingest import FetchedFile, IngestError, TarIngest
from sandbox_agent.limits import BACKGROUND_CPU_SHARES, MIB, ExecLimits, SandboxSpec
from sandbox_agent.listing import (
    FIND_FORMAT,
    LIST_SCRIPT,
    LISTING_ARGV,
    PAST_RACY_WINDOW_S,
    HashCache,
    Listing,
    ListingError,
    parse_listing,
)
from sandbox_agent.manifest import SnapshotId
from sandbox_agent.output import BoundedOutput
from sandbox_agent.owner import owner_labels
from sandbox_agent.paths import WORKSPACE, workspace_relative
from sandbox_agent.results import ExecResult
from sandbox_agent.snapshots import MissingContent, SnapshotStore
from sandbox_agent.tarball import files_tar, tree_tar
from schemas.blobs import ObjectStore

log = logging.getLogger(__name__)

SANDBOX_LABEL = "dev.trialog.sandbox"
SANDBOX_USER = "1000:1000"  # the `agent` user of trialog's sandbox image
SERVER_USER = "0:0"  # PID 1: root, with only the capabilities below, never the agent's uid
SERVER_CAPS = ["SETUID", "SETGID", "SETPCAP", "KILL"]
SECCOMP_PROFILE = (Path(__file__).with_name("seccomp.json")).read_text()
NOFILE_LIMIT = 4096
# RLIMIT_NPROC counts the uid's processes on the whole host (all sandboxes share uid 1000), so it is only a
# backstop far above one sandbox's pids quota; the pids cgroup is what contains a fork bomb.
NPROC_LIMIT = 65536
ULIMITS = [
    Ulimit(name="core", soft=0, hard=0),
    Ulimit(name="nofile", soft=NOFILE_LIMIT, hard=NOFILE_LIMIT),
    Ulimit(name="nproc", soft=NPROC_LIMIT, hard=NPROC_LIMIT),
]
HUNG_GRACE_S = 5.0  # past the timeout, how long the host waits for the streams to close
INTERNAL_DEADLINE_S = 120.0  # trialog's own transfers (listing, tar) in a sandbox
LISTING_TRIES = 2  # a listing whose output does not parse is taken once more (`DockerBackend._listing`)
READ_MAX_BYTES = 64 * MIB
SNAPSHOT_IN_FLIGHT_BYTES = 32 * MIB  # fetched file bodies handed to the store and not yet written

CHANNEL_HELLO_S = 20.0  # how long a new sandbox's exec server may take to start

# Clear the workspace (a read-only folder must not stop it), extract, then list what was extracted once
# it is past the racy window, so the next snapshot knows these files without fetching them again.
RESTORE_ARGV = [
    "sh",
    "-c",
    f"cd {WORKSPACE} && chmod -R u+rwX . 2>/dev/null; find . -mindepth 1 -delete "
    f"&& tar -x -p -m --no-same-owner -f - && sleep {PAST_RACY_WINDOW_S:.3f} && {LIST_SCRIPT}",
    FIND_FORMAT,
]
# --verbatim-files-from: a listed name that starts with '-' is a file, never an option to tar.
FETCH_ARGV = [
    "tar", "-c", "-f", "-", "-C", WORKSPACE, "--no-recursion", "--ignore-failed-read",
    "--null", "--verbatim-files-from", "-T", "-",
]  # fmt: skip
WRITE_ARGV = ["tar", "-x", "-m", "-C", WORKSPACE, "-f", "-"]
INPUTS = "/inputs"  # root-owned tmpfs: only trialog (exec as uid 0, still without capabilities) writes it
INPUTS_BYTES = 64 * MIB
INPUTS_ARGV = ["tar", "-x", "-m", "--no-same-owner", "-C", INPUTS, "-f", "-"]


@dataclass
class _SandboxState:
    oom_kills: int = 0  # a new container's memory cgroup starts at zero
    hashes: HashCache = field(default_factory=HashCache)
    lock: threading.Lock = field(default_factory=threading.Lock)
    channel: ExecChannel | None = None  # None: commands go through `docker exec`
    channel_lock: threading.Lock = field(default_factory=threading.Lock)


STRAGGLER_TRIES = 20  # execs of the straggler sweep tried while the sandbox's pids are all taken


class DockerBackend:
    """A `SandboxBackend` on a Docker engine (docker SDK). Snapshots go to the given object store."""

    def __init__(
        self,
        client: docker.DockerClient,
        objects: ObjectStore,
        *,
        labels: Mapping[str, str] | None = None,
        user: str = SANDBOX_USER,
        exec_channel: bool = True,
        runtime: str | None = None,
    ) -> None:
        self._api: Any = client.api
        self._runtime = runtime  # an OCI runtime the engine knows (e.g. "crun"); None: the engine's default
        self.snapshots = SnapshotStore(objects)
        self._labels = {SANDBOX_LABEL: "1", **owner_labels(), **(labels or {})}  # owner: for the reaper
        self._user = user
        self._use_channel = exec_channel
        self._states: dict[str, _SandboxState] = {}
        self._states_lock = threading.Lock()

    @property
    def workspace_path(self) -> str:
        return WORKSPACE

    # -- lifecycle -----------------------------------------------------------------------------------

    def create(self, spec: SandboxSpec) -> Sandbox:
        return self.start(self.prepare(spec))

    def prepare(self, spec: SandboxSpec) -> Sandbox:
        """A sandbox created but not started (no process, no memory in use): the engine's create is a large
        share of create+start, so a caller can create ahead of demand and only `start` when one is needed.
        Destroy it like any other."""
        try:
            created = self._api.create_container(
                spec.image,
                command=server_command(*self._agent_ids()),
                user=SERVER_USER,
                working_dir=WORKSPACE,
                environment={"HOME": "/tmp"},  # the image's home is on the read-only root
                labels=self._labels,
                stdin_open=self._use_channel,
                host_config=self._host_config(spec),
            )
        except ImageNotFound as exc:
            raise SandboxError(f"no image {spec.image!r}: run `trialog sandbox images`") from exc
        except APIError as exc:
            explanation = exc.explanation or exc
            raise SandboxError(f"cannot create a sandbox from {spec.image}: {explanation}") from exc
        return Sandbox(created["Id"], spec)

    def start(self, sandbox: Sandbox) -> Sandbox:
        """Start a sandbox from `prepare`: ready for `exec` when this returns."""
        try:
            state = self._start(sandbox)
        except BaseException:
            self.destroy(sandbox)  # never leave a half-made container behind
            raise
        with self._states_lock:
            self._states[sandbox.id] = state
        return sandbox

    def _agent_ids(self) -> tuple[int, int]:
        uid, _, gid = self._user.partition(":")
        return int(uid), int(gid or uid)

    def _start(self, sandbox: Sandbox) -> _SandboxState:
        state = _SandboxState()
        if self._use_channel:
            state.channel = ExecChannel.attach(self._api, sandbox.id)  # before the start: miss nothing
        try:
            self._api.start(sandbox.id)
        except APIError as exc:
            raise SandboxError(f"cannot start sandbox {sandbox.id[:12]}: {exc.explanation or exc}") from exc
        if state.channel is not None:
            self._greet(sandbox, state)
        return state

    def _greet(self, sandbox: Sandbox, state: _SandboxState) -> None:
        """Keep the channel only if the server is up, hardened and isolated; else use `docker exec`."""
        assert state.channel is not None
        try:
            said = state.channel.hello(CHANNEL_HELLO_S)
        except SandboxGone as exc:
            raise SandboxError(
                f"sandbox {sandbox.id[:12]} stopped at once (does its image have python3?)"
            ) from exc
        except ChannelBroken as exc:
            log.warning("sandbox %s: no exec server (%s); using docker exec", sandbox.id[:12], exc)
            usable = False
        else:
            usable = said.hardened and said.isolated
            if not usable:  # never run the agent's commands through a server that could not isolate them
                log.warning(
                    "sandbox %s: exec server not isolated (%s); using docker exec", sandbox.id[:12], said
                )
        if not usable:
            state.channel.close()
            state.channel = None

    def _host_config(self, spec: SandboxSpec) -> Any:
        quotas = spec.quotas
        uid, gid = self._agent_ids()
        owner = f"uid={uid},gid={gid}"
        return self._api.create_host_config(
            network_mode="none",
            runtime=self._runtime,
            read_only=True,
            cap_drop=["ALL"],
            cap_add=SERVER_CAPS,  # PID 1's; the agent's commands run with none (bounding set emptied)
            security_opt=["no-new-privileges", f"seccomp={SECCOMP_PROFILE}"],
            ulimits=ULIMITS,
            ipc_mode="none",
            log_config=LogConfig(type="none"),
            mem_limit=quotas.memory_bytes,
            memswap_limit=quotas.memory_bytes,  # equal to the memory limit: no swap
            nano_cpus=int(quotas.cpus * 1e9),
            cpu_shares=BACKGROUND_CPU_SHARES if spec.background else None,
            pids_limit=quotas.pids,
            tmpfs={
                WORKSPACE: f"size={quotas.workspace_bytes},{owner},mode=0755,exec,nosuid,nodev",
                "/tmp": f"size={quotas.tmp_bytes},mode=1777,exec,nosuid,nodev",
                INPUTS: f"size={INPUTS_BYTES},uid=0,gid=0,mode=0755,noexec,nosuid,nodev",
            },
        )

    def destroy(self, sandbox: Sandbox) -> None:
        with self._states_lock:
            state = self._states.pop(sandbox.id, None)
        if state is not None and state.channel is not None:
            state.channel.close()
        try:
            self._api.remove_container(sandbox.id, force=True, v=True)
        except NotFound:
            pass
        except APIError as exc:
            if exc.status_code != 409:  # 409: removal already in progress
                raise SandboxError(f"cannot remove sandbox {sandbox.id[:12]}: {exc.explanation}") from exc

    def _state(self, sandbox: Sandbox) -> _SandboxState:
        with self._states_lock:
            state = self._states.get(sandbox.id)
            if state is None:  # a sandbox this process did not create (e.g. after a restart): start afresh
                state = self._states[sandbox.id] = _SandboxState()
            return state

    def _channel(self, sandbox: Sandbox) -> ExecChannel | None:
        """The sandbox's exec channel; None: use docker exec (the channel broke, or this backend did not
        create the sandbox: a second client on the attach stream could stall the first, so none is made)."""
        state = self._state(sandbox)
        with state.channel_lock:
            if state.channel is not None and state.channel.broken:
                state.channel.close()  # it missed its deadline once: it cannot be trusted to be in step
                state.channel = None
            return state.channel

    # -- commands ------------------------------------------------------------------------------------

    def exec(
        self,
        sandbox: Sandbox,
        argv: Sequence[str],
        *,
        limits: ExecLimits = DEFAULT_EXEC_LIMITS,
        stdin: bytes | None = None,
    ) -> ExecResult:
        if not argv:
            raise ValueError("an empty command")
        channel = self._channel(sandbox)
        if channel is None:
            return self._exec_via_docker(sandbox, argv, limits, stdin)
        deadline_s = limits.timeout_s + HUNG_GRACE_S
        try:
            answer = channel.run(
                argv, timeout_s=limits.timeout_s, deadline_s=deadline_s, stdin=stdin, cap=limits.output_bytes
            )
        except ChannelTimeout:
            self._kill_stragglers(sandbox)  # the channel is dropped: this goes through docker exec
            message = (
                f"trialog: no answer from the sandbox in {deadline_s:.0f} s; everything in it was killed\n"
            )
            return ExecResult(KILLED_EXIT_CODE, "", message, timed_out=True, duration_s=deadline_s)
        stdout, stderr = answer.stdout or BoundedOutput(0), answer.stderr or BoundedOutput(0)
        return ExecResult(
            exit_code=answer.exit_code,
            stdout=stdout.text(),
            stderr=stderr.text(),
            timed_out=answer.timed_out,
            oom_killed=answer.oom_kills > 0,
            stdout_dropped=stdout.dropped,
            stderr_dropped=stderr.dropped,
            stdout_bytes=stdout.total,
            stderr_bytes=stderr.total,
            duration_s=answer.duration_s,
            left_running=answer.left_running,
            memory_peak_bytes=answer.memory_peak,
        )

    def _exec_via_docker(
        self, sandbox: Sandbox, argv: Sequence[str], limits: ExecLimits, stdin: bytes | None
    ) -> ExecResult:
        stdout, stderr = BoundedOutput(limits.output_bytes), BoundedOutput(limits.output_bytes)
        wrapped = ["sh", "-c", GROUP_WRAPPER, f"{limits.timeout_s:.3f}s", *argv]
        outcome = self._exec(sandbox, wrapped, stdout, stderr, stdin, limits.timeout_s + HUNG_GRACE_S)
        timed_out = judged_timed_out(outcome.exit_code, outcome.duration_s, limits.timeout_s)
        self._kill_stragglers(sandbox)  # the step's processes end with it, in its group or not
        exit_code = KILLED_EXIT_CODE if outcome.exit_code is None else outcome.exit_code
        return ExecResult(
            exit_code=exit_code,
            stdout=stdout.text(),
            stderr=stderr.text(),
            timed_out=timed_out,
            oom_killed=exit_code != 0 and self._new_oom_kills(sandbox),
            stdout_dropped=stdout.dropped,
            stderr_dropped=stderr.dropped,
            stdout_bytes=stdout.total,
            stderr_bytes=stderr.total,
            duration_s=outcome.duration_s,
        )

    def _exec(
        self,
        sandbox: Sandbox,
        argv: Sequence[str],
        out: Sink,
        err: Sink,
        stdin: bytes | None,
        deadline_s: float,
    ) -> ExecOutcome:
        return run_exec(
            self._api, sandbox.id, argv, stdout=out, stderr=err, stdin=stdin, deadline_s=deadline_s,
            user=self._user,  # never the container's user: that is PID 1's root
        )  # fmt: skip

    def _run(
        self,
        sandbox: Sandbox,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        max_output: int = 16 * MIB,
        deadline_s: float = INTERNAL_DEADLINE_S,
    ) -> tuple[int, bytes, bytes]:
        """One of trialog's own commands: all of its output, or an error."""
        out = ByteSink(max_output)
        code, err = self._run_into(sandbox, argv, out, stdin=stdin, deadline_s=deadline_s)
        if out.overflowed:
            raise SandboxError(f"{argv[0]} in sandbox {sandbox.id[:12]} wrote over {max_output} bytes")
        return code, bytes(out.data), err

    def _run_into(
        self,
        sandbox: Sandbox,
        argv: Sequence[str],
        out: Sink,
        *,
        stdin: bytes | None = None,
        deadline_s: float = INTERNAL_DEADLINE_S,
    ) -> tuple[int, bytes]:
        """One of trialog's own commands, stdout streamed into `out`: exit code and stderr, or an error."""
        err = ByteSink(64 * 1024)
        channel = self._channel(sandbox)
        code: int | None
        if channel is not None:
            try:
                host_deadline = deadline_s + HUNG_GRACE_S
                answer = channel.run(
                    argv, timeout_s=deadline_s, deadline_s=host_deadline, stdin=stdin, stdout=out, stderr=err
                )
                code = None if answer.timed_out else answer.exit_code
            except ChannelTimeout:
                code = None
        else:
            code = self._exec(sandbox, argv, out, err, stdin, deadline_s).exit_code
        if code is None:
            raise SandboxError(f"{argv[0]} in sandbox {sandbox.id[:12]} did not finish in {deadline_s:.0f} s")
        return code, bytes(err.data)

    def _kill_stragglers(self, sandbox: Sandbox) -> None:
        # The sweep's exec needs a pid, which a fork bomb may hold every one of. So when it did not run to
        # the end, PID 1 is told to sweep (a signal needs no pid) and the exec is tried again to confirm.
        # If it never runs, the caller still sees the step end and can replace the sandbox.
        for attempt in range(STRAGGLER_TRIES):
            try:
                code, out, _ = self._run(sandbox, KILL_STRAGGLERS_ARGV, deadline_s=HUNG_GRACE_S)
            except SandboxError:
                code, out = None, b""
            if code == 0 and out == SWEPT:
                return
            self._signal_sweep(sandbox)
            time.sleep(min(0.05 * (attempt + 1), 0.5))
        log.warning("sandbox %s: the agent's processes could not be confirmed killed", sandbox.id[:12])

    def _signal_sweep(self, sandbox: Sandbox) -> None:
        try:
            self._api.kill(sandbox.id, signal=SWEEP_SIGNAL.name)
        except (APIError, NotFound) as exc:  # gone or stopped: nothing of the agent's is left running
            log.debug("sandbox %s: sweep signal not sent (%s)", sandbox.id[:12], exc)

    def _new_oom_kills(self, sandbox: Sandbox) -> bool:
        try:
            _, counters, _ = self._run(sandbox, OOM_COUNTER_ARGV, deadline_s=HUNG_GRACE_S)
        except SandboxError:
            return False
        state = self._state(sandbox)
        count = oom_kill_count(counters)
        new, state.oom_kills = count > state.oom_kills, count
        return new

    # -- files ---------------------------------------------------------------------------------------

    def write_files(self, sandbox: Sandbox, files: Mapping[str, bytes]) -> None:
        relative = {workspace_relative(path): body for path, body in files.items()}
        code, _, err = self._run(sandbox, WRITE_ARGV, stdin=files_tar(relative))
        if code != 0:
            raise SandboxError(f"writing {sorted(relative)} failed: {err.decode(errors='replace').strip()}")

    def write_inputs(self, sandbox: Sandbox, files: Mapping[str, bytes]) -> str:
        """Files under /inputs, owned by root and read-only: the sandbox's user can read, never change them.
        Written by a `docker exec` as uid 0 (no capabilities even so), never through the exec server."""
        relative = {workspace_relative(path): body for path, body in files.items()}
        out, err = ByteSink(64 * 1024), ByteSink(64 * 1024)
        archive = files_tar(relative, mode=0o444)
        outcome = run_exec(
            self._api, sandbox.id, INPUTS_ARGV, stdout=out, stderr=err, stdin=archive,
            deadline_s=INTERNAL_DEADLINE_S, user="0",
        )  # fmt: skip
        if outcome.exit_code != 0:
            detail = bytes(err.data).decode(errors="replace").strip()
            raise SandboxError(f"writing inputs {sorted(relative)} failed: {detail or outcome}")
        return INPUTS

    def read_file(self, sandbox: Sandbox, path: str) -> bytes:
        relative = workspace_relative(path)
        code, body, err = self._run(
            sandbox, ["cat", "--", f"{WORKSPACE}/{relative}"], max_output=READ_MAX_BYTES
        )
        if code == 0:
            return body
        if b"No such file" in err:
            raise SandboxFileNotFound(f"{relative} is not in the workspace")
        raise SandboxError(f"reading {relative} failed: {err.decode(errors='replace').strip()}")

    # -- snapshots -----------------------------------------------------------------------------------

    def snapshot(self, sandbox: Sandbox) -> SnapshotId:
        state = self._state(sandbox)
        with state.lock:
            try:
                return self._snapshot(sandbox, state.hashes)
            except MissingContent:  # the store lost blobs this sandbox had stored: fetch everything
                state.hashes.forget()
                return self._snapshot(sandbox, state.hashes)

    def _snapshot(self, sandbox: Sandbox, hashes: HashCache) -> SnapshotId:
        listing = self._listing(sandbox)
        stale = hashes.stale(listing)
        fetched = self._fetch(sandbox, stale) if stale else {}  # in the store already
        manifest = hashes.manifest(listing, fetched)
        snapshot_id = self.snapshots.save(manifest, {})
        hashes.remember(listing, fetched)
        return snapshot_id

    def _listing(self, sandbox: Sandbox) -> Listing:
        """The workspace's listing. Output that does not parse is taken once more: the listing always
        prints the clock line first, yet under load a listing through `docker exec` once came back with
        exit code 0 or 1 and no output at all (the engine's stream lost it); garbled twice, the sandbox is
        given up as lost (`SandboxError`), never a `ValueError` out of a snapshot."""
        garbled: ListingError | None = None
        for _ in range(LISTING_TRIES):
            code, listed, err = self._run(sandbox, LISTING_ARGV)
            if code not in (0, 1):  # 1: some folder was unreadable (the agent's doing); the rest is listed
                raise SandboxError(f"listing the workspace failed: {err.decode(errors='replace').strip()}")
            try:
                return parse_listing(listed)
            except ListingError as exc:
                garbled = exc
                log.warning("sandbox %s: a listing that does not parse (%s)", sandbox.id[:12], exc)
        raise SandboxError(
            f"listing the workspace gave output that does not parse, {LISTING_TRIES} times: {garbled}"
        ) from garbled

    def _fetch(self, sandbox: Sandbox, paths: list[str]) -> dict[str, FetchedFile]:
        """Stream the files out of the sandbox straight into the object store (see ingest.py)."""
        names = b"".join(path.encode("utf-8", "surrogateescape") + b"\0" for path in paths)
        most = sandbox.spec.quotas.workspace_bytes + 1024 * len(paths) + MIB  # the files plus tar headers
        ingest = TarIngest(
            self.snapshots.objects,
            in_flight_bytes=SNAPSHOT_IN_FLIGHT_BYTES,
            put_threads=self.snapshots.put_threads,
        )
        try:
            self._run_into(sandbox, FETCH_ARGV, ingest, stdin=names)
        except BaseException:
            ingest.close()
            raise
        try:
            files = ingest.finish()
        except IngestError as exc:
            raise SandboxError(f"fetching files from sandbox {sandbox.id[:12]} failed: {exc}") from exc
        if ingest.total > most:
            raise SandboxError(f"tar in sandbox {sandbox.id[:12]} wrote over {most} bytes")
        return files

    def restore(self, sandbox: Sandbox, snapshot_id: SnapshotId) -> None:
        manifest = self.snapshots.load(snapshot_id)
        archive = tree_tar(manifest, self.snapshots.content)
        state = self._state(sandbox)
        with state.lock:
            state.hashes.forget()
            code, listed, err = self._run(sandbox, RESTORE_ARGV, stdin=archive)
            if code != 0:
                raise SandboxError(f"restoring {snapshot_id} failed: {err.decode(errors='replace').strip()}")
            state.hashes.seed(parse_listing(listed), manifest)


def is_running(client: docker.DockerClient, sandbox: Sandbox) -> bool:
    try:
        return bool(client.api.inspect_container(sandbox.id)["State"]["Running"])
    except NotFound:
        return False
