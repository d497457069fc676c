"""`run start`'s pin: the run's versions computed here (`actors.guard.pinning`) and written first on
`<run>.run.control`, unless the run is pinned already (then how this start differs is said, not written).

The image's version is the engine's content id of the image reference the tasks are published with, so
the pin needs the Docker engine the workers grade on (`kit.require_docker`).
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from actors.guard.control import fold
from actors.guard.pinning import run_pin, settle_pin
from actors.tasks.reward_config import DEFAULT as DEFAULT_REWARD
from actors.tasks.reward_config import RewardConfig
from actors.tasks.spec import load_task
from ops.console import say
from schemas.codec import default_codec
from schemas.origin import Origin
from schemas.run_control import GuardSettings, RunPinned
from schemas.topics import RUN_CONTROL
from streams.kafka.reader import read_to_end

SEND_TIMEOUT_S = 60.0


def image_version(engine: Any, ref: str) -> str:
    """The engine's content id of `ref` (`sha256:...`), as the verifier names it."""
    client = engine.client()
    try:
        return str(client.images.get(ref).id)
    finally:
        client.close()


def pin_run(
    bootstrap: str,
    run: str,
    folders: Sequence[Path],
    image: str,
    guard: GuardSettings,
    reward: RewardConfig = DEFAULT_REWARD,
) -> RunPinned:
    """Write the run's pin if it has none; the pin in force."""
    from streams.kafka import clients

    origin = Origin.system("run-start", socket.gethostname())
    pin = run_pin(run, [load_task(folder) for folder in folders], image, guard, origin, reward)
    state = fold(run, (value for _topic, value in read_to_end(bootstrap, [RUN_CONTROL.of(run)])))
    settled = settle_pin(state, pin)
    if settled.write is None:
        assert state.pinned is not None
        if settled.differences:
            say(f"run {run}: pinned before; this start differs (the pin stands, the guard will record each "
                f"change it sees graded): {'; '.join(settled.differences)}")  # fmt: skip
        return state.pinned
    producer = clients.producer(bootstrap)
    try:
        producer.send(RUN_CONTROL.of(run), value=default_codec().encode(settled.write)).get(SEND_TIMEOUT_S)
    finally:
        producer.close()
    return settled.write
