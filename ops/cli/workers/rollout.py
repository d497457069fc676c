"""`trialog worker rollout`: serve `policy.requests` from Kafka with a policy plugin until stopped.

`register(subparsers)` adds the `rollout` command to a `worker` command group. Plugins: `scripted` plays
the actions of `--actions FILE` (`{task id: [tool call, ...]}`, see `actors.rollout.policy`) and/or the
reference solutions of the tasks under `--solutions DIR`; `random` draws among harmless commands and
submit, seeded by each request's sampling seed and step; `llm` samples from a language model (`--model DIR`,
default: the folder `trialog model prepare` made) through a backend (`torch` on CPU or GPU, `vllm` on a GPU),
answering up to `--batch` queued requests with one batched generate. With `--versions-run RUN` it loads
the weights RUN's learner publishes between requests, into the torch model or the vLLM engine
(`--pin-version V`: version V only, for evaluations).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ops.cli import kit
from streams.errors import StackError

if TYPE_CHECKING:
    from actors.rollout.policy import Policy
    from actors.rollout.weights import WeightsTarget, WeightsWatcher
    from streams.lifecycle import Health

POLICIES = ("scripted", "random", "llm")
BACKENDS = ("torch", "vllm")


def register(workers: kit.Subparsers) -> None:
    text = "serve policy.requests from Kafka: sample each action from a policy plugin, answer ActionProposed"
    command = kit.command(
        workers,
        "rollout",
        text,
        handler=_cmd_worker_rollout,
        examples=(
            "trialog worker rollout --run RUN --policy scripted --solutions examples/tasks",
            "trialog worker rollout --run RUN --policy random",
            "trialog worker rollout --run RUN --policy llm --device cuda --batch 8 --versions-run RUN",
        ),
    )
    command.add_argument("--policy", choices=POLICIES, default="scripted", help="the policy plugin")
    command.add_argument(
        "--actions",
        type=Path,
        metavar="FILE",
        help="scripted: a JSON file mapping each task id to the tool calls to play",
    )
    command.add_argument(
        "--solutions", type=Path, action="append", default=[], metavar="DIR",
        help="scripted: play the reference solution of each task under DIR (repeatable)",
    )  # fmt: skip
    add_llm_arguments(command)
    kit.add_bootstrap(command)
    kit.add_run(command)
    kit.add_group(command, "rollout")
    kit.add_instance(command)
    kit.add_telemetry(command)
    kit.add_lifecycle(command)


def add_llm_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--model",
        type=Path,
        metavar="DIR",
        help="llm: the model folder (default: the one `trialog model prepare` made)",
    )
    command.add_argument("--backend", choices=BACKENDS, default="torch", help="llm: generation backend")
    command.add_argument("--device", default="cpu", help="llm: cpu or cuda")
    command.add_argument(
        "--max-new-tokens", type=kit.positive_int, metavar="N", default=512, help="llm: most tokens per reply"
    )
    command.add_argument(
        "--batch",
        type=kit.positive_int,
        metavar="N",
        default=1,
        help="llm: queued requests answered per batched generate",
    )
    command.add_argument(
        "--batch-linger-ms",
        type=kit.non_negative_int,
        metavar="MS",
        default=0,
        help="llm: hold a batch open this long for more requests, until it has --batch of them (0: answer "
        "what one poll brings). Episodes in flight otherwise split into cohorts that alternate half-full "
        "batches, at about half the tokens per second on a CPU",
    )
    command.add_argument(
        "--threads",
        type=kit.non_negative_int,
        metavar="N",
        default=0,
        help="llm: torch CPU threads (0: torch's default). On a machine shared with other workers, 1 "
        "avoids threads spinning on each other (measured 4x faster under load)",
    )
    command.add_argument(
        "--versions-run",
        metavar="RUN",
        help="llm: hot-swap the weights the learner of RUN publishes on RUN.policy.versions (default: none)",
    )
    command.add_argument(
        "--pin-version",
        type=kit.non_negative_int,
        metavar="V",
        help="llm: load version V of --versions-run only, and wait for it before answering (evaluations)",
    )
    kit.add_objects(command, "llm: the object store holding published weights")


def make_policy(args: argparse.Namespace) -> Policy:
    """The plugin the arguments name; ValueError when they do not make one (every combination is checked
    before a model is loaded, which can take minutes)."""
    from actors.rollout.simple_policies import RandomPolicy, ScriptedPolicy

    if args.pin_version is not None and args.versions_run is None:
        raise ValueError("--pin-version needs --versions-run")
    if args.versions_run is not None and args.policy != "llm":
        raise ValueError("--versions-run needs --policy llm")
    if args.policy == "llm":
        return _llm_policy(args)
    if args.batch != 1:
        raise ValueError("--batch is for --policy llm")
    if args.batch_linger_ms:
        raise ValueError("--batch-linger-ms is for --policy llm")
    if args.policy == "random":
        if args.actions or args.solutions:
            raise ValueError("--actions and --solutions are for --policy scripted")
        return RandomPolicy()
    if not args.actions and not args.solutions:
        raise ValueError("--policy scripted needs --actions FILE or --solutions DIR")
    policy = ScriptedPolicy.solving_folders(args.solutions) if args.solutions else ScriptedPolicy({})
    return policy.merged(ScriptedPolicy.from_file(args.actions)) if args.actions else policy


def _llm_policy(args: argparse.Namespace) -> Policy:
    from actors.rollout.llm import load_llm_policy

    if args.actions or args.solutions:
        raise ValueError("--actions and --solutions are for --policy scripted")
    if args.backend == "vllm":  # before a tokenizer or a model is read: a missing engine fails in seconds
        from actors.rollout.vllm_backend import import_vllm

        import_vllm()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    model = args.model or _model_dir()
    tokens = args.max_new_tokens
    return load_llm_policy(model, backend=args.backend, device=args.device, max_new_tokens=tokens)


def _model_dir() -> Path:
    """The folder `trialog model prepare` made (prepared now if it is not there)."""
    from learner.model import prepare_model
    from ops.paths import Paths

    return prepare_model(Paths.from_env().cache)


PIN_WAIT_S = 300.0


def _weights(args: argparse.Namespace, policy: Policy, bootstrap: str) -> WeightsWatcher | None:
    """The hot-swap watcher `--versions-run` asks for (None without it); with `--pin-version`, only once
    the pinned version is loaded: an evaluation must never answer with other weights."""
    from actors.rollout.weights import KafkaPublications, WeightsWatcher
    from ops.console import say
    from ops.stores import open_objects

    if args.versions_run is None:
        return None
    store = open_objects(args.objects)
    watcher = WeightsWatcher(
        KafkaPublications(bootstrap, args.versions_run),
        store,
        _weights_target(args, policy),
        args.versions_run,
        pin=args.pin_version,
    )
    if args.pin_version is not None:
        give_up = time.monotonic() + PIN_WAIT_S
        while watcher.refresh() != args.pin_version:
            if time.monotonic() > give_up or args.pin_version in watcher.refused:
                raise StackError(
                    f"version {args.pin_version} of {args.versions_run} could not "
                    f"be loaded within {PIN_WAIT_S:.0f} s",
                    "check the learner's publications (trialog replay / policy.versions)",
                )
            time.sleep(1.0)
        say(f"rollout: pinned to policy version {args.pin_version} of {args.versions_run}")
    return watcher


def _weights_target(args: argparse.Namespace, policy: Policy) -> WeightsTarget:
    """What a published version is loaded into: the torch model, or the running vLLM engine."""
    from actors.rollout.vllm_backend import VllmBackend, VllmWeightsTarget
    from actors.rollout.weights import TorchModelTarget

    backend = getattr(policy, "backend", None)
    if isinstance(backend, VllmBackend):
        return VllmWeightsTarget(backend.llm, args.model or _model_dir())
    model = getattr(backend, "model", None)
    if model is None:  # make_policy built an llm policy: a backend without a model is a bug
        raise StackError(f"policy {policy.name} has no model to load weights into", "report it")
    return TorchModelTarget(model)


def _cmd_worker_rollout(args: argparse.Namespace) -> int:
    health = kit.health_of(args)
    with kit.health_endpoints(args, health):  # alive (starting) while the model loads, not ready
        return _serve_rollout(args, health)


def _serve_rollout(args: argparse.Namespace, health: Health) -> int:
    from actors.rollout.vllm_backend import BackendUnavailable
    from actors.rollout.worker import ROUTE, RolloutWorker
    from actors.tasks.spec import TaskError
    from ops.console import say
    from ops.telemetry.setup import start as start_telemetry
    from schemas.origin import Origin
    from streams.kafka.request_loop import LoopSettings, RequestLoop

    try:
        policy = make_policy(args)
    except (ValueError, TaskError, BackendUnavailable) as exc:
        raise StackError(str(exc), "fix the policy options (trialog worker rollout --help)") from None
    bootstrap = kit.bootstrap_of(args)
    group = kit.group_of(args, "rollout")
    origin = Origin.system("rollout", args.instance)
    worker = RolloutWorker(policy, origin, _weights(args, policy, bootstrap))
    settings = LoopSettings(
        bootstrap, group, args.run, max_batch=args.batch, batch_linger_ms=args.batch_linger_ms
    )
    loop = RequestLoop(ROUTE, worker.handle, settings, origin, handle_batch=worker.handle_batch)
    loop.health = health
    kit.worker_logging()
    where = f"{loop.requests_topic} on {bootstrap}, group {group}"
    say(f"rollout worker {args.instance} ({policy.name}): {where}")
    start_telemetry(kit.telemetry_of(args, "trialog-rollout"))
    with kit.graceful_stop(args, loop.stopping, health):
        loop.run()
    return kit.EXIT_OK
