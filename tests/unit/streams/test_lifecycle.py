"""A worker's health and grace period (`streams.lifecycle`): what the probes answer as its loops turn,
stall, work and stop, served over real HTTP on loopback, and a grace period that ends the process."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from streams.lifecycle import Grace, Health, HealthServer


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_process_is_alive_while_starting_and_until_a_loop_stops_beating() -> None:
    clock = Clock()
    health = Health(liveness_s=60, clock=clock)
    assert health.liveness().ok and health.liveness().detail == {"process": "starting"}
    health.beat("requests")
    clock.now += 59
    assert health.liveness().ok
    clock.now += 2
    verdict = health.liveness()
    assert not verdict.ok and verdict.detail == {"requests": "no beat for 61 s"}


def test_a_loop_working_on_a_long_request_stays_alive_within_its_allowance() -> None:
    clock = Clock()
    health = Health(liveness_s=60, clock=clock)
    health.beat("requests", within_s=900)  # a sandbox step may take up to the group's poll interval
    clock.now += 600
    verdict = health.liveness()
    assert verdict.ok and verdict.detail["requests"].startswith("working (for 600 s")
    clock.now += 301
    assert not health.liveness().ok
    health.beat("requests")  # done: back to the short bound
    assert health.liveness().detail == {"requests": "turning"}


def test_a_plain_beat_never_reads_as_working() -> None:
    """Whether a loop is working is the allowance it gave, never a difference of clock readings (which
    rounding made read as 300.00000000001 > 300 at some times of the clock)."""
    clock = Clock()
    health = Health(liveness_s=300, clock=clock)
    for now in (32765.479414075653, 1771.2559176335897, 7907.973739487129):  # (now + 300) - now > 300
        clock.now = now
        health.beat("requests")
        assert health.liveness().detail == {"requests": "turning"}, now


def test_every_loop_must_turn() -> None:
    clock = Clock()
    health = Health(liveness_s=10, clock=clock)
    health.beat("verify.requests")
    health.beat("canary.requests")
    clock.now += 11
    health.beat("verify.requests")
    verdict = health.liveness()
    assert not verdict.ok and verdict.detail["verify.requests"] == "turning"


def test_ready_only_when_every_part_is_and_never_once_stopping() -> None:
    health = Health()
    assert health.readiness().detail == {"process": "starting"} and not health.readiness().ok
    health.ready("policy.requests", False, "waiting for Kafka at k:9092")
    health.ready("weights")
    verdict = health.readiness()
    assert not verdict.ok and verdict.detail["policy.requests"] == "waiting for Kafka at k:9092"
    health.ready("policy.requests")
    assert health.readiness().ok
    health.stopping()
    assert health.readiness().detail == {"process": "stopping"} and not health.readiness().ok


@pytest.fixture
def served() -> Iterator[tuple[Health, str, Clock]]:
    clock = Clock()
    health = Health(liveness_s=30, clock=clock)
    server = HealthServer(health, "127.0.0.1", 0).start()
    try:
        yield health, f"http://127.0.0.1:{server.port}", clock
    finally:
        server.close()


def _get(url: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as failed:
        return failed.code, json.loads(failed.read()) if failed.code == 503 else {}


def test_the_endpoints_answer_200_or_503_with_the_reason(served: tuple[Health, str, Clock]) -> None:
    health, base, clock = served
    assert _get(base + "/readyz") == (503, {"ok": False, "process": "starting"})
    assert _get(base + "/healthz") == (200, {"ok": True, "process": "starting"})
    health.beat("episode-ticks")
    health.ready("episodes")
    assert _get(base + "/readyz") == (200, {"ok": True, "episodes": "ready"})
    clock.now += 31
    assert _get(base + "/healthz") == (503, {"ok": False, "episode-ticks": "no beat for 31 s"})
    assert _get(base + "/healthz?verbose=1")[0] == 503
    assert _get(base + "/metrics")[0] == 404


def test_the_grace_period_ends_the_process_with_its_code_once() -> None:
    exited: list[int] = []
    done = threading.Event()

    def exit(code: int) -> None:
        exited.append(code)
        done.set()

    grace = Grace(0.05, 0, exit=exit, say=lambda _: None)
    grace.start()
    grace.start()  # a second signal does not restart the period
    assert done.wait(5)
    threading.Event().wait(0.2)  # time for a second timer, had the second signal started one
    assert exited == [0]
