"""Golden owner decisions: what the pure owner (`streams.owner`) decides for scripted inputs, committed.

For each script below (a start, answers, duplicates, timeouts, failure answers), every input is fed to the
owner exactly as the streams worker feeds it (`tests.unit.streams.world.Driver`: a fixed clock, sequential
ids) and its effects are written, in order, to `decisions/<name>.json`: the events it appends (their exact
bytes and digests), the requests it sends (encoded), the trajectory it publishes, the rejection if any,
and the state after. The test (`tests/unit/streams/test_owner_golden.py`) recomputes them and compares byte
for byte, so any change to what the owner decides, or to how its records are encoded, shows up as a diff of
these files. Regenerate deliberately, and review the diff:

    python -m tests.golden.owner_decisions          # rewrite every decisions/*.json
    python -m tests.golden.owner_decisions NAME...  # rewrite these
"""

from __future__ import annotations

import argparse
import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from schemas.actions import Submit
from schemas.codec import default_codec
from schemas.common import FailureClass
from schemas.record import Record
from streams.owner import Effects
from tests.golden.make_golden import to_json
from tests.unit.streams.world import Driver, Input, Tick, Workers, abort_command, start_command

DECISIONS_DIR = Path(__file__).resolve().parent / "decisions"
CODEC = default_codec()


def completed(driver: Driver, workers: Workers) -> None:
    """Start, one step, a submit, a grade: the episode completes and its trajectory is published."""
    driver.feed(start_command())
    driver.feed(workers.act(driver.last_request))
    driver.feed(workers.execute(driver.last_request))
    driver.feed(workers.act(driver.last_request, Submit("done")))
    driver.feed(workers.grade(driver.last_request, reward=0.5))


def duplicates(driver: Driver, workers: Workers) -> None:
    """Every input delivered twice (at-least-once), a second start, and an answer after the end."""
    start = start_command()
    driver.feed(start)
    driver.feed(start)
    action = workers.act(driver.last_request)
    driver.feed(action)
    driver.feed(action)
    executed = workers.execute(driver.last_request)
    driver.feed(executed)
    driver.feed(executed)
    driver.feed(action)
    submit = workers.act(driver.last_request, Submit())
    driver.feed(submit)
    grade = workers.grade(driver.last_request)
    driver.feed(grade)
    driver.feed(grade)
    driver.feed(executed)


def timeouts(driver: Driver, workers: Workers) -> None:
    """The policy misses its deadline twice (reissued with growing deadlines, a late answer to the first
    attempt is stale), answers the third; then the sandbox never answers: the episode fails."""
    driver.feed(start_command())
    late = workers.act(driver.last_request)
    for _ in range(2):
        outstanding = driver.state.outstanding
        assert outstanding is not None
        driver.feed(Tick(outstanding.deadline_us - 1))  # not yet due: nothing
        driver.feed(Tick(outstanding.deadline_us))
    driver.feed(late)
    driver.feed(workers.act(driver.last_request))
    while driver.state.outstanding is not None:
        driver.feed(Tick(driver.state.outstanding.deadline_us))
    driver.feed(Tick(driver.now_us + 10**12))  # after the end: nothing


def failure_answers(driver: Driver, workers: Workers) -> None:
    """A sandbox that cannot run a step answers with EpisodeFailed: the episode fails, a later answer and an
    abort are refused as ended."""
    driver.feed(start_command())
    driver.feed(workers.act(driver.last_request))
    pending = driver.last_request
    driver.feed(workers.fail(pending, FailureClass.SANDBOX_CRASH, "the container died"))
    driver.feed(workers.execute(pending))
    driver.feed(abort_command())


def aborted(driver: Driver, workers: Workers) -> None:
    """An operator aborts an episode waiting for its sandbox; the abort comes twice."""
    driver.feed(start_command())
    driver.feed(workers.act(driver.last_request))
    driver.feed(abort_command("operator stop"))
    driver.feed(abort_command("operator stop"))


SCRIPTS: dict[str, Callable[[Driver, Workers], None]] = {
    "completed": completed,
    "duplicates": duplicates,
    "timeouts": timeouts,
    "failure_answers": failure_answers,
    "aborted": aborted,
}


class _Recorder(Driver):
    """A driver that keeps each input beside the effects it had."""

    def __init__(self) -> None:
        super().__init__()
        self.inputs: list[tuple[Input, int]] = []

    def feed(self, item: Input, **kwargs: Any) -> Effects:
        out = super().feed(item, **kwargs)
        self.inputs.append((item, self.now_us))
        return out


def _record(record: Record) -> dict[str, Any]:
    data = CODEC.encode(record)
    return {
        "type": type(record).__name__,
        "base64": base64.b64encode(data).decode(),
        "record": to_json(record.to_record()),
    }


def _input(item: Input) -> dict[str, Any]:
    if isinstance(item, Tick):
        return {"type": "Tick", "now_us": item.now_us}
    return _record(item)


def _effects(out: Effects) -> dict[str, Any]:
    return {
        "rejected": None if out.rejected is None else out.rejected.value,
        "events": [
            {
                "type": type(a.event).__name__,
                "digest": a.digest,
                "base64": base64.b64encode(a.data).decode(),
                "record": to_json(a.event.to_record()),
            }
            for a in out.events
        ],
        "requests": [_record(request) for request in out.requests],
        "trajectory": None if out.trajectory is None else _record(out.trajectory),
        "state": to_json(out.state.to_record()),
    }


def decisions(name: str) -> str:
    """The script's decisions as the committed file's text (sorted keys, one indent: deterministic)."""
    driver, workers = _Recorder(), Workers()
    SCRIPTS[name](driver, workers)
    steps = [
        {"input": _input(item), "now_us": now_us, "effects": _effects(out)}
        for (item, now_us), out in zip(driver.inputs, driver.effects, strict=True)
    ]
    doc = {"script": name, "doc": (SCRIPTS[name].__doc__ or "").split("\n")[0], "steps": steps}
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def path_of(name: str) -> Path:
    return DECISIONS_DIR / f"{name}.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "names", nargs="*", metavar="NAME", help=f"scripts to rewrite (all): {sorted(SCRIPTS)}"
    )
    args = parser.parse_args(argv)
    unknown = set(args.names) - set(SCRIPTS)
    if unknown:
        parser.error(
            f"no such script: {', '.join(sorted(unknown))} (choose from {', '.join(sorted(SCRIPTS))})"
        )
    DECISIONS_DIR.mkdir(exist_ok=True)
    for name in args.names or sorted(SCRIPTS):
        path_of(name).write_text(decisions(name))
        print(f"wrote {path_of(name).relative_to(DECISIONS_DIR.parent.parent.parent)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
