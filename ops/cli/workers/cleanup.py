"""What a worker that makes sandboxes runs beside its loop, so that a SIGKILLed worker leaks nothing.

At its start, and every `--reap-every` seconds after, a sandbox or verifier worker removes the sandboxes
whose owner process is gone (`sandbox_agent.reaper`); at its start it also removes the scratch folders of
dead owners from the temp folder (`sandbox_agent.scratch`). Both judge owners by pid, start time, boot and
pid namespace, so a reused pid keeps nothing alive. Light at import: the parser is built for every --help.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ops.cli import kit
from sandbox_agent.defaults import DEFAULT_REAP_EVERY_S


def add_cleanup(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--reap-every",
        type=kit.positive_seconds,
        metavar="S",
        default=DEFAULT_REAP_EVERY_S,
        help="seconds between sweeps that remove sandboxes of dead workers on this host",
    )


@contextmanager
def cleanup(client: Any, args: argparse.Namespace) -> Iterator[None]:
    """Sweep dead owners' scratch folders and sandboxes now, then sandboxes every `args.reap_every` s."""
    from sandbox_agent import scratch
    from sandbox_agent.reaper import DockerContainers, Reaper

    scratch.sweep()
    reaper = Reaper(DockerContainers(client), every_s=args.reap_every).start()
    try:
        yield
    finally:
        reaper.close()
