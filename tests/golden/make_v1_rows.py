"""Rows of format v1 as the one-input-at-a-time streams worker wrote them, for `tests/golden/rows_v1.json`.

Row format v1 (JSON: partition, `log_offset` of the episode's last event, the folded EpisodeSnapshot in
base64, task, sampling, outstanding request) was written by the streams worker up to acb356e^, the commit
before rows v2. Today's code only reads v1 rows (`streams.rows.Row.decode`), so the committed bytes must
come from the code that wrote them, not from a re-implementation of the format: this script runs *inside a
checkout of that commit* (its `streams.tables.Row`, its EpisodeSnapshot schema, its unit-test world), and
was run once:

    git archive acb356e^ | tar -x -C /tmp/v1rows && cd /tmp/v1rows && \\
        /path/to/checkout/.venv/bin/python /path/to/checkout/tests/golden/make_v1_rows.py OUT.json

It plays the old unit tests' episode (start, one `ls` step, submit, grade) and keeps the episode's row
after the start (waiting for the policy), after the action (waiting for the sandbox) and at the end
(completed), with the episode's events as the old worker logged them. `tests/unit/streams/test_rows_v1.py`
reads them with today's code. Never regenerate them with today's code.
"""

from __future__ import annotations

import base64
import importlib
import json
import sys
from pathlib import Path
from typing import Any

OLD_COMMIT = "acb356e^"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    sys.path.insert(0, str(Path.cwd()))
    try:  # modules of the old checkout: imported by name (today's tree has none of them)
        old: Any = importlib.import_module("tests.unit.streams.test_worker")
        importlib.import_module("streams.tables")
    except ImportError as exc:
        raise SystemExit(f"run this inside a checkout of {OLD_COMMIT} ({exc})") from exc
    world = old.World()
    worker = world.worker()
    rows: dict[str, str] = {}

    def keep(name: str) -> None:
        rows[name] = base64.b64encode(world.rows[old.EPISODE]).decode()

    world.deliver(worker, "episode.commands", old.start_command())
    keep("awaiting_policy")
    world.deliver(worker, "policy.results", world.workers.act(old._last(world, "policy.requests")))
    keep("awaiting_execution")
    world.deliver(worker, "sandbox.results", world.workers.execute(old._last(world, "sandbox.requests")))
    world.deliver(
        worker, "policy.results", world.workers.act(old._last(world, "policy.requests"), old.Submit())
    )
    world.deliver(worker, "verify.results", world.workers.grade(old._last(world, "verify.requests")))
    keep("completed")
    events = [base64.b64encode(value).decode() for value in world.log.values("episode.events")]
    doc = {"commit": OLD_COMMIT, "rows": rows, "episode_events": events}
    Path(argv[0]).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
