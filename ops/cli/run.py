"""`trialog run start` and `trialog run status`: start a run end to end, and see how it goes.

`run start` ensures the run's topics, publishes its tasks (after `trialog tasks validate --runs 1` when
`--validate` is given), then runs the scheduler in the foreground until `--episodes` episodes have ended.
With `--spawn` it first starts one worker of each kind for the run as subprocesses (streams, sandbox,
rollout, verifier: `python -m ops.cli worker KIND --run RUN --bootstrap ...`, each in its own consumer
group `<run>.trialog-<kind>`, sandbox and verifier on the stack's object store, logs under
`$TRIALOG_HOME/runs/<run>/`), and stops them (SIGTERM, then SIGKILL after a grace period) when the
scheduler is done. `run status RUN` folds the run's topics into counts (started, completed, failed by
class, in flight) and the mean reward, with what its control log says (paused, pinned, quarantine rules
and quarantined trajectories, version changes). `run pause RUN --reason TEXT` and `run resume RUN` write a
RunPaused / RunResumed on `<run>.run.control` (acks=all, waited): the scheduler starts no episode while
the run is paused.

Both answer within seconds, with what to run, when Kafka (or, for `--spawn` and `--validate`, Docker) is
not there. `register(subparsers)` adds the `run` command group to the `trialog` parser.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ops.cli import kit
from ops.cli.workers.scheduler import add_target_arguments, target_of
from ops.console import say
from streams.errors import StackError

if TYPE_CHECKING:
    from actors.scheduler.status import RunStatus
    from actors.scheduler.worker import SchedulerProcess, SchedulerSettings
    from ops.progress import ProgressBar
    from ops.run_workers import Workers
    from schemas.common import RecordMeta
    from schemas.run_control import ControlRecord, GuardSettings

POLICIES = ("scripted", "random", "llm")


def register(subparsers: kit.Subparsers) -> None:
    run = kit.command(
        subparsers, "run", "start a run and follow it",
        description="Start runs and watch them.",
        examples=("trialog run start --tasks examples/tasks --episodes 8 --policy scripted --spawn",
                  "trialog run status RUN"),
    )  # fmt: skip
    commands = kit.subcommands(run, "run_command")

    start = kit.command(
        commands,
        "start",
        "publish tasks and start a run's episodes (with --spawn: and its workers) until N have ended",
        handler=_cmd_run_start,
        examples=(
            "trialog run start --tasks examples/tasks --episodes 8 --policy scripted --spawn",
            "trialog run start --tasks examples/tasks --episodes 16 --group-size 4 --policy random --spawn "
            "--run demo-1",
            "trialog run start --tasks examples/tasks --episodes 4 --policy llm --spawn "
            "--rollout-arg=--batch=4",
        ),
    )
    start.add_argument(
        "--tasks", type=Path, nargs="+", action="extend", required=True, metavar="DIR",
        help="task folders or folders of them",
    )  # fmt: skip
    start.add_argument(
        "--eval", type=kit.existing_dir, action="append", default=[], metavar="DIR",
        help="an evaluation task set: the run refuses to start if --tasks overlap it (same id or version, "
        "or shared long n-grams as `trialog tasks decontaminate` finds) (repeatable)",
    )  # fmt: skip
    start.add_argument("--policy", choices=POLICIES, required=True, help="the rollout workers' policy plugin")
    start.add_argument(
        "--run", type=kit.run_id, help="the run's id, its topic prefix (default: a new `run-<hex>`)"
    )
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
    start.add_argument(
        "--reward-config", type=Path, metavar="FILE",
        help="the reward configuration the run is pinned to and its spawned verifier composes with (TOML; "
        "actors/tasks/reward_config.py). Default: the brief's rule",
    )  # fmt: skip
    start.add_argument(
        "--static-signals",
        action="store_true",
        help="the spawned verifier also measures the lint and type findings each change adds (ruff, mypy)",
    )
    start.add_argument(
        "--grade-steps", metavar="MODE", default="off", type=_grade_steps,
        help="the spawned streams worker's step grading (process rewards: off, every, every:K, changed; "
        "see trialog worker streams --help)",
    )  # fmt: skip
    add_guard_arguments(start)
    kit.add_bootstrap(start)
    # The scheduler's own; spawned workers trace to the same endpoint and serve metrics on the next ports.
    kit.add_telemetry(start)

    status = kit.command(
        commands,
        "status",
        "counts of a run's episodes (started, completed, failed by class, in flight) and mean reward",
        handler=_cmd_run_status,
        examples=("trialog run status RUN", "trialog run status RUN --json --bootstrap 127.0.0.1:9092"),
    )
    kit.add_run(status, positional=True)
    kit.add_json(status)
    kit.add_bootstrap(status)

    pause = kit.command(
        commands,
        "pause",
        "pause a run: the scheduler starts no new episode until `trialog run resume RUN`",
        handler=_cmd_run_pause,
        examples=(
            "trialog run pause RUN --reason 'verifier image suspect'",
            "trialog run pause RUN --reason x --json",
        ),
    )
    kit.add_run(pause, positional=True)
    pause.add_argument("--reason", required=True, metavar="TEXT", help="why, kept in the run's control log")
    kit.add_json(pause)
    kit.add_bootstrap(pause)

    resume = kit.command(
        commands,
        "resume",
        "resume a paused run (a run that is not paused is left as it is)",
        handler=_cmd_run_resume,
        examples=("trialog run resume RUN", "trialog run resume RUN --reason 'image fixed' --json"),
    )
    kit.add_run(resume, positional=True)
    resume.add_argument("--reason", default="", metavar="TEXT", help="why, kept in the run's control log")
    kit.add_json(resume)
    kit.add_bootstrap(resume)


def add_guard_arguments(start: argparse.ArgumentParser) -> None:
    """The run's guard settings (`RunPinned.guard`, docs/guarding.md)."""
    from actors.guard.pinning import DEFAULT_CANARIES_PER_MINUTE, DEFAULT_MAX_CANARY_SHARE

    group = start.add_argument_group("guarding the run (pinned versions, canaries, pause, quarantine)")
    group.add_argument(
        "--canaries-per-minute", type=kit.non_negative_float, default=DEFAULT_CANARIES_PER_MINUTE,
        metavar="R", help="canary grades asked for per minute; 0: none",
    )  # fmt: skip
    group.add_argument(
        "--max-canary-share", type=kit.fraction, default=DEFAULT_MAX_CANARY_SHARE, metavar="F",
        help="most of the grading capacity canaries may take",
    )  # fmt: skip
    group.add_argument(
        "--no-pause-on-canary-failure", action="store_true",
        help="a wrong canary alerts and quarantines but does not pause the scheduler (without it, it pauses)",
    )  # fmt: skip
    group.add_argument(
        "--no-canary-hold", action="store_true",
        help="the learner trains without waiting for canaries to vouch for a trajectory's grader "
        "(without it, it waits)",
    )  # fmt: skip
    group.add_argument(
        "--no-guard",
        action="store_true",
        help="neither pin the run nor (with --spawn) start its guard: no canaries, no quarantine",
    )


