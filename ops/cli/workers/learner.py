"""`trialog worker learner`: train the run's policy from `trajectories.completed` until stopped.

`register(subparsers)` adds the `learner` command to a `worker` command group. One learner per run: it
reads every partition itself and keeps its position in its checkpoint (`--checkpoint-dir`), so a restarted
learner resumes exactly where its last checkpoint was taken. New versions go to the object store
(`--objects`, the store the rollout workers read) and to `policy.versions`. It obeys the run's control
log (`run.control`, read from its beginning at every start): quarantined trajectories are never trained on,
and with the pin's hold for clearance a trajectory waits until canaries vouch for its grader.

`--nproc N` trains one policy across N processes of this machine (data parallel, `learner.ranks`; one GPU
each where there are GPUs): the command becomes a supervisor (`ops.learner_group`) that runs N ranks of
itself and restarts the whole group from the last checkpoint when any rank dies. A process started with
torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) is one rank of such a group: rank 0 is
the learner as above, the others train its steps with it.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from learner.defaults import (
    CHECKPOINT_FILE,
    DEFAULT_RANK,
    DEFAULT_TARGETS,
    IDLE_CHECKPOINT_S,
    PROMPT_ENCODERS,
)
from ops.cli import kit
from streams.errors import StackError
from streams.lifecycle import Health

if TYPE_CHECKING:
    from learner.collective import TorchCollective
    from learner.learner import LearnerSettings
    from learner.samples import PromptEncoder
    from ops.learner_group import Place
    from ops.paths import Paths

BACKENDS = ("auto", "gloo", "nccl")


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
            "trialog worker learner --run RUN --nproc 4 --device cuda",
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
    add("--device", default="auto",
        help="cpu, cuda, cuda:N or auto (a GPU when there is one); with --nproc, auto and cuda mean each "
        "rank's own GPU (cuda:LOCAL_RANK)")  # fmt: skip
    add("--nproc", type=kit.positive_int, metavar="N", default=1,
        help="train across N processes of this machine (data parallel: rank 0 reads, plans, checkpoints and "
        "publishes; every rank trains a share of each step); when any rank dies the group is restarted "
        "from the last checkpoint")  # fmt: skip
    add("--backend", choices=BACKENDS, default="auto",
        help="torch.distributed backend of the ranks' gradients: nccl between GPUs, gloo on CPUs (auto: "
        "nccl when the ranks train on CUDA)")  # fmt: skip
    add("--max-restarts", type=kit.non_negative_int, metavar="N", default=10,
        help="with --nproc: give up after N group failures in a row without a new checkpoint")  # fmt: skip
    kit.add_instance(command)
    kit.add_telemetry(command)
    kit.add_lifecycle(command)


def device_of(name: str, local_rank: int | None = None) -> str:
    """The torch device of `--device`; a rank (`local_rank`) takes its own GPU for auto or cuda."""
    import torch

    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and local_rank is not None:
        return f"cuda:{local_rank}"
    return name


def backend_of(name: str, device: str) -> str:
    """The torch.distributed backend: `name`, or for auto NCCL when the ranks train on CUDA, else gloo."""
    if name != "auto":
        return name
    return "nccl" if device.startswith("cuda") else "gloo"


def _cmd_worker_learner(args: argparse.Namespace) -> int:
    from ops.learner_group import place_of

    try:
        place = place_of(os.environ)
    except ValueError as exc:
        raise StackError(f"this learner's rank: {exc}", "set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT "
                         "as torchrun does, or none of them") from None  # fmt: skip
    if args.nproc > 1:
        if place is not None:
            raise StackError("--nproc in a process that is already a rank of a group",
                             "use --nproc or a launcher such as torchrun, not both")  # fmt: skip
        return _supervise(args)
    if place is not None and place.rank > 0:
        return _learner(args, place, None)  # rank 0 serves the group's health endpoints
    health = kit.health_of(args)
    with kit.health_endpoints(args, health):  # alive (starting) while the model loads, not ready
        return _learner(args, place, health)


def _supervise(args: argparse.Namespace) -> int:
    from learner.model import prepare_model
    from ops.learner_group import rank_argv, supervise
    from ops.paths import Paths

    kit.worker_logging()
    if getattr(args, "words", None) is None:
        raise StackError("--nproc needs the command line (run it through `trialog`)", "run `trialog worker "
                         "learner --nproc N ...`")  # fmt: skip
    paths = Paths.from_env()
    argv = rank_argv(args.words)
    if args.model is None:  # prepared once here: N ranks preparing it at once would trip over each other
        argv += ["--model", str(prepare_model(paths.cache))]
    folder = _checkpoint_dir(args, paths)
    with kit.stop_on_signals() as stopping:
        return supervise(argv, args.nproc, folder / CHECKPOINT_FILE, stopping,
                         max_restarts=args.max_restarts)  # fmt: skip


def _checkpoint_dir(args: argparse.Namespace, paths: Paths) -> Path:
    folder: Path = args.checkpoint_dir or paths.home / "learner" / (args.run or "default")
    return folder


def _settings(args: argparse.Namespace, paths: Paths) -> LearnerSettings:
    from learner.learner import LearnerSettings
    from learner.lora import Adaptation
    from learner.state import PlannerConfig
    from learner.trainer import TrainSettings

    return LearnerSettings(
        run_id=args.run,
        checkpoint_dir=_checkpoint_dir(args, paths),
        planner=PlannerConfig(
            args.group_size, args.group_timeout_s, args.max_staleness, args.groups_per_step
        ),
        train=TrainSettings(micro_batch=args.micro_batch, temperature=args.temperature),
        adaptation=Adaptation(args.lora_rank, args.lora_alpha, tuple(args.lora_targets.split(","))),
        lr=args.lr,
        epochs=args.epochs,
        process_reward_coef=args.process_reward_coef,
    )


def _learner(args: argparse.Namespace, place: Place | None, health: Health | None) -> int:
    """The learner alone (`place` None) or one rank of a group; `health` for the learner and rank 0."""
    import torch

    from learner.collective import TorchCollective
    from learner.model import load_model, prepare_model
    from learner.samples import make_encoder
    from ops.paths import Paths

    paths = Paths.from_env()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    elif place is not None:
        # torch's default is every core for every rank: the ranks of a machine would spin on each other.
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // place.local_world_size))
    try:
        settings = _settings(args, paths)
        model_dir = args.model or prepare_model(paths.cache)
        encoder = make_encoder(args.prompt_encoder, model_dir) if place is None or place.rank == 0 else None
    except (ValueError, ImportError) as exc:
        raise StackError(str(exc), "fix the learner options (trialog worker learner --help)") from None
    device = device_of(args.device, None if place is None else place.local_rank)
    if place is None:
        return _lead(args, paths, settings, load_model(model_dir, device), encoder, None, health)
    if device.startswith("cuda"):
        torch.cuda.set_device(device)
    kit.worker_logging()
    _name_rank_in_logs(place)
    collective = TorchCollective.join(backend_of(args.backend, device))
    model = load_model(model_dir, device)
    if place.rank == 0:
        code = _lead(args, paths, settings, model, encoder, collective, health)
    else:
        code = _follow(model, settings, collective)
    # Only after a clean end: a failed rank just exits, and its peers see their collectives break.
    collective.close()
    return code


def _follow(model: Any, settings: LearnerSettings, collective: TorchCollective) -> int:
    from learner.learner import prepare
    from learner.ranks import follow
    from ops.console import say

    optimizer = prepare(model, settings)
    say(f"learner rank {collective.rank} of {collective.world_size}: following rank 0")
    # A signal is for rank 0, which finishes its step (with this rank) and then releases it (`Stop`).
    with kit.stop_on_signals():
        follow(model, optimizer, collective)
    return kit.EXIT_OK


def _lead(
    args: argparse.Namespace, paths: Paths, settings: LearnerSettings, model: Any,
    encoder: PromptEncoder | None, collective: TorchCollective | None, health: Health | None,
) -> int:  # fmt: skip
    """The learner (rank 0 of a group when `collective` is one)."""
    from learner.kafka_io import KafkaAnnouncer, KafkaControlFeed, KafkaFeed, KafkaProgressFeed
    from learner.learner import Learner
    from learner.loop import run
    from learner.ranks import Leader
    from ops.console import say
    from ops.stores import open_objects
    from ops.telemetry.setup import start as start_telemetry
    from schemas.origin import Origin, SystemClock

    assert encoder is not None  # made for the learner alone and for rank 0
    bootstrap = kit.bootstrap_of(args)
    start_telemetry(kit.telemetry_of(args, "trialog-learner"))
    leader = Leader(collective) if collective is not None else None
    announcer = KafkaAnnouncer(bootstrap, args.run)
    learner = Learner(model, encoder, open_objects(args.objects, paths), announcer, settings,
                      Origin.system("learner", args.instance), ranks=leader)  # fmt: skip
    resumed = learner.resume()
    if leader is not None:
        leader.share(learner.model, learner.optimizer)  # the followers start from this rank's state
    feed = KafkaFeed(bootstrap, args.run, learner.state.offsets)
    control = KafkaControlFeed(bootstrap, args.run)
    progress = KafkaProgressFeed(bootstrap, args.run) if settings.process_reward_coef > 0 else None
    kit.worker_logging()
    where = "resumed at version " if resumed else "starting at version "
    ranks = "" if collective is None else f" with {collective.world_size} ranks"
    say(f"learner {args.instance}: {feed.topic} on {bootstrap}{ranks}, {where}{learner.state.version}")
    try:
        with kit.graceful_stop(args, health=health) as stopping:
            run(learner, feed, SystemClock(), stopping, idle_checkpoint_s=args.idle_checkpoint_s,
                control=control, progress=progress, health=health)  # fmt: skip
        if leader is not None:
            leader.stop()  # only after a clean stop: after a failure the supervisor kills the followers
    finally:
        control.close()
        if progress is not None:
            progress.close()
        feed.close()
        announcer.close()
    return kit.EXIT_OK


def _name_rank_in_logs(place: Place) -> None:
    import logging

    # The ranks share the supervisor's output: each line says whose it is.
    form = f"%(asctime)s %(levelname)s rank {place.rank} %(name)s: %(message)s"
    for handler in logging.getLogger().handlers:
        handler.setFormatter(logging.Formatter(form))
