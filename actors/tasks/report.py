"""Reading the harness's test report (JSON lines written by `harness/trialog_report.py`) into outcomes.

Each line is one phase of one test: `{"id": ..., "when": "setup|call|teardown|collect", "outcome": ...}`.
A passing setup or teardown says nothing about the test, so it is dropped; any other phase that did not pass
makes its test fail (see `actors.tasks.reward.failed_tests`). Lines that cannot be read are ignored rather
than guessed at: a test with no readable report counts as missing, which is a failure.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from actors.tasks.reward import Outcome

_CALL = {"passed": Outcome.PASSED, "failed": Outcome.FAILED, "skipped": Outcome.SKIPPED}
_AROUND = {"failed": Outcome.ERROR, "skipped": Outcome.SKIPPED}  # setup, teardown and collection


def parse_report(text: str) -> list[tuple[str, Outcome]]:
    return list(_records(text))


def _records(text: str) -> Iterator[tuple[str, Outcome]]:
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict):
            continue
        test_id, when, outcome = record.get("id"), record.get("when"), record.get("outcome")
        if not isinstance(test_id, str) or not isinstance(outcome, str):
            continue
        table = _CALL if when == "call" else _AROUND if when in ("setup", "teardown", "collect") else {}
        if outcome in table:
            yield test_id, table[outcome]
