"""The worker processes of a run on this machine: the command line of each kind (exactly what `trialog run
start --spawn`, the demo and the integration tests start), and a supervisor that starts, kills and stops
them. Each worker runs `python -m ops.cli worker KIND --run RUN --bootstrap ...` in its own consumer group
`<run>.trialog-<kind>`, sandbox and verifier on the stack's object store (`ops.stores`), logs under
`$TRIALOG_HOME/runs/<run>/`."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ops.console import say
from ops.paths import REPO_ROOT, Paths
from ops.stores import location_of
from ops.telemetry import config as telemetry_config
from streams.errors import StackError

if TYPE_CHECKING:
    from ops.telemetry.config import TelemetryConfig
    from schemas.object_stores import StoreLocation

WORKER_KINDS = ("streams", "sandbox", "rollout", "verifier", "guard")
STOP_GRACE_S = 30.0


def worker_commands(
    run: str,
    bootstrap: str,
    policy: str,
    tasks: Sequence[Path],
    paths: Paths,
    rollout_args: Sequence[str] = (),
    telemetry: TelemetryConfig | None = None,
    instances: Mapping[str, str] | None = None,
    *,
    guard: bool = True,
    reward_config: Path | None = None,
    grade_steps: str = "off",
    static_signals: bool = False,
    objects: StoreLocation | None = None,
) -> dict[str, list[str]]:
    """The command line of each worker kind for `run` (one process each); `rollout_args` are more
    options of the rollout worker (the model, a pinned policy version); with `telemetry`, each traces
    to its endpoint and serves metrics on the n-th port after its port (streams +1, sandbox +2, ...).

    `instances` names the process of a kind (`--instance`, in the `producer` of every record it writes
    and on its sandboxes' labels); without a name a worker calls itself `<host>-<pid>`. The fault tests
    name each restart, to tell a restarted worker's records from those of the process it replaces.

    `guard`: also the run's guard (`trialog worker guard`: canaries, pause, quarantine; on by default, as a
    run pinned by `run start` has its learner wait for the canaries' clearance). `reward_config`: the
    verifier composes rewards with that file (`actors.tasks.reward_config`; default: the brief's rule).
    `grade_steps`: the streams worker's step grading (`streams.step_grading`; process rewards).
    `static_signals`: the verifier also measures the lint and type findings a change adds. `objects`: the
    run's object store, named on every command line that uses one (default: the stack's, `ops.stores`:
    `$TRIALOG_OBJECT_STORE`, else `paths.objects`)."""
    base = [sys.executable, "-m", "ops.cli", "worker"]
    common = ["--run", run, "--bootstrap", bootstrap]
    home = paths.component("runs") / (run or "default")
    store = str(location_of(objects, paths))
    folders = [arg for folder in tasks for arg in ("--tasks", str(folder))]
    rollout = ["--policy", policy, *rollout_args]
    if policy == "scripted":
        rollout += [arg for folder in tasks for arg in ("--solutions", str(folder))]
    commands = {
        "streams": [
            *base, "streams", *common, "--data-dir", str(home / "streams-data"), "--grade-steps", grade_steps,
        ],
        "sandbox": [
            *base, "sandbox", *common, "--group", f"{run}.trialog-sandbox",
            "--objects", store, "--state", str(home / "sandbox-steps"),
        ],
        "rollout": [*base, "rollout", *common, "--group", f"{run}.trialog-rollout", *rollout],
        "verifier": [
            *base, "verifier", *common, "--group", f"{run}.trialog-verifier",
            *folders, "--objects", store,
            *(["--reward-config", str(reward_config)] if reward_config is not None else []),
            *(["--static-signals"] if static_signals else []),
        ],
        # Grades nothing itself: asks the verifiers for canaries, watches the grades (actors.guard).
        "guard": [*base, "guard", *common, *folders, "--objects", store],
    }  # fmt: skip
    if not guard:
        del commands["guard"]
    if telemetry is not None:
        for offset, argv in enumerate(commands.values(), start=1):
            argv += telemetry_config.worker_options(telemetry, offset)
        if "guard" in commands and telemetry.metrics_port:
            # The guard's acquire-latency rule reads the sandbox worker's histogram from its metrics port.
            sandbox_port = telemetry.metrics_port + list(commands).index("sandbox") + 1
            commands["guard"] += ["--sandbox-metrics", f"http://127.0.0.1:{sandbox_port}/metrics"]
    for kind, instance in (instances or {}).items():
        commands[kind] += ["--instance", instance]
    return commands


@dataclass
class Workers:
    """Worker subprocesses of one run; `stop` ends them (SIGTERM, then SIGKILL after `grace_s`)."""

    logs: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, commands: dict[str, list[str]]) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        for kind, argv in commands.items():
            with (self.logs / f"{kind}.log").open("ab") as out:
                self.processes[kind] = subprocess.Popen(
                    argv, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
                )
            say(f"started {kind} worker (pid {self.processes[kind].pid}), log {self.logs / f'{kind}.log'}")

    def kill(self, kind: str) -> int:
        """SIGKILL the `kind` worker (a crash, not a shutdown) and stop watching it; returns its exit code.
        `start({kind: argv})` starts it again, appending to the same log."""
        process = self.processes.pop(kind)
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
        return process.wait()

    def dead(self) -> dict[str, int]:
        """Workers that exited already, with their exit codes."""
        return {kind: code for kind, p in self.processes.items() if (code := p.poll()) is not None}

    def stop(self, grace_s: float = STOP_GRACE_S) -> dict[str, int]:
        """Stop every worker; returns their exit codes."""
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        give_up = time.monotonic() + grace_s
        codes: dict[str, int] = {}
        for kind, process in self.processes.items():
            try:
                codes[kind] = process.wait(timeout=max(0.1, give_up - time.monotonic()))
            except subprocess.TimeoutExpired:
                say(f"{kind} worker (pid {process.pid}) did not stop in {grace_s:.0f} s: killing it")
                process.kill()
                codes[kind] = process.wait()
        return codes


def validate_tasks(tasks: Sequence[Path]) -> None:
    argv = [sys.executable, "-m", "ops.cli", "tasks", "validate", *map(str, tasks), "--runs", "1"]
    say("validating the tasks (trialog tasks validate --runs 1)")
    # Its verdict table is progress here: on stderr, so that a caller's `--json` stdout stays one document.
    if subprocess.run(argv, cwd=REPO_ROOT, check=False, stdout=sys.stderr).returncode != 0:
        raise StackError("some tasks are not valid", "fix or remove them (trialog tasks validate)")
