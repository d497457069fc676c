"""What every `trialog` command shares, so that each says it once: how a command is added (help that shows
defaults and examples, no abbreviated options), the options that name a service (`--bootstrap`, the worker
name), checks of values before any service is touched, the fast answer when Kafka or Docker is missing,
graceful stop on SIGTERM/SIGINT, a worker's logging, and exit codes.

Exit codes, the same for every command: 0 done (or healthy / pass), 1 done but something was found (a
task not valid, an audit not healthy, a verdict other than pass), 2 could not do it (bad input, a missing
service: the message says what to run), 130 interrupted.

This module is imported to build the parser (every `--help`): keep it light, import heavy modules inside
the functions that need them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from rich_argparse import ArgumentDefaultsRichHelpFormatter, RawDescriptionRichHelpFormatter

from streams.errors import StackError
from streams.lifecycle import DEFAULT_GRACE_S, DEFAULT_LIVENESS_S, Grace, Health, HealthServer

if TYPE_CHECKING:
    from actors.tasks.reward_config import RewardConfig
    from ops.telemetry.config import TelemetryConfig
    from schemas.object_stores import StoreLocation

EXIT_OK, EXIT_FOUND, EXIT_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 130
# A command that needs a service answers within this when the service is not there (issue: 5 s at most).
SERVICE_PROBE_S = 3.0
KAFKA_HINT = "start the local stack (trialog up) or name a broker with --bootstrap HOST:PORT"

Handler = Callable[[argparse.Namespace], int]
T = TypeVar("T")
# A string: argparse's class is generic only to type checkers.
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


class HelpFormatter(ArgumentDefaultsRichHelpFormatter, RawDescriptionRichHelpFormatter):
    """Every option's default in its help line; the description and the examples kept as written. A
    default that says nothing (None, False, an empty list: "not given") is left out, and so is one the
    help already explains in words ("default: the local stack's broker")."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        says_nothing = action.default is None or action.default is False or action.default in ([], "")
        if says_nothing or "default" in text:
            return text
        return super()._get_help_string(action)


def new_parser(prog: str, description: str, examples: Sequence[str] = ()) -> argparse.ArgumentParser:
    """A top-level parser with the house formatter, no abbreviations and an Examples section."""
    return ArgumentParser(
        prog=prog,
        description=description,
        epilog=_examples(examples),
        formatter_class=HelpFormatter,
        allow_abbrev=False,
    )


def command(
    subparsers: Subparsers,
    name: str,
    help: str,
    *,
    handler: Handler | None = None,
    description: str | None = None,
    examples: Sequence[str] = (),
) -> argparse.ArgumentParser:
    """Add the command `name` to `subparsers`: `help` is its line in the parent's list, `description`
    (default: `help`) heads its own --help, `examples` are full command lines (`trialog ...`) shown at
    the end. `handler(args) -> exit code` runs it; a group of subcommands passes none."""
    parser = subparsers.add_parser(
        name,
        help=help,
        description=description or help,
        epilog=_examples(examples),
        formatter_class=HelpFormatter,
        allow_abbrev=False,
    )
    if handler is not None:
        # `command_prog`: the full command ("trialog tasks validate") that errors are reported under.
        parser.set_defaults(handler=handler, command_prog=parser.prog)
    return parser


def subcommands(parser: argparse.ArgumentParser, dest: str) -> Subparsers:
    """The subcommands of a command group (one is required)."""
    return parser.add_subparsers(dest=dest, required=True, metavar="COMMAND")


def _examples(examples: Sequence[str]) -> str | None:
    if not examples:
        return None
    return "Examples:\n" + "\n".join(f"  {line}" for line in examples)


# -- values, checked when parsed (before any service is touched) ----------------------------------------


def positive_int(text: str) -> int:
    value = _parsed(int, text, "an integer")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {text}")
    return value


def non_negative_int(text: str) -> int:
    value = _parsed(int, text, "an integer")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {text}")
    return value


def positive_seconds(text: str) -> float:
    """A finite duration above 0 (`nan`, `inf`, 0 and negatives are refused)."""
    value = _parsed(float, text, "a number of seconds")
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds above 0, not {text}")
    return value


