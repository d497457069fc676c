"""Reading what the grading harness (`harness/trialog_launch.py`) wrote, into outcomes and evidence.

The harness shares its stdout with the code under test, so only lines tagged with this run's nonce count,
and a tag may be preceded on its line by pytest's progress output (which ends no line of its own):

    TRIALOG-REPORT <nonce> <when> <outcome> <node id>     one phase of one test
    TRIALOG-ITEM <nonce> <node id>                         a collected test (the trusted collection)
    TRIALOG-SIGNAL <nonce> <evidence>                      a tamper signal
    TRIALOG-DONE <nonce> <exit code>                       pytest returned and the final check ran

Payloads are `unicode_escape`d ASCII. A passing setup or teardown says nothing about the test, so it is
dropped; any other phase that did not pass makes its test fail (see `actors.tasks.reward.failed_tests`).
Lines that cannot be read are ignored rather than guessed at: a test with no readable report counts as
missing, which is a failure; a run without a readable DONE line is incomplete.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from actors.tasks.reward import Outcome

_CALL = {"passed": Outcome.PASSED, "failed": Outcome.FAILED, "skipped": Outcome.SKIPPED}
_AROUND = {"failed": Outcome.ERROR, "skipped": Outcome.SKIPPED}  # setup, teardown and collection
_KINDS = ("REPORT", "ITEM", "SIGNAL", "DONE")


@dataclass(frozen=True)
class HarnessOutput:
    reports: tuple[tuple[str, Outcome], ...] = ()
    items: tuple[str, ...] = ()  # collected node ids, in collection order
    signals: tuple[str, ...] = ()
    exit_code: int | None = None  # from the DONE line; None: the run is incomplete

    @property
    def complete(self) -> bool:
        return self.exit_code is not None

    @property
    def reported(self) -> tuple[str, ...]:
        """The ids with a report of their own, in order (each once)."""
        return tuple(dict.fromkeys(test_id for test_id, _ in self.reports))


def parse_harness_output(stdout: str, nonce: str) -> HarnessOutput:
    reports: list[tuple[str, Outcome]] = []
    items: list[str] = []
    signals: list[str] = []
    exit_code: int | None = None
    for kind, payload in _tagged(stdout, nonce):
        if kind == "REPORT":
            reports.extend(_report(payload))
        elif kind == "ITEM":
            items.append(payload)
        elif kind == "SIGNAL":
            signals.append(payload)
        elif payload.lstrip("-").isdigit():
            exit_code = int(payload)
    return HarnessOutput(
        tuple(reports), tuple(dict.fromkeys(items)), tuple(dict.fromkeys(signals)), exit_code
    )


def _tagged(stdout: str, nonce: str) -> Iterator[tuple[str, str]]:
    tags = {kind: f"TRIALOG-{kind} {nonce} " for kind in _KINDS}
    for line in stdout.splitlines():
        for kind, tag in tags.items():
            at = line.find(tag)
            if at < 0:
                continue
            try:
                payload = line[at + len(tag) :].encode("ascii").decode("unicode_escape")
            except (UnicodeError, ValueError):
                break  # not written by the harness, which escapes everything to ASCII
            yield kind, payload
            break


def _report(payload: str) -> Iterator[tuple[str, Outcome]]:
    when, _, rest = payload.partition(" ")
    outcome, _, test_id = rest.partition(" ")
    table = _CALL if when == "call" else _AROUND if when in ("setup", "teardown", "collect") else {}
    if test_id and outcome in table:
        yield test_id, table[outcome]
