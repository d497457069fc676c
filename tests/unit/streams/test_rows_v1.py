"""Rows of format v1 as the v1 streams worker really wrote them (`tests/golden/rows_v1.json`, made once by
`tests/golden/make_v1_rows.py` inside a checkout of that worker), read by today's code."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from schemas.chain import verify_chain
from schemas.requests import SandboxRequest
from schemas.state import Phase
from streams.rows import ROW_MAGIC_V2, Row
from tests.unit.streams.test_worker import CODEC, World, _last
from tests.unit.streams.world import EPISODE

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "rows_v1.json"
DOC = json.loads(GOLDEN.read_text())
ROWS = {name: base64.b64decode(row) for name, row in DOC["rows"].items()}
LOGGED = [base64.b64decode(event) for event in DOC["episode_events"]]  # episode.events as the worker logged
PHASES = {
    "awaiting_policy": (Phase.AWAITING_ACTION, 1),
    "awaiting_execution": (Phase.AWAITING_EXECUTION, 2),
    "completed": (Phase.COMPLETED, 6),
}


@pytest.mark.parametrize("name", sorted(PHASES))
def test_a_committed_v1_row_reads_back_with_the_exact_logged_bytes(name: str) -> None:
    data = ROWS[name]
    body = json.loads(data)
    assert body["v"] == 1 and not data.startswith(ROW_MAGIC_V2)
    row = Row.decode(data)
    phase, events = PHASES[name]
    assert row.state.episode.phase is phase and row.state.episode.episode_id == EPISODE
    # The events re-encoded from the v1 snapshot are the very bytes logged (an ActionProposed v1 among them).
    assert row.events == tuple(LOGGED[:events])
    assert (row.partition, row.watermark) == (body["partition"], body["log_offset"]) == (0, events - 1)
    assert (row.state.outstanding is None) == (phase is Phase.COMPLETED)
    assert Row.decode(row.encode()) == row  # written again as v2


def test_a_worker_takes_over_a_table_of_v1_rows() -> None:
    """The v1 worker's table and log (the episode waiting for its sandbox): today's worker recovers the
    partition, sends the sandbox request again, and the episode goes on, its row now v2, one chain."""
    world = World()
    world.log.topics["episode.events"] = [(EPISODE.encode(), value) for value in LOGGED[:2]]
    world.rows.put(0, EPISODE, ROWS["awaiting_execution"])
    worker = world.worker()
    request = _last(world, "sandbox.requests")
    assert (
        isinstance(request, SandboxRequest)
        and request.meta.prev_hash == Row.decode(ROWS["awaiting_execution"]).state.episode.head_hash
    )
    world.deliver(worker, "sandbox.results", world.workers.execute(request))
    assert world.state().episode.phase is Phase.AWAITING_ACTION
    assert world.rows[EPISODE].startswith(ROW_MAGIC_V2)
    assert world.log.values("episode.events")[:2] == LOGGED[:2]
    report = verify_chain(world.log.values("episode.events"), CODEC)
    assert report.ok and report.duplicates == 0 and len(world.log.values("episode.events")) == 3
