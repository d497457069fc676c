"""The options of a process that raises alerts (the guard, `trialog worker guard`): where alerts are posted,
which sandbox workers' metrics to read, which rules are off, and any rule setting changed; all checked
when parsed. `add_alert_options(parser)` adds them; `alert_settings_of(args)` builds the engine's
`AlertSettings` (a `StackError` that names the setting when a value breaks a rule's bounds).
"""

from __future__ import annotations

import argparse
import dataclasses
import urllib.parse
from typing import TYPE_CHECKING, Any

from ops.cli import kit
from ops.cli.alerts import RULES
from streams.errors import StackError

if TYPE_CHECKING:
    from actors.guard.alerts import AlertSettings


def add_alert_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--alert-webhook",
        type=webhook_url,
        metavar="URL",
        help="also POST each alert as JSON to URL (short timeout, retried with backoff; never waited for)",
    )
    parser.add_argument(
        "--sandbox-metrics",
        action="append",
        type=webhook_url,
        default=[],
        metavar="URL",
        help="a sandbox worker's metrics endpoint (http://HOST:PORT/metrics), read for the acquire "
        "latency rule (repeat per worker; none: the rule has nothing to read)",
    )
    parser.add_argument(
        "--alert-off",
        action="append",
        choices=RULES,
        default=[],
        metavar="RULE",
        help=f"turn a rule off (repeatable): {', '.join(RULES)}",
    )
    parser.add_argument(
        "--alert-set",
        action="append",
        type=alert_setting,
        default=[],
        metavar="NAME=VALUE",
        help="change a rule's setting, e.g. reward_drop_abs=0.2, idle_s=3600, lag_floor=5000 (repeatable; "
        "'none' turns an optional threshold off; see actors/guard/alerts.py AlertSettings)",
    )


def webhook_url(text: str) -> str:
    """An http(s) URL with a host (any host: real receivers are remote)."""
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"expected an http:// or https:// URL with a host, not {text!r}")
    return text


def alert_setting(text: str) -> tuple[str, Any]:
    """`NAME=VALUE` for a field of `AlertSettings`, VALUE read as that field's type."""
    from actors.guard.alerts import AlertSettings

    name, value = kit.key_value(text)
    fields = {
        f.name: f for f in dataclasses.fields(AlertSettings) if f.name not in ("disabled", "failure_ignored")
    }
    if name not in fields:
        raise argparse.ArgumentTypeError(f"no alert setting {name!r} (known: {', '.join(sorted(fields))})")
    default = getattr(AlertSettings(), name)
    if value.lower() == "none" and "None" in str(fields[name].type):
        return name, None
    kind = int if isinstance(default, int) else float
    try:
        return name, kind(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{name} takes {'an integer' if kind is int else 'a number'}"
        ) from None


def alert_settings_of(args: argparse.Namespace) -> AlertSettings:
    from actors.guard.alerts import AlertSettings, Rule

    changes = dict(args.alert_set)
    try:
        return AlertSettings(disabled=frozenset(Rule(rule) for rule in args.alert_off), **changes)
    except ValueError as exc:
        raise StackError(str(exc), "change the value given with --alert-set") from None