def guard_settings_of(args: argparse.Namespace) -> GuardSettings:
    from schemas.run_control import GuardSettings

    return GuardSettings(
        canaries_per_minute=args.canaries_per_minute,
        max_canary_share=args.max_canary_share,
        pause_on_canary_failure=not args.no_pause_on_canary_failure,
        hold_for_clearance=not args.no_canary_hold and args.canaries_per_minute > 0,
    )


def read_status(bootstrap: str, run: str) -> RunStatus:
    """The run's counts; a Kafka error (a broker that accepts connections but does not answer) as a
    `StackError`, not a traceback."""
    from kafka.errors import KafkaError

    from actors.scheduler.status import read_status as read

    try:
        return read(bootstrap, run)
    except KafkaError as exc:
        raise StackError(
            f"cannot read run {run!r} on {bootstrap}: {exc!r}", "check the stack: trialog status"
        ) from None


def refuse_overlap(train_folders: list[Path], eval_roots: list[Path]) -> None:
    """StackError when the training tasks overlap the evaluation sets: a shared id, a shared version (the
    same folder under two names), or a decontamination match. Checked before any service is touched."""
    from actors.tasks.decontaminate import decontaminate
    from actors.tasks.spec import TaskError, load_task, survey_tasks

    try:
        train = [load_task(folder) for folder in train_folders]
    except TaskError as exc:
        raise StackError(str(exc), "fix the task folders given to --tasks") from None
    evals = survey_tasks(eval_roots)
    if evals.problems:
        raise StackError(str(evals.problems[0]), "fix the task folders given to --eval")
    by_id = {task.id: task for task in evals.tasks}
    by_version = {task.version: task for task in evals.tasks}
    overlaps = [
        f"{task.id} (the eval set has {'this id' if task.id in by_id else by_version[task.version].id})"
        for task in train
        if task.id in by_id or task.version in by_version
    ]
    report = decontaminate(train, list(evals.tasks))
    overlaps += [
        f"{flagged.task} (shares text with {flagged.matches[0].eval_task})" for flagged in report.flagged
    ]
    if overlaps:
        shown = ", ".join(sorted(set(overlaps))[:10])
        raise StackError(
            f"{len(set(overlaps))} training tasks overlap the evaluation set: {shown}",
            "drop them from --tasks (trialog tasks decontaminate --train ... --eval ... lists them all)",
        )