def fraction(text: str) -> float:
    """A finite number in (0, 1]."""
    value = _parsed(float, text, "a number")
    if not math.isfinite(value) or not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be above 0 and at most 1, not {text}")
    return value


def non_negative_float(text: str) -> float:
    value = _parsed(float, text, "a number")
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of 0 or more, not {text}")
    return value


def port(text: str) -> int:
    value = _parsed(int, text, "a port number")
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number (0-65535), not {text}")
    return value


def bootstrap_servers(text: str) -> str:
    """`HOST:PORT[,HOST:PORT...]`, each port a number: a malformed value is refused when parsed."""
    servers = [part.strip() for part in text.split(",")]
    for server in servers:
        host, sep, number = server.rpartition(":")
        if not sep or not host or not number.isdigit() or not 0 < int(number) <= 65535:
            raise argparse.ArgumentTypeError(f"expected HOST:PORT[,HOST:PORT...], not {text!r}")
    return ",".join(servers)


def existing_dir(text: str) -> Path:
    path = Path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is not a folder")
    return path


def _parsed(kind: Callable[[str], T], text: str, what: str) -> T:
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, not {text!r}") from None


# -- options that name a service -------------------------------------------------------------------------


def add_bootstrap(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap",
        type=bootstrap_servers,
        metavar="HOST:PORT",
        help="Kafka bootstrap servers (default: the local stack's broker)",
    )


def add_run(parser: argparse.ArgumentParser, *, positional: bool = False) -> None:
    """The run: the positional RUN of commands about one run, `--run` for a worker serving one."""
    if positional:
        parser.add_argument("run", metavar="RUN", type=run_id, help="the run's id (its topic prefix)")
    else:
        parser.add_argument(
            "--run",
            type=run_id,
            default="",
            help="the run's id, its topic prefix (default: none, the bare topic names)",
        )


def run_id(text: str) -> str:
    """'' (the bare topic names) or a run's id: its characters are those of a topic name (`identifier`),
    so a bad one is refused when parsed, not by the broker."""
    return text and identifier(text)


def add_instance(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--instance",
        default=f"{socket.gethostname()}-{os.getpid()}",
        help="this worker's name in logs, labels and traces (default: HOST-PID)",
    )


def add_objects(parser: argparse.ArgumentParser, what: str) -> None:
    """`--objects DIR|s3://BUCKET/PREFIX`: the object store (snapshots, bundles, weights); every process of a
    run must name the same one. `what` says what this command finds or keeps there."""
    parser.add_argument(
        "--objects",
        type=object_store,
        metavar="LOCATION",
        help=f"{what}: a folder, or s3://BUCKET/PREFIX with the server in $TRIALOG_S3_ENDPOINT_URL "
        "(default: $TRIALOG_OBJECT_STORE, else the stack's folder $TRIALOG_HOME/objects)",
    )


