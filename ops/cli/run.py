"""`trialog run start` and `trialog run status`: start a run end to end, and see how it goes.

`run start` ensures the run's topics, publishes its tasks (after `trialog tasks validate --runs 1` when
`--validate` is given), then runs the scheduler in the foreground until `--episodes` episodes have ended.
With `--spawn` it first starts one worker of each kind for the run as subprocesses (streams, sandbox,
rollout, verifier: `python -m ops.cli worker KIND --run RUN --bootstrap ...`, each in its own consumer
group `<run>.trialog-<kind>`, sandbox and verifier on the stack's object store, logs under
`$TRIALOG_HOME/runs/<run>/`), and stops them (SIGTERM, then SIGKILL after a grace period) when the
scheduler is done. `run status RUN` folds the run's topics into counts (started, completed, failed by
class, in flight) and the mean reward.

`register(subparsers)` adds the `run` command group to the `trialog` parser.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from ops.cli.workers.scheduler import add_target_arguments, target_from_args
from ops.paths import Paths
from ops.progress import ProgressBar
from ops.run_workers import Workers, validate_tasks, worker_commands
from ops.stack.images import sandbox_ref
from ops.telemetry import config as telemetry_config
from schemas.blobs import LocalObjectStore
from streams.errors import StackError

if TYPE_CHECKING:
    from actors.scheduler.status import RunStatus
    from actors.scheduler.worker import SchedulerProcess, SchedulerSettings

POLICIES = ("scripted", "random", "llm")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = subparsers.add_parser("run", help="start a run and follow it", description="Start and watch runs.")
    commands = run.add_subparsers(dest="run_command", required=True, metavar="COMMAND")

    text = "publish tasks and start a run's episodes (with --spawn: and its workers) until N have ended"
    start = commands.add_parser("start", help=text, description=text)
    start.add_argument(
        "--tasks", type=Path, nargs="+", action="extend", required=True, metavar="DIR",
        help="task folders or folders of them",
    )  # fmt: skip
    start.add_argument("--episodes", type=int, required=True, help="how many episodes the run has")
    start.add_argument("--policy", choices=POLICIES, required=True, help="the rollout workers' policy plugin")
    start.add_argument("--run", help="the run's topic prefix (default: a new `run-<hex>`)")
    start.add_argument(
        "--rollout-arg", action="append", default=[], metavar="ARG",
        help="an extra argument for the spawned rollout worker, e.g. --rollout-arg=--batch=4 (repeatable)",
    )  # fmt: skip
    add_target_arguments(start)
    start.add_argument(
        "--spawn", action="store_true", help="also run one worker of each kind as subprocesses"
    )
    start.add_argument(
        "--validate", action="store_true", help="first run `trialog tasks validate --runs 1` on the tasks"
    )
    start.add_argument("--bootstrap", help="Kafka bootstrap servers (default: the local stack's broker)")
    # The scheduler's own; spawned workers trace to the same endpoint and serve metrics on the next ports.
    telemetry_config.add_arguments(start)
    start.set_defaults(handler=_cmd_run_start)

    text = "counts of a run's episodes (started, completed, failed by class, in flight) and mean reward"
    status = commands.add_parser("status", help=text, description=text)
    status.add_argument("run", metavar="RUN", help="the run's topic prefix")
    status.add_argument("--json", action="store_true", help="print one JSON object")
    status.add_argument("--bootstrap", help="Kafka bootstrap servers (default: the local stack's broker)")
    status.set_defaults(handler=_cmd_run_status)


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _bootstrap(args: argparse.Namespace) -> str:
    if args.bootstrap:
        return str(args.bootstrap)
    from ops.stack.stack import StackConfig

    return StackConfig.load(Paths.from_env()).kafka.bootstrap


def read_status(bootstrap: str, run: str) -> RunStatus:
    from actors.scheduler.status import read_status as read

    return read(bootstrap, run)


def _cmd_run_start(args: argparse.Namespace) -> int:
    from actors.scheduler.worker import SchedulerSettings, run_scheduler
    from actors.tasks.publish import publish_tasks
    from actors.tasks.spec import TaskError, find_tasks
    from ops.telemetry.setup import start as start_telemetry
    from streams.kafka.topics import ensure_topics

    run = args.run if args.run is not None else f"run-{uuid.uuid4().hex[:8]}"
    try:
        target = target_from_args(argparse.Namespace(**{**vars(args), "run": run}))
        folders = [folder for root in args.tasks for folder in find_tasks(root)]
    except (ValueError, TaskError) as exc:
        raise StackError(f"trialog run start: {exc}", "fix the options") from None
    paths = Paths.from_env()
    bootstrap = _bootstrap(args)
    started = time.monotonic()
    if args.validate:
        validate_tasks(args.tasks)
    created = ensure_topics(bootstrap, run)
    _say(f"run {run}: {len(created)} topics created on {bootstrap}")
    published = publish_tasks(
        folders, bootstrap, LocalObjectStore(paths.objects), str(sandbox_ref()), run=run
    )
    _say(f"run {run}: published {len(published)} tasks ({', '.join(published)}) [{_since(started)}]")
    settings = SchedulerSettings(bootstrap, target)
    telemetry = start_telemetry(telemetry_config.from_args(args, "trialog-scheduler"))
    if not args.spawn:
        code = run_scheduler(settings)
    else:
        workers = Workers(paths.component("runs") / (run or "default") / "logs")
        commands = worker_commands(
            run, bootstrap, args.policy, args.tasks, paths, args.rollout_arg, telemetry.config
        )
        workers.start(commands)
        try:
            code = _schedule_beside(workers, settings)
        finally:
            codes = workers.stop()
            _say(f"run {run}: workers stopped {codes} [{_since(started)}]")
    telemetry.close()
    _say(f"{read_status(bootstrap, run).line()} [{_since(started)}]")
    return code


def _schedule_beside(workers: Workers, settings: SchedulerSettings) -> int:
    """The scheduler in a thread while this one watches the workers: one that dies stops the run (1)."""
    from actors.scheduler.worker import SchedulerProcess
    from schemas.origin import Origin

    process = SchedulerProcess(settings, Origin.system("scheduler", f"{socket.gethostname()}-{os.getpid()}"))
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(process.run()), name="scheduler", daemon=True)
    thread.start()
    bar = ProgressBar(settings.target.episodes, f"run {settings.target.run_id}: episodes ended").start()
    try:
        while thread.is_alive():
            thread.join(timeout=1.0)
            _show(bar, process)
            if (dead := workers.dead()) and thread.is_alive():
                _say(f"run {settings.target.run_id}: workers exited {dead}; stopping (see {workers.logs})")
                process.stopping.set()
                thread.join(timeout=30)
                return 1
    finally:
        bar.close()
        process.stopping.set()
    return codes[0] if codes else 1


def _show(bar: ProgressBar, process: SchedulerProcess) -> None:
    # Read from another thread: dict sizes only (an episode is counted once, completed or failed).
    completed, failed = len(process.state.completed), len(process.state.failed)
    bar.update(completed + failed, f"completed {completed}, failed {failed}")


def _since(started: float) -> str:
    return f"{time.monotonic() - started:.1f} s"


def _cmd_run_status(args: argparse.Namespace) -> int:
    status = read_status(_bootstrap(args), args.run)
    print(json.dumps(status.to_json(), indent=2) if args.json else status.line())
    return 0
