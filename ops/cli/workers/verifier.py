"""`trialog worker verifier`: serve `verify.requests` from Kafka until stopped (SIGINT or SIGTERM).

`register(subparsers)` adds the `verifier` command to a `worker` command group. Tasks come from local task
folders (`--tasks`, repeatable); final workspaces are snapshots in the object store the sandbox workers
write (`--objects`, the same store for every worker of the run). Each request is graded in a fresh
sandbox on the stack's Docker engine. No Docker engine: it exits at once with what to run; no Kafka yet:
it waits for the broker.

Beside `verify.requests` it serves the guard's canaries (`canary.requests` -> `canary.results`, consumer
group `<group>-canary`) with the same grader, so a canary sees exactly what an episode's grade would. Every
grade names its versions (`actors.verifier.versions`). `--fault` makes it a broken grader on purpose (a
drill, or the guard's tests): its grades name another verifier version.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from actors.verifier.faults import Fault
from ops.cli import kit
from ops.cli.workers.cleanup import add_cleanup, cleanup
from streams.errors import StackError

if TYPE_CHECKING:
    from actors.verifier.grading import SnapshotGrader
    from actors.verifier.judge import Judge
    from actors.verifier.tasks import FolderTasks
    from sandbox_agent.backend import SandboxBackend
    from schemas.blobs import ObjectStore

VERIFIER_LABEL = "dev.trialog.verifier"
PROGRESS_NICE = 10


def register(workers: kit.Subparsers) -> None:
    text = "serve verify.requests from Kafka: grade each final snapshot with the task's frozen tests"
    command = kit.command(
        workers,
        "verifier",
        text,
        handler=_cmd_worker_verifier,
        examples=(
            "trialog worker verifier --run RUN --tasks examples/tasks",
            "trialog worker verifier --run RUN --tasks examples/tasks --tasks more/tasks --objects /shared/o",
        ),
    )
    command.add_argument(
        "--tasks", type=Path, action="append", required=True, metavar="DIR",
        help="a task folder or a folder of them (repeatable)",
    )  # fmt: skip
    kit.add_objects(command, "the object store shared by all workers of the run")
    kit.add_bootstrap(command)
    kit.add_run(command)
    kit.add_group(command, "verifier")
    kit.add_instance(command)
    command.add_argument(
        "--fault", choices=[fault.value for fault in Fault], default=None,
        help="inject a grading fault, for drills and tests: every grade passes (pass-all) or fails "
        "(fail-all); the grades name another verifier version (default: none)",
    )  # fmt: skip
    command.add_argument(
        "--static-signals",
        action="store_true",
        help="also measure the lint findings and type errors each change adds (ruff and mypy in the grading "
        "sandbox: seconds more per grade; the lint and types components)",
    )
    command.add_argument(
        "--judge-model",
        type=Path,
        metavar="DIR",
        help="score each change with this language model as a judge (the judge component; optional, read "
        "by the policy's own text, so weighed 0 unless a reward configuration says otherwise)",
    )
    command.add_argument(
        "--reward-config", type=Path, metavar="FILE",
        help="compose rewards with this reward configuration (TOML; actors/tasks/reward_config.py; its "
        "sha256 is its version, named in every grade). Default: the brief's rule, no component weighed",
    )  # fmt: skip
    add_cleanup(command)
    kit.add_telemetry(command)
    kit.add_lifecycle(command)


def _judge(model_dir: Path) -> Judge:
    """A model judge on the model folder, through the torch rollout backend (one thread: it shares the
    machine with the grading sandboxes)."""
    import torch

    from actors.rollout.llm import load_llm_policy
    from actors.verifier.judge import ModelJudge

    if not model_dir.is_dir():
        raise StackError(f"no model folder at {model_dir}", "trialog model prepare makes one")
    torch.set_num_threads(1)
    policy = load_llm_policy(model_dir, max_new_tokens=3)
    tokenizer = policy.encoder.tokenizer
    return ModelJudge(
        policy.backend, policy.encoder.encode_messages,
        lambda ids: str(tokenizer.decode(list(ids), skip_special_tokens=True)),  # type: ignore[attr-defined]
    )  # fmt: skip


def graders(
    backend: SandboxBackend, objects: ObjectStore, *, static: bool, diff: bool
) -> tuple[SnapshotGrader, SnapshotGrader]:
    """The episodes' grader and the process grades' one: at low priority, with the same measures. They
    share the worker's grade cache, so a final grade answered from a process grade's entry must hold
    everything a final grade measures."""
    from actors.verifier.grading import SnapshotGrader
    from ops.stack.sandboxes import default_image

    image = default_image()
    return (
        SnapshotGrader(backend, objects, image, static=static, diff=diff),
        SnapshotGrader(backend, objects, image, static=static, diff=diff, background=True),
    )


def _niced(run: Callable[[], None]) -> Callable[[], None]:
    """`run` on a thread of lower CPU priority (Linux nices threads one by one): the process grades'
    restores and copies yield to the episodes' grades on a contended machine."""

    def niced() -> None:
        with contextlib.suppress(OSError):  # a system that does not nice threads runs it as it is
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), PROGRESS_NICE)
        run()

    return niced


