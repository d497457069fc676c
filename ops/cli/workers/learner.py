"""`trialog worker learner`: train the run's policy from `trajectories.completed` until stopped.

`register(subparsers)` adds the `learner` command to a `worker` command group. One learner per run: it
reads every partition itself and keeps its position in its checkpoint (`--checkpoint-dir`), so a restarted
learner resumes exactly where its last checkpoint was taken. New versions go to the object store
(`--objects`, the folder the rollout workers read) and to `policy.versions`.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import threading
from pathlib import Path
from types import FrameType

from learner.lora import DEFAULT_RANK, DEFAULT_TARGETS
from learner.samples import PROMPT_ENCODERS
from ops.telemetry import config as telemetry_config


def register(workers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    text = "train the policy near-on-policy from trajectories.completed; publish each new version"
    command = workers.add_parser("learner", help=text, description=text)
    add = command.add_argument
    add("--run", default="", help="the run's topic prefix and id (default: none)")
    add("--bootstrap", help="Kafka bootstrap servers (default: the local stack's broker)")
    add("--model", type=Path, help="model folder (default: the prepared SmolLM2-135M-Instruct)")
    add("--group-size", type=int, default=4, help="trajectories per group (the run's group size)")
    add("--group-timeout-s", type=float, default=120.0, help="train or skip an incomplete group after this")
    add("--max-staleness", type=int, default=2, help="drop trajectories more versions old than this")
    add("--groups-per-step", type=int, default=4,
        help="the most ready groups one training step takes: one when the learner keeps up, more when it has "
        "a backlog, which would otherwise go stale one version at a time (default 4)")  # fmt: skip
    add("--lora-rank", type=int, default=DEFAULT_RANK, help="LoRA rank; 0 trains every parameter")
    add("--lora-alpha", type=float, default=16.0, help="LoRA scale numerator (alpha / rank)")
    add("--lora-targets", default=",".join(DEFAULT_TARGETS), help="comma-separated linear layer names")
    add("--lr", type=float, default=1e-5, help="AdamW learning rate")
    add("--micro-batch", type=int, default=4, help="samples per forward pass")
    add("--epochs", type=int, default=1, help="PPO-clipped passes over each step's samples (default 1)")
    add("--temperature", type=float, default=1.0, help="the rollouts' sampling temperature")
    add("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    add("--prompt-encoder", choices=PROMPT_ENCODERS, default="chat", help="how prompts are rebuilt")
    add("--checkpoint-dir", type=Path, help="checkpoint folder (default: $TRIALOG_HOME/learner/RUN)")
    add("--objects", type=Path, help="object store folder shared with the rollout workers")
    add("--idle-checkpoint-s", type=float,
        help="when caught up, checkpoint progress made without a training step at most every S seconds "
        "(default 10)")  # fmt: skip
    add("--device", default="auto", help="cpu, cuda, cuda:N or auto (a GPU when there is one)")
    add("--instance", default=f"{socket.gethostname()}-{os.getpid()}", help="worker name")
    telemetry_config.add_arguments(command)
    command.set_defaults(handler=_cmd_worker_learner)


def device_of(name: str) -> str:
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def _cmd_worker_learner(args: argparse.Namespace) -> int:
    import torch

    from learner.kafka_io import KafkaAnnouncer, KafkaFeed
    from learner.learner import Learner, LearnerSettings
    from learner.loop import run
    from learner.lora import Adaptation
    from learner.model import load_model, prepare_model
    from learner.samples import make_encoder
    from learner.state import PlannerConfig
    from learner.trainer import TrainSettings
    from ops.console import say
    from ops.paths import Paths
    from ops.stack.stack import StackConfig
    from ops.telemetry.setup import start_from_args
    from schemas.blobs import LocalObjectStore
    from schemas.origin import Origin, SystemClock
    from streams.errors import StackError

    paths = Paths.from_env()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    try:
        settings = LearnerSettings(
            run_id=args.run,
            checkpoint_dir=args.checkpoint_dir or paths.home / "learner" / (args.run or "default"),
            planner=PlannerConfig(
                args.group_size, args.group_timeout_s, args.max_staleness, args.groups_per_step
            ),
            train=TrainSettings(micro_batch=args.micro_batch, temperature=args.temperature),
            adaptation=Adaptation(args.lora_rank, args.lora_alpha, tuple(args.lora_targets.split(","))),
            lr=args.lr,
            epochs=args.epochs,
        )
        model_dir = args.model or prepare_model(paths.cache)
        encoder = make_encoder(args.prompt_encoder, model_dir)
    except (ValueError, ImportError) as exc:
        raise StackError(f"trialog worker learner: {exc}", "fix the learner options") from None
    bootstrap = args.bootstrap or StackConfig.load(paths).kafka.bootstrap
    start_from_args(args, "trialog-learner")
    model = load_model(model_dir, device_of(args.device))
    announcer = KafkaAnnouncer(bootstrap, args.run)
    learner = Learner(model, encoder, LocalObjectStore(args.objects or paths.objects), announcer, settings,
                      Origin.system("learner", args.instance))  # fmt: skip
    resumed = learner.resume()
    feed = KafkaFeed(bootstrap, args.run, learner.state.offsets)
    stopping = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(logging.WARNING)
    where = "resumed at version " if resumed else "starting at version "
    say(f"learner {args.instance}: {feed.topic} on {bootstrap}, {where}{learner.state.version}")
    try:
        idle = {} if args.idle_checkpoint_s is None else {"idle_checkpoint_s": args.idle_checkpoint_s}
        run(learner, feed, SystemClock(), stopping, **idle)
    finally:
        feed.close()
        announcer.close()
    return 0
