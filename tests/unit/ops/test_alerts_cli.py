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


def _guard_parser() -> argparse.ArgumentParser:
    from ops.cli.alert_options import add_alert_options

    parser = argparse.ArgumentParser(exit_on_error=False)
    add_alert_options(parser)
    return parser


def test_the_guards_alert_options_build_the_engines_settings() -> None:
    from actors.guard.alerts import AlertSettings
    from ops.cli.alert_options import alert_settings_of

    args = _guard_parser().parse_args(
        ["--alert-webhook", "https://hooks.example.com/x", "--sandbox-metrics", "http://127.0.0.1:9400/metrics",
         "--alert-off", "reward_jump", "--alert-set", "idle_s=60", "--alert-set", "lag_floor=10",
         "--alert-set", "reward_drop_abs=none"]
    )  # fmt: skip
    settings = alert_settings_of(args)
    assert args.alert_webhook == "https://hooks.example.com/x"
    assert args.sandbox_metrics == ["http://127.0.0.1:9400/metrics"]
    assert settings.disabled == {"reward_jump"} and settings.idle_s == 60.0 and settings.lag_floor == 10
    assert settings.reward_drop_abs is None and settings.reward_recent == AlertSettings().reward_recent


@pytest.mark.parametrize(
    "argv",
    [
        ["--alert-webhook", "hooks.example.com"],
        ["--alert-set", "idel_s=60"],
        ["--alert-set", "lag_floor=1.5"],
        ["--alert-set", "idle_s=none"],
        ["--alert-off", "everything"],
    ],
)
def test_bad_alert_options_are_refused_when_parsed(argv: list[str]) -> None:
    with pytest.raises((argparse.ArgumentError, SystemExit)):
        _guard_parser().parse_args(argv)


def test_settings_out_of_bounds_are_a_stack_error_naming_them() -> None:
    from ops.cli.alert_options import alert_settings_of
    from streams.errors import StackError

    args = _guard_parser().parse_args(["--alert-set", "failure_rate=2"])
    with pytest.raises(StackError, match="failure_rate"):
        alert_settings_of(args)