def poll_interval_ms(tasks: FolderTasks) -> int:
    """How long one grading may keep the loop from polling: the build and the tests may each take the
    slowest task's timeout, plus sandbox start and copies; never under the default 15 minutes."""
    slowest = max((task.spec.timeout_s for task in tasks.tasks), default=0.0)
    return max(900_000, int((2 * slowest + 300) * 1000))


def _cmd_worker_verifier(args: argparse.Namespace) -> int:
    from actors.tasks.spec import TaskError
    from actors.verifier.tasks import FolderTasks
    from actors.verifier.versions import ImageIds, Versioner, verifier_version
    from actors.verifier.worker import CANARY_ROUTE, PROGRESS_ROUTE, ROUTE, VERIFIER_ID, VerifierWorker
    from ops.console import say
    from ops.paths import Paths
    from ops.stack.sandboxes import default_image
    from ops.stores import open_objects
    from ops.telemetry.setup import start as start_telemetry
    from sandbox_agent.docker_backend import DockerBackend
    from schemas.origin import Origin
    from streams.kafka.request_loop import LoopSettings, RequestLoop

    try:
        tasks = FolderTasks(args.tasks)
    except TaskError as exc:
        raise StackError(str(exc), "fix or remove that task folder") from None
    reward = kit.reward_config_of(args.reward_config)
    engine = kit.require_docker()
    paths = Paths.from_env()
    bootstrap = kit.bootstrap_of(args)
    group = kit.group_of(args, "verifier")
    objects = open_objects(args.objects, paths)
    client = engine.client()
    try:
        backend = DockerBackend(client, objects, labels={VERIFIER_LABEL: args.instance})
        origin = Origin.system("verifier", args.instance)
        fault = None if args.fault is None else Fault(args.fault)
        version = verifier_version(VERIFIER_ID, {} if fault is None else {"fault": fault.value})
        image_ids = ImageIds(lambda ref: str(client.images.get(ref).id), time.monotonic)
        judge = _judge(args.judge_model) if args.judge_model is not None else None
        grader, background = graders(backend, objects, static=args.static_signals, diff=judge is not None)
        worker = VerifierWorker(
            tasks, grader, objects, origin,
            versions=Versioner(version, image_ids, default_image(), reward), fault=fault, reward=reward,
            judge=judge, progress_grader=background,
        )  # fmt: skip
        poll_ms = poll_interval_ms(tasks)
        settings = LoopSettings(bootstrap, group, args.run, max_poll_interval_ms=poll_ms)
        loop = RequestLoop(ROUTE, worker.handle, settings, origin)
        canary_settings = LoopSettings(bootstrap, f"{group}-canary", args.run, max_poll_interval_ms=poll_ms)
        canaries = RequestLoop(CANARY_ROUTE, worker.handle_canary, canary_settings, origin)
        canaries.stopping = loop.stopping  # one stop for every loop, one health
        canaries.health = loop.health
        # Intermediate workspaces (process rewards), in a thread and a consumer group of their own: a burst
        # of them never queues ahead of a final grade (they share the machine's cores, which the
        # process-reward benchmark measures).
        progress_settings = LoopSettings(
            bootstrap, f"{group}-progress", args.run, max_poll_interval_ms=poll_ms
        )
        progress = RequestLoop(PROGRESS_ROUTE, worker.handle_progress, progress_settings, origin)
        progress.stopping = loop.stopping
        progress.health = loop.health
        kit.worker_logging()
        where = f"{loop.requests_topic} and {canaries.requests_topic} on {bootstrap}, group {group}"
        faulty = "" if fault is None else f", FAULT INJECTED: {fault.value}"
        say(f"verifier {args.instance} ({len(tasks.ids)} tasks, version {version[:12]}, reward "
            f"configuration {reward.version[:12]}{faulty}): {where}")  # fmt: skip
        start_telemetry(kit.telemetry_of(args, "trialog-verifier"))
        with cleanup(client, args), kit.worker_lifetime(args, loop.stopping, loop.health):
            beside = threading.Thread(target=canaries.run, name="canaries", daemon=True)
            beside.start()
            grading_steps = threading.Thread(target=_niced(progress.run), name="progress", daemon=True)
            grading_steps.start()
            try:
                loop.run()
            finally:
                loop.stopping.set()
                beside.join(timeout=60)
                grading_steps.join(timeout=60)
    finally:
        client.close()
    return kit.EXIT_OK
