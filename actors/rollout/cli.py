"""`trialog worker rollout`: serve `policy.requests` from Kafka with a policy plugin until stopped.

`register(subparsers)` adds the `rollout` command to a `worker` command group. Plugins: `scripted` plays
the actions of `--actions FILE` (`{task id: [tool call, ...]}`, see `actors.rollout.policy`) and/or the
reference solutions of the tasks under `--solutions DIR`; `random` draws among harmless commands and
submit, seeded by each request's sampling seed and step.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
from pathlib import Path
from types import FrameType

from actors.rollout.policy import Policy
from ops.telemetry import config as telemetry_config

POLICIES = ("scripted", "random")


def register(workers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    text = "serve policy.requests from Kafka: sample each action from a policy plugin, answer ActionProposed"
    command = workers.add_parser("rollout", help=text, description=text)
    command.add_argument("--policy", choices=POLICIES, default="scripted", help="the policy plugin")
    command.add_argument(
        "--actions", type=Path, help="scripted: JSON file {task id: [tool call, ...]} of actions to play"
    )
    command.add_argument(
        "--solutions", type=Path, action="append", default=[],
        help="scripted: play the reference solution of each task under DIR (repeatable)",
    )  # fmt: skip
    command.add_argument("--bootstrap", help="Kafka bootstrap servers (default: the local stack's broker)")
    command.add_argument("--run", default="", help="the run's topic prefix (default: none)")
    command.add_argument(
        "--group", default="trialog-rollout", help="consumer group (default trialog-rollout)"
    )
    command.add_argument("--instance", default=f"{socket.gethostname()}-{os.getpid()}", help="worker name")
    telemetry_config.add_arguments(command)
    command.set_defaults(handler=_cmd_worker_rollout)


def make_policy(args: argparse.Namespace) -> Policy:
    """The plugin the arguments name; ValueError when they do not make one."""
    from actors.rollout.plugins import RandomPolicy, ScriptedPolicy

    if args.policy == "random":
        if args.actions or args.solutions:
            raise ValueError("--actions and --solutions are for --policy scripted")
        return RandomPolicy()
    if not args.actions and not args.solutions:
        raise ValueError("--policy scripted needs --actions FILE or --solutions DIR")
    policy = ScriptedPolicy.solving_folders(args.solutions) if args.solutions else ScriptedPolicy({})
    return policy.merged(ScriptedPolicy.from_file(args.actions)) if args.actions else policy


def _cmd_worker_rollout(args: argparse.Namespace) -> int:
    from actors.kafka_loop import LoopSettings, RequestLoop
    from actors.rollout.worker import ROUTE, RolloutWorker
    from actors.tasks.spec import TaskError
    from ops.console import StackError, say
    from ops.paths import Paths
    from ops.stack.stack import StackConfig
    from ops.telemetry.setup import start_from_args
    from schemas.sources import Origin

    try:
        policy = make_policy(args)
    except (ValueError, TaskError) as exc:
        raise StackError(f"trialog worker rollout: {exc}", "fix the policy options") from None
    bootstrap = args.bootstrap or StackConfig.load(Paths.from_env()).kafka.bootstrap
    origin = Origin.system("rollout", args.instance)
    worker = RolloutWorker(policy, origin)
    loop = RequestLoop(ROUTE, worker.handle, LoopSettings(bootstrap, args.group, args.run), origin)

    def stop(signum: int, frame: FrameType | None) -> None:
        loop.stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(logging.WARNING)
    where = f"{loop.requests_topic} on {bootstrap}, group {args.group}"
    say(f"rollout worker {args.instance} ({policy.name}): {where}")
    start_from_args(args, "trialog-rollout")
    loop.run()
    return 0


def main(argv: list[str] | None = None) -> int:
    from ops.cli import run_group

    return run_group(register, "trialog worker", sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    raise SystemExit(main())