def object_store(text: str) -> StoreLocation:
    """An object store location (`schemas.object_stores.parse_location`), checked without touching it."""
    from schemas.object_stores import parse_location

    try:
        return parse_location(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_json(parser: argparse.ArgumentParser, what: str = "print one JSON document on stdout") -> None:
    parser.add_argument("--json", action="store_true", help=what)


def bootstrap_of(args: argparse.Namespace) -> str:
    """The broker the command names, else the local stack's (as recorded by `trialog up`)."""
    given: str | None = getattr(args, "bootstrap", None)
    if given:
        return given
    from ops.stack.stack import StackConfig

    return StackConfig.load().kafka.bootstrap


def require_kafka(bootstrap: str, timeout_s: float = SERVICE_PROBE_S) -> str:
    """`bootstrap`, once one of its brokers accepts a TCP connection within `timeout_s`; else a
    `StackError` that says what to run. For commands that read or write Kafka once and end: a worker
    process instead waits for Kafka (`streams.kafka.serving.connected`), since it may start first."""
    deadline = time.monotonic() + timeout_s
    for server in bootstrap.split(","):
        host, _, number = server.rpartition(":")
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            with socket.create_connection((host.strip("[]"), int(number)), timeout=left):
                return bootstrap
        except OSError:
            continue
    raise StackError(f"no Kafka broker answers at {bootstrap}", KAFKA_HINT)


def require_docker() -> Any:
    """The local stack's Docker engine (`ops.stack.docker_engine.Engine`), or a `StackError` at once."""
    from ops.paths import Paths
    from ops.stack import docker_engine

    return docker_engine.require(Paths.from_env())


# -- a worker process -------------------------------------------------------------------------------------


@contextmanager
def stop_on_signals(stopping: threading.Event | None = None) -> Iterator[threading.Event]:
    """An event set by SIGTERM or SIGINT while the block runs (a graceful stop: the worker finishes the
    record in hand); the previous handlers come back after it."""
    event = stopping if stopping is not None else threading.Event()
    previous = {
        signum: signal.signal(signum, lambda *_: event.set()) for signum in (signal.SIGTERM, signal.SIGINT)
    }
    try:
        yield event
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def add_lifecycle(parser: argparse.ArgumentParser) -> None:
    """What an orchestrator needs of a long-lived worker (`streams.lifecycle`): probes, the liveness bound,
    the grace period of a stop. Every `trialog worker` command has them."""
    parser.add_argument(
        "--health-port",
        type=port,
        metavar="PORT",
        help="serve GET /healthz (liveness) and /readyz (readiness) on --health-host:PORT (default: off; "
        "0: any free port, logged)",
    )
    parser.add_argument(
        "--health-host",
        default="127.0.0.1",
        metavar="HOST",
        help="the address the health endpoints listen on (in a container: 0.0.0.0, for the kubelet)",
    )
    parser.add_argument(
        "--liveness-s", type=positive_seconds, default=DEFAULT_LIVENESS_S, metavar="S",
        help="/healthz fails once the worker's loop has not turned for this long (while it answers a "
        "request: for as long as its consumer group allows one)",
    )  # fmt: skip
    parser.add_argument(
        "--grace-s", type=positive_seconds, default=DEFAULT_GRACE_S, metavar="S",
        help="on SIGTERM or SIGINT take no new work, finish the work in hand and exit 0; still running "
        "after this, exit 0 at once, the unfinished work uncommitted (Kafka redelivers it). Keep it below "
        "the orchestrator's own (Kubernetes: terminationGracePeriodSeconds, 30 by default)",
    )  # fmt: skip


def health_of(args: argparse.Namespace, health: Health | None = None) -> Health:
    """`health` (a loop's own, which its loop feeds) or a new one, judged by `--liveness-s`."""
    health = health if health is not None else Health()
    health.liveness_s = args.liveness_s
    return health


@contextmanager
def health_endpoints(args: argparse.Namespace, health: Health) -> Iterator[None]:
    """/healthz and /readyz of `health` while the block runs, when `--health-port` asks for them."""
    if args.health_port is None:
        yield
        return
    try:
        server = HealthServer(health, args.health_host, args.health_port).start()
    except OSError as exc:  # a taken port or an address not on this host: said before any work starts
        raise StackError(
            f"cannot serve health on {args.health_host}:{args.health_port}: {exc}",
            "pick another --health-port or --health-host",
        ) from None
    print(f"health on http://{server.host}:{server.port}/healthz and /readyz", file=sys.stderr, flush=True)
    try:
        yield
    finally:
        server.close()


def grace_of(args: argparse.Namespace) -> Grace:
    """The grace period `--grace-s` of a worker's stop (exit 0 when it runs out)."""
    return Grace(args.grace_s, EXIT_OK, say=lambda line: print(line, file=sys.stderr, flush=True))


@contextmanager
def graceful_stop(
    args: argparse.Namespace, stopping: threading.Event | None = None, health: Health | None = None
) -> Iterator[threading.Event]:
    """`stop_on_signals` for a worker: the signal also marks it not ready (`health`) and starts its grace
    period (`--grace-s`), after which the process exits 0 whatever it is doing (`streams.lifecycle.Grace`).
    The period is not cancelled when the block ends: the clean-up after it (closing sandboxes, a last
    checkpoint) is bounded too."""
    event = stopping if stopping is not None else threading.Event()
    grace = grace_of(args)

    def stop(*_: object) -> None:
        if health is not None:
            health.stopping()
        grace.start()
        event.set()

    previous = {signum: signal.signal(signum, stop) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield event
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextmanager
def worker_lifetime(
    args: argparse.Namespace, stopping: threading.Event | None = None, health: Health | None = None
) -> Iterator[threading.Event]:
    """A worker's loop runs in this block: health endpoints served, a graceful stop on SIGTERM/SIGINT."""
    health = health_of(args, health)
    with health_endpoints(args, health), graceful_stop(args, stopping, health) as event:
        yield event


def worker_logging(*quiet: str) -> None:
    """A worker process logs at INFO with times; kafka-python's own chatter, and that of the `quiet`
    libraries (e.g. Faust's), only from WARNING."""
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for name in ("kafka", *quiet):
        logging.getLogger(name).setLevel(logging.WARNING)


# -- more values, and usage errors that a `--json` caller can read ------------------------------------------


def positive_float(text: str) -> float:
    """A finite number above 0 (cpus, a temperature, minutes): `nan`, `inf`, 0 and negatives are refused."""
    value = _parsed(float, text, "a number")
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number above 0, not {text}")
    return value


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An integer type for a bound other than 0 or 1 (a learner's group needs two members to compare)."""

    def parse(text: str) -> int:
        value = _parsed(int, text, "an integer")
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, not {text}")
        return value

    parse.__name__ = f"int_at_least_{minimum}"  # argparse names the type in some of its messages
    return parse


def add_group(parser: argparse.ArgumentParser, kind: str) -> None:
    """`--group`, the consumer group a request-serving worker joins (workers of one kind share it)."""
    parser.add_argument(
        "--group",
        type=identifier,
        metavar="GROUP",
        help=f"the Kafka consumer group to join (default: the run's, RUN.trialog-{kind})",
    )


def group_of(args: argparse.Namespace, kind: str) -> str:
    """The group `--group` names, else the run's own for `kind`: a worker started by hand joins its run's
    group, never one shared by every run (where a dead member of another run's workers would stall it)."""
    given: str | None = args.group
    if given:
        return given
    from schemas.topics import topic_name

    return topic_name(args.run, f"trialog-{kind}")


def add_telemetry(parser: argparse.ArgumentParser) -> None:
    """Where a process traces to and serves metrics (resolved with the environment by `telemetry_of`)."""
    parser.add_argument(
        "--otlp-endpoint",
        metavar="URL",
        help="OTLP gRPC endpoint for traces (default: $OTEL_EXPORTER_OTLP_ENDPOINT, else the local stack's "
        "Jaeger when it runs; TRIALOG_TRACING=off turns tracing off)",
    )
    parser.add_argument(
        "--metrics-port",
        type=port,
        metavar="PORT",
        help="serve Prometheus metrics on 127.0.0.1:PORT/metrics (default: $TRIALOG_METRICS_PORT; 0: any)",
    )


def telemetry_of(args: argparse.Namespace, service: str) -> TelemetryConfig:
    """The telemetry config of `service` from the options `add_telemetry` added."""
    from ops.telemetry import config

    return config.resolve(service, args.otlp_endpoint, args.metrics_port)


def size(text: str) -> int:
    """A size above 0 in bytes, with a binary unit ("512m", "1g", "64KiB"). The one parser of sizes
    (`sandbox_agent.limits.parse_size`, also used for task.toml's [limits]); never rounded."""
    value = _size(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be above 0 bytes, not {text}")
    return value


def non_negative_size(text: str) -> int:
    """A size in bytes that may be 0 (a cap on kept output: 0 keeps none)."""
    return _size(text)


def memory_size(text: str) -> int:
    """A sandbox's memory: a size no smaller than what Docker and the sandbox's init process need."""
    from sandbox_agent.limits import MIB, MIN_MEMORY_BYTES

    value = _size(text)
    if value < MIN_MEMORY_BYTES:
        raise argparse.ArgumentTypeError(f"must be at least {MIN_MEMORY_BYTES // MIB}m, not {text}")
    return value


def _size(text: str) -> int:
    from sandbox_agent.limits import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def existing_file(text: str) -> Path:
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text} is not a file")
    return path


def key_value(text: str) -> tuple[str, str]:
    """`KEY=VALUE` (the value may hold '=' and may be empty; the key may not)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, not {text!r}")
    return key, value


def identifier(text: str) -> str:
    """A name that becomes part of topic names, folders and labels (a run, a demo): Kafka's topic
    characters only, so that a bad one is refused here and not by the broker minutes later."""
    if not _NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"expected letters, digits, '.', '_' or '-' (at most 100, starting with a letter or digit), "
            f"not {text!r}"
        )
    return text


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


class UsageError(SystemExit):
    """A command line argparse refused. Still a `SystemExit(2)` (and the usage and message are on stderr,
    as argparse prints them), so that code which expects argparse's exit keeps working; `trialog` catches
    it to also answer `--json` with one JSON object on stdout."""

    def __init__(self, prog: str, message: str) -> None:
        super().__init__(EXIT_ERROR)
        self.prog = prog
        self.message = message


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose usage errors are `UsageError`s; subparsers inherit the class."""

    def error(self, message: str) -> Any:  # argparse declares NoReturn
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise UsageError(self.prog, message)


def wants_json(argv: Sequence[str]) -> bool:
    """Whether `--json` is among the options of a command line (not among the words after `--`, which
    belong to the command that `sandbox run` runs)."""
    words = list(argv)
    options = words[: words.index("--")] if "--" in words else words
    return "--json" in options


def add_record(parser: argparse.ArgumentParser, default: Path, section: str) -> None:
    """A benchmark's `--record FILE` (the markdown file whose `## section` it rewrites) and
    `--no-record`: the same two options on every benchmark."""
    parser.add_argument(
        "--record",
        type=Path,
        default=default,
        metavar="FILE",
        help=f"markdown file whose ## {section} to update",
    )
    parser.add_argument("--no-record", action="store_true", help=f"print only; leave {default.name} alone")


def report_error(prog: str, error: StackError, *, as_json: bool) -> int:
    """Say why `prog` could not do its job: on stderr, and with `--json` also as one object on stdout
    (`{"error", "hint"}`), so that a caller parsing stdout is never left with nothing. Returns exit code 2."""
    if as_json:
        print(json.dumps({"error": error.message, "hint": error.hint}))
    # One line: what is missing, then what to run (a multi-line error reads like a traceback in a log).
    print(f"{prog}: {error.message}" + (f" ({error.hint})" if error.hint else ""), file=sys.stderr)
    return EXIT_ERROR


def report_problem(prog: str, message: str, hint: str = "", *, as_json: bool) -> int:
    """`report_error` for bad input found by the command itself (no service involved). Returns 2."""
    return report_error(prog, StackError(message, hint), as_json=as_json)


def size_text(size: int) -> str:
    """`size` bytes the way `size` reads them back ("2g", "256m", "64k"), for defaults shown in --help."""
    for unit, factor in (("t", 1 << 40), ("g", 1 << 30), ("m", 1 << 20), ("k", 1 << 10)):
        if size >= factor and size % factor == 0:
            return f"{size // factor}{unit}"
    return str(size)


def trialog_version() -> str:
    """This trialog's version (the installed distribution's, else the checkout's pyproject.toml)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("trialog")
    except PackageNotFoundError:  # a checkout used without installing it (make env)
        import tomllib

        from ops.paths import REPO_ROOT

        with (REPO_ROOT / "pyproject.toml").open("rb") as file:
            return str(tomllib.load(file)["project"]["version"])


def reward_config_of(path: Path | None) -> RewardConfig:
    """The reward configuration in the file `path` (`--reward-config`; the brief's rule without one); a
    StackError saying what is wrong with the file otherwise, before any service is touched."""
    from actors.tasks.reward_config import DEFAULT, RewardConfigError, load

    if path is None:
        return DEFAULT
    try:
        return load(path)
    except RewardConfigError as exc:
        raise StackError(str(exc), "fix the file (its keys are in actors/tasks/reward_config.py)") from None
