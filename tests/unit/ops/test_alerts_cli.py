"""`trialog alerts`: its values checked when parsed (times ago, ISO times, rules), its rules the engine's."""

from __future__ import annotations

import argparse

import pytest

from actors.guard.alerts import Rule
from ops.cli import alerts
from ops.cli.main import build_parser


def test_the_cli_names_every_rule_of_the_engine() -> None:
    assert tuple(sorted(rule.value for rule in Rule)) == alerts.RULES


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("30m", 1_000_000_000_000 - 30 * 60_000),
        ("2h", 1_000_000_000_000 - 2 * 3_600_000),
        ("1.5d", 1_000_000_000_000 - 129_600_000),
        ("45s", 1_000_000_000_000 - 45_000),
        ("2026-11-30T17:05:00Z", 1_796_058_300_000),
        ("2026-11-30T18:05:00+01:00", 1_796_058_300_000),
        ("1796058300", 1_796_058_300_000),
    ],
)
def test_since_reads_a_time_ago_an_iso_time_or_epoch_seconds(text: str, ms: int) -> None:
    assert alerts.a_moment(text, now_s=lambda: 1_000_000_000.0) == ms


def test_since_refuses_other_words_saying_what_it_reads() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="a time ago such as 30m"):
        alerts.a_moment("last tuesday")


def test_the_command_line_parses_follow_rules_and_json() -> None:
    args = build_parser().parse_args(
        ["alerts", "r1", "--follow", "--json", "--rule", "canary_failed", "--rule", "dead_letters"]
    )
    assert (args.run, args.follow, args.json, args.rule) == (
        "r1",
        True,
        True,
        ["canary_failed", "dead_letters"],
    )
    assert args.since is None and args.timeout == 60.0
    plain = build_parser().parse_args(["alerts", "r1", "--since", "1h"])
    assert plain.follow is False and plain.rule is None and isinstance(plain.since, int)
