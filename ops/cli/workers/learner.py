"""`trialog worker learner`: train the run's policy from `trajectories.completed` until stopped.

`register(subparsers)` adds the `learner` command to a `worker` command group. One learner per run: it
reads every partition itself and keeps its position in its checkpoint (`--checkpoint-dir`), so a restarted
learner resumes exactly where its last checkpoint was taken. New versions go to the object store
(`--objects`, the store the rollout workers read) and to `policy.versions`. It obeys the run's control
log (`run.control`, read from its beginning at every start): quarantined trajectories are never trained on,
and with the pin's hold for clearance a trajectory waits until canaries vouch for its grader.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from learner.defaults import DEFAULT_RANK, DEFAULT_TARGETS, IDLE_CHECKPOINT_S, PROMPT_ENCODERS
from ops.cli import kit
from streams.errors import StackError
from streams.lifecycle import Health


def register(workers: kit.Subparsers) -> None:
    text = "train the policy near-on-policy from trajectories.completed; publish each new version"
    command = kit.command(
        workers,
        "learner",
        text,
        handler=_cmd_worker_learner,
        examples=(
            "trialog worker learner --run RUN --device cuda",
            "trialog worker learner --run RUN --group-size 8 --lr 3e-5 --lora-rank 0 --threads 4",
        ),
    )
    add = command.add_argument
    kit.add_run(command)
    kit.add_bootstrap(command)
    add(
        "--model", type=Path, metavar="DIR", help="model folder (default: the prepared SmolLM2-135M-Instruct)"
    )
    add(
        "--group-size",
        type=kit.int_at_least(2),
        metavar="N",
        default=4,
        help="trajectories per group (the run's group size)",
    )
    add("--group-timeout-s", type=kit.positive_seconds, metavar="S", default=120.0,
        help="train or skip an incomplete group after this")  # fmt: skip
    add("--max-staleness", type=kit.non_negative_int, metavar="N", default=2,
        help="drop trajectories more versions old than this")  # fmt: skip
    add("--groups-per-step", type=kit.positive_int, metavar="N", default=4,
        help="the most ready groups one training step takes: one when the learner keeps up, more when it has "
        "a backlog, which would otherwise go stale one version at a time")  # fmt: skip
    add(
        "--lora-rank",
        type=kit.non_negative_int,
        metavar="N",
        default=DEFAULT_RANK,
        help="LoRA rank; 0 trains every parameter",
    )
    add(
        "--lora-alpha",
        type=kit.positive_float,
        metavar="X",
        default=16.0,
        help="LoRA scale numerator (alpha / rank)",
    )
    add(
        "--lora-targets",
        metavar="NAMES",
        default=",".join(DEFAULT_TARGETS),
        help="comma-separated linear layer names",
    )
    add("--lr", type=kit.positive_float, metavar="X", default=1e-5, help="AdamW learning rate")
    add(
        "--micro-batch",
        type=kit.positive_int,
        metavar="N",
        default=8,
        help="samples per forward pass (the turns of one prompt share a pass, which runs the prompt once)",
    )
    add(
        "--epochs",
        type=kit.positive_int,
        metavar="N",
        default=1,
        help="PPO-clipped passes over each step's samples",
    )
    add("--temperature", type=kit.positive_float, metavar="X", default=1.0,
        help="the rollouts' sampling temperature (log-probabilities are taken at it)")  # fmt: skip
    add(
        "--threads",
        type=kit.non_negative_int,
        metavar="N",
        default=0,
        help="torch CPU threads (0: torch's default)",
    )
    add(
        "--process-reward-coef",
        type=kit.non_negative_float,
        metavar="X",
        default=0.0,
        help="add X times each step's process reward (its change in pass rate, from the process grades "
        "a streams worker with --grade-steps asks for) to its turn's advantage; 0: the outcome alone",
    )
    add("--prompt-encoder", choices=PROMPT_ENCODERS, default="chat", help="how prompts are rebuilt")
    add(
        "--checkpoint-dir",
        type=Path,
        metavar="DIR",
        help="checkpoint folder (default: $TRIALOG_HOME/learner/RUN)",
    )
    kit.add_objects(command, "the object store shared with the rollout workers")
    add("--idle-checkpoint-s", type=kit.positive_seconds, metavar="S", default=IDLE_CHECKPOINT_S,
        help="when caught up, checkpoint progress without a training step at most this often")  # fmt: skip
    add("--device", default="auto", help="cpu, cuda, cuda:N or auto (a GPU when there is one)")
    kit.add_instance(command)
    kit.add_telemetry(command)
    kit.add_lifecycle(command)


def device_of(name: str) -> str:
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def _cmd_worker_learner(args: argparse.Namespace) -> int:
    health = kit.health_of(args)
    with kit.health_endpoints(args, health):  # alive (starting) while the model loads, not ready
        return _train(args, health)


def _train(args: argparse.Namespace, health: Health) -> int:
    import torch

    from learner.kafka_io import KafkaAnnouncer, KafkaControlFeed, KafkaFeed, KafkaProgressFeed
    from learner.learner import Learner, LearnerSettings
    from learner.loop import run
    from learner.lora import Adaptation
    from learner.model import load_model, prepare_model
    from learner.samples import make_encoder
    from learner.state import PlannerConfig
    from learner.trainer import TrainSettings
    from ops.console import say
    from ops.paths import Paths
    from ops.stores import open_objects
    from ops.telemetry.setup import start as start_telemetry
    from schemas.origin import Origin, SystemClock

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
            process_reward_coef=args.process_reward_coef,
        )
        model_dir = args.model or prepare_model(paths.cache)
        encoder = make_encoder(args.prompt_encoder, model_dir)
    except (ValueError, ImportError) as exc:
        raise StackError(str(exc), "fix the learner options (trialog worker learner --help)") from None
    bootstrap = kit.bootstrap_of(args)
    start_telemetry(kit.telemetry_of(args, "trialog-learner"))
    model = load_model(model_dir, device_of(args.device))
    announcer = KafkaAnnouncer(bootstrap, args.run)
    learner = Learner(model, encoder, open_objects(args.objects, paths), announcer, settings,
                      Origin.system("learner", args.instance))  # fmt: skip
    resumed = learner.resume()
    feed = KafkaFeed(bootstrap, args.run, learner.state.offsets)
    control = KafkaControlFeed(bootstrap, args.run)
    progress = KafkaProgressFeed(bootstrap, args.run) if settings.process_reward_coef > 0 else None
    kit.worker_logging()
    where = "resumed at version " if resumed else "starting at version "
    say(f"learner {args.instance}: {feed.topic} on {bootstrap}, {where}{learner.state.version}")
    try:
        with kit.graceful_stop(args, health=health) as stopping:
            run(learner, feed, SystemClock(), stopping, idle_checkpoint_s=args.idle_checkpoint_s,
                control=control, progress=progress, health=health)  # fmt: skip
    finally:
        control.close()
        if progress is not None:
            progress.close()
        feed.close()
        announcer.close()
    return kit.EXIT_OK