def _grade_steps(text: str) -> str:
    from streams.step_grading import StepGrading

    try:
        return str(StepGrading.parse(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _cmd_run_start(args: argparse.Namespace) -> int:
    from actors.scheduler.worker import SchedulerSettings
    from actors.tasks.publish import publish_tasks
    from actors.tasks.spec import TaskError, find_tasks
    from ops.cli.workers.scheduler import run_scheduler
    from ops.paths import Paths
    from ops.run_workers import Workers, validate_tasks, worker_commands
    from ops.stack.images import sandbox_ref
    from ops.stores import open_objects
    from ops.telemetry.setup import start as start_telemetry
    from streams.kafka.topics import ensure_topics

    run = args.run if args.run is not None else f"run-{uuid.uuid4().hex[:8]}"
    target = target_of(args, run)
    try:
        folders = [folder for root in args.tasks for folder in find_tasks(root)]
    except TaskError as exc:
        raise StackError(str(exc), "fix the task folders given to --tasks") from None
    if args.eval:
        refuse_overlap(folders, args.eval)
    reward = kit.reward_config_of(args.reward_config)  # a bad file fails here, before any service is touched
    bootstrap = kit.require_kafka(kit.bootstrap_of(args))
    engine = None
    if args.spawn or args.validate or not args.no_guard:
        # The sandbox and verifier workers and the validation run sandboxes; the pin names the image's id.
        engine = kit.require_docker()
    paths = Paths.from_env()
    objects = open_objects(paths=paths)  # the store every worker will use: asked before anything starts
    started = time.monotonic()
    if args.validate:
        validate_tasks(args.tasks)
    created = ensure_topics(bootstrap, run)
    say(f"run {run}: {len(created)} topics created on {bootstrap}")
    publication = publish_tasks(folders, bootstrap, objects, str(sandbox_ref()), run=run)
    published = publication.published
    say(f"run {run}: published {len(published)} tasks ({', '.join(published)}) [{_since(started)}]")
    if publication.rejected:
        rejected = publication.rejected
        say(f"run {run}: {len(rejected)} tasks rejected in review, not published: {', '.join(rejected)}")
        folders = list(publication.folders)  # the pin names what the run grades: only what was published
    if not args.no_guard:
        from ops.run_pin import image_version, pin_run

        pin = pin_run(
            bootstrap,
            run,
            folders,
            image_version(engine, str(sandbox_ref())),
            guard_settings_of(args),
            reward,
        )
        rate = f"canaries {pin.guard.canaries_per_minute:g}/min"
        hint = "" if args.spawn else " (start its guard: trialog worker guard --run RUN --tasks ...)"
        say(f"run {run}: pinned verifier {pin.verifier[:12]}, image {pin.image[:19]}, reward "
            f"{pin.reward_config[:12]}, {len(pin.tasks)} tasks; {rate}{hint}")  # fmt: skip
    settings = SchedulerSettings(bootstrap, target)
    telemetry = start_telemetry(kit.telemetry_of(args, "trialog-scheduler"))
    instance = f"{socket.gethostname()}-{os.getpid()}"
    if not args.spawn:
        code = run_scheduler(settings, instance)
    else:
        workers = Workers(paths.component("runs") / (run or "default") / "logs")
        commands = worker_commands(
            run, bootstrap, args.policy, args.tasks, paths, args.rollout_arg, telemetry.config,
            guard=not args.no_guard, reward_config=args.reward_config, grade_steps=args.grade_steps,
            static_signals=args.static_signals,
        )  # fmt: skip
        workers.start(commands)
        try:
            code = schedule_beside(workers, settings, instance)
        finally:
            codes = workers.stop()
            say(f"run {run}: workers stopped {codes} [{_since(started)}]")
    telemetry.close()
    say(f"{read_status(bootstrap, run).line()} [{_since(started)}]")
    return code


def schedule_beside(workers: Workers, settings: SchedulerSettings, instance: str) -> int:
    """The scheduler in a thread while this one watches the workers: one that dies stops the run (1);
    SIGTERM or SIGINT stop the scheduler, then the workers."""
    from actors.scheduler.worker import SchedulerProcess
    from ops.progress import ProgressBar
    from schemas.origin import Origin

    process = SchedulerProcess(settings, Origin.system("scheduler", instance))
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(process.run()), name="scheduler", daemon=True)
    bar = ProgressBar(settings.target.episodes, f"run {settings.target.run_id}: episodes ended").start()
    with kit.stop_on_signals(process.stopping):
        thread.start()
        try:
            while thread.is_alive():
                thread.join(timeout=1.0)
                _show(bar, process)
                if (dead := workers.dead()) and thread.is_alive():
                    say(f"run {settings.target.run_id}: workers exited {dead}; stopping (see {workers.logs})")
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
    status = read_status(kit.require_kafka(kit.bootstrap_of(args)), args.run)
    if args.json:
        print(json.dumps(status.to_json(), indent=2))
    else:
        print("\n".join([status.line(), *status.guard_lines()]))
    return kit.EXIT_OK


def _cmd_run_pause(args: argparse.Namespace) -> int:
    from schemas.run_control import RunPaused

    def record(meta: RecordMeta) -> RunPaused:
        return RunPaused(meta, args.run, args.reason)

    return _control(args, pausing=True, make=record)


def _cmd_run_resume(args: argparse.Namespace) -> int:
    from schemas.run_control import RunResumed

    def record(meta: RecordMeta) -> RunResumed:
        return RunResumed(meta, args.run, args.reason)

    return _control(args, pausing=False, make=record)


def _control(args: argparse.Namespace, *, pausing: bool, make: Callable[[RecordMeta], ControlRecord]) -> int:
    """Write a pause or a resume on the run's control log, unless the run already is so (said, exit 0)."""
    from ops.cli.run_log_args import log_errors
    from ops.guard_log import ControlWriter, operator_meta, read_control

    bootstrap = kit.require_kafka(kit.bootstrap_of(args))
    with log_errors():
        control = read_control(bootstrap, args.run)
    if control.is_paused == pausing:
        reason = control.paused.reason if control.paused is not None else ""
        line = f"run {args.run} is already paused ({reason})" if pausing else f"run {args.run} is not paused"
        _said(args, written=False, paused=control.is_paused, line=f"{line}: nothing written")
        return kit.EXIT_OK
    written = make(operator_meta(int(time.time() * 1_000_000)))
    writer = ControlWriter(bootstrap, args.run)
    try:
        writer.write(written)
    except Exception as exc:  # kafka-python's errors: nothing is in the log
        raise StackError(
            f"could not write on {writer.topic}: {exc!r}", "check the stack: trialog status"
        ) from None
    finally:
        writer.close()
    line = (
        f"run {args.run} paused ({args.reason}): no new episode until trialog run resume {args.run}"
        if pausing
        else f"run {args.run} resumed"
    )
    _said(args, written=True, paused=pausing, line=line)
    return kit.EXIT_OK


def _said(args: argparse.Namespace, *, written: bool, paused: bool, line: str) -> None:
    if args.json:
        print(json.dumps({"run": args.run, "paused": paused, "written": written, "message": line}))
    else:
        print(line)
