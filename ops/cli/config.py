"""trialog's configuration: one TOML file (`--config FILE` before the command, or `$TRIALOG_CONFIG`) and the
environment give every process of a deployment the same settings: brokers and their security, the run
(topic prefix), the object store, where traces go, the health endpoints and grace period, and the defaults
of any worker option (limits, concurrency).

For each key the first found wins: the command line's option > the key's environment variable > the file
> the built-in default. A value from the file is also put in the environment of this process (where that
variable is unset), so the code that reads the variable (the Kafka clients, the object store, telemetry)
and every process started from here see it; a key bound to an option becomes that option's default on
every command that has it, so an option given on the command line still wins. `[worker.KIND]` tables set
defaults of `trialog worker KIND`'s own options, by their long names (no environment variable: option >
file > default).

Every key is checked when loaded, with the option's own parser where it has one: an unknown key, a
misspelt section or a bad value is an error that names the key and the file, before any service is
touched. `trialog config show` prints each key's value and where it came from (secrets masked).
"""

from __future__ import annotations

import argparse
import json
import os
import tomllib
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ops.cli import kit
from streams.errors import StackError
from streams.kafka.clients import MECHANISMS, PROTOCOLS

CONFIG_ENV = "TRIALOG_CONFIG"
CONFIG_OPTION = "--config"
HINT = "fix the key (ops/README.md lists every key, its variable and its option)"
# What the clients accept (streams.kafka.clients checks the same values again when they are made).
SECURITY_PROTOCOLS = PROTOCOLS
SASL_MECHANISMS = MECHANISMS
ON_OFF = ("on", "off", "1", "0", "true", "false", "yes", "no")


class ConfigError(StackError):
    """A configuration file or variable that cannot be used; the message names the key."""


def _choice(*allowed: str) -> Callable[[str], str]:
    def check(text: str) -> str:
        if text not in allowed and text.lower() not in allowed:
            raise argparse.ArgumentTypeError(f"expected one of {', '.join(allowed)}, not {text!r}")
        return text

    return check


def _text(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a value, not an empty string")
    return text


def _object_store(text: str) -> str:
    if text.startswith("s3://"):
        if not text[len("s3://") :].split("/", 1)[0]:
            raise argparse.ArgumentTypeError(f"expected s3://BUCKET[/PREFIX], not {text!r}")
        return text
    if "://" in text:
        raise argparse.ArgumentTypeError(f"expected a folder or s3://BUCKET[/PREFIX], not {text!r}")
    return _text(text)


@dataclass(frozen=True, slots=True)
class Key:
    """One setting: `name` in the file (section.key), its environment variable, the option that overrides
    it (`flag`; `sets_default`: the value becomes that option's default, else the code reads `env`
    itself), how a value is checked, and the built-in default in words."""

    name: str
    env: str
    check: Callable[[str], object]
    default: str
    flag: str | None = None
    sets_default: bool = False
    secret: bool = False


KEYS: tuple[Key, ...] = (
    Key("kafka.bootstrap", "TRIALOG_BOOTSTRAP", kit.bootstrap_servers, "the local stack's broker",
        "--bootstrap", sets_default=True),
    Key("kafka.security_protocol", "TRIALOG_KAFKA_SECURITY_PROTOCOL", _choice(*SECURITY_PROTOCOLS),
        "PLAINTEXT"),
    Key("kafka.sasl_mechanism", "TRIALOG_KAFKA_SASL_MECHANISM", _choice(*SASL_MECHANISMS), "none"),
    Key("kafka.sasl_username", "TRIALOG_KAFKA_SASL_USERNAME", _text, "none"),
    Key("kafka.sasl_password", "TRIALOG_KAFKA_SASL_PASSWORD", _text, "none", secret=True),
    Key("kafka.ssl_cafile", "TRIALOG_KAFKA_SSL_CAFILE", _text, "the system's CAs"),
    Key("kafka.ssl_certfile", "TRIALOG_KAFKA_SSL_CERTFILE", _text, "none"),
    Key("kafka.ssl_keyfile", "TRIALOG_KAFKA_SSL_KEYFILE", _text, "none"),
    Key("run.id", "TRIALOG_RUN", kit.run_id, "none: the bare topic names", "--run", sets_default=True),
    Key("objects.store", "TRIALOG_OBJECT_STORE", _object_store, "$TRIALOG_HOME/objects"),
    Key("objects.s3_endpoint_url", "TRIALOG_S3_ENDPOINT_URL", _text, "AWS's endpoint"),
    Key("telemetry.otlp_endpoint", "OTEL_EXPORTER_OTLP_ENDPOINT", _text,
        "the local stack's Jaeger when it runs", "--otlp-endpoint"),
    Key("telemetry.tracing", "TRIALOG_TRACING", _choice(*ON_OFF), "on"),
    Key("telemetry.metrics_port", "TRIALOG_METRICS_PORT", kit.port, "off", "--metrics-port"),
    Key("health.port", "TRIALOG_HEALTH_PORT", kit.port, "off", "--health-port", sets_default=True),
    Key("health.host", "TRIALOG_HEALTH_HOST", _text, "127.0.0.1", "--health-host", sets_default=True),
    Key("health.liveness_s", "TRIALOG_LIVENESS_S", kit.positive_seconds, "300", "--liveness-s",
        sets_default=True),
    Key("health.grace_s", "TRIALOG_GRACE_S", kit.positive_seconds, "25", "--grace-s", sets_default=True),
)  # fmt: skip
BY_NAME = {key.name: key for key in KEYS}
SECTIONS = sorted({key.name.split(".", 1)[0] for key in KEYS} | {"worker"})


@dataclass(frozen=True, slots=True)
class Setting:
    """A key's effective value (text, as its variable would hold it; None: the built-in default) and
    where it came from: "env", "file" or "default"."""

    key: Key
    value: str | None
    source: str


@dataclass(frozen=True, slots=True)
class WorkerDefault:
    """A `[worker.KIND]` entry: the default of `trialog worker KIND --OPTION`."""

    kind: str
    option: str
    value: Any


@dataclass(frozen=True, slots=True)
class Config:
    path: Path | None
    settings: tuple[Setting, ...]
    workers: tuple[WorkerDefault, ...] = ()

    def value(self, name: str) -> str | None:
        return next(setting.value for setting in self.settings if setting.key.name == name)

    def export(self, environ: MutableMapping[str, str]) -> None:
        """Put the file's values (and the file itself) in `environ`, where unset: what this process's
        libraries read, and what the processes it starts inherit."""
        if self.path is not None:
            environ.setdefault(CONFIG_ENV, str(self.path))
        for setting in self.settings:
            if setting.source == "file" and setting.value is not None:
                environ.setdefault(setting.key.env, setting.value)

    def apply(self, parser: argparse.ArgumentParser) -> None:
        """Make the values the defaults of their options, on every command of `parser` that has them."""
        defaults = {s.key.flag: s.value for s in self.settings if s.key.sets_default and s.value is not None}
        for command in _parsers(parser):
            for action in command._actions:
                for flag in action.option_strings:
                    if flag in defaults:
                        action.default = defaults[flag]  # text: argparse parses it with the option's type
        for entry in self.workers:
            action = _worker_option(parser, entry.kind, entry.option, self.path)
            action.default = entry.value

    def document(self) -> dict[str, Any]:
        """What `trialog config show --json` prints."""
        return {
            "file": None if self.path is None else str(self.path),
            "keys": [
                {
                    "key": s.key.name,
                    "value": _shown(s),
                    "source": s.source,
                    "env": s.key.env,
                    "option": s.key.flag,
                    "default": s.key.default,
                }
                for s in self.settings
            ],
            "workers": [
                {"worker": w.kind, "option": f"--{w.option}", "value": w.value, "source": "file"}
                for w in self.workers
            ],
        }


def _shown(setting: Setting) -> str | None:
    return "***" if setting.key.secret and setting.value is not None else setting.value


def config_path(argv: Sequence[str], environ: Mapping[str, str]) -> Path | None:
    """The file named by `--config FILE` among the options before the command, else by $TRIALOG_CONFIG."""
    words = list(argv)
    for index, word in enumerate(words):
        if word == CONFIG_OPTION and index + 1 < len(words):
            return Path(words[index + 1])
        if word.startswith(CONFIG_OPTION + "="):
            return Path(word.split("=", 1)[1])
        if not word.startswith("-"):
            break  # the command: what follows are its options
    named = environ.get(CONFIG_ENV, "").strip()
    return Path(named) if named else None


def load(path: Path | None, environ: Mapping[str, str], parser: argparse.ArgumentParser) -> Config:
    """The effective configuration: `path` (None: no file) under `environ`, every key and every worker
    option checked (the latter against `parser`, the `trialog` parser)."""
    table = _read(path) if path is not None else {}
    where = str(path)
    settings = []
    for key in KEYS:
        section, name = key.name.split(".", 1)
        in_file = table.get(section, {}).get(name)
        env_text = environ.get(key.env, "")
        if env_text.strip():
            settings.append(Setting(key, _checked(key, env_text, f"${key.env}"), "env"))
        elif in_file is not None:
            settings.append(Setting(key, _checked(key, _as_text(in_file, key.name, where), where), "file"))
        else:
            settings.append(Setting(key, None, "default"))
    workers = tuple(_worker_defaults(table.get("worker", {}), parser, path))
    return Config(path, tuple(settings), workers)


def _read(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as file:
            table = tomllib.load(file)
    except FileNotFoundError:
        raise ConfigError(
            f"no configuration file at {path}", f"check {CONFIG_OPTION} or ${CONFIG_ENV}"
        ) from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}", "fix the TOML") from None
    for section, keys in table.items():
        if section not in SECTIONS:
            raise ConfigError(f"{path}: unknown section [{section}] (known: {', '.join(SECTIONS)})", HINT)
        if not isinstance(keys, dict):
            raise ConfigError(f"{path}: {section} must be a table ([{section}])", HINT)
        if section == "worker":
            continue
        for name in keys:
            if f"{section}.{name}" not in BY_NAME:
                known = ", ".join(k.name.split(".", 1)[1] for k in KEYS if k.name.startswith(section + "."))
                raise ConfigError(
                    f"{path}: unknown key {section}.{name} (known in [{section}]: {known})", HINT
                )
    return table


def _as_text(value: object, name: str, where: str) -> str:
    """A TOML value as its environment variable would hold it."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, str | int | float):
        return str(value)
    raise ConfigError(f"{where}: {name} must be a string, a number or a boolean, not {value!r}", HINT)


def _checked(key: Key, text: str, where: str) -> str:
    try:
        key.check(text)
    except argparse.ArgumentTypeError as exc:
        raise ConfigError(f"{where}: {key.name}: {exc}", HINT) from None
    return text


def _worker_defaults(
    tables: dict[str, Any], parser: argparse.ArgumentParser, path: Path | None
) -> Iterator[WorkerDefault]:
    for kind, options in tables.items():
        if not isinstance(options, dict):
            raise ConfigError(f"{path}: worker.{kind} must be a table ([worker.{kind}])", HINT)
        for option, value in options.items():
            action = _worker_option(parser, kind, option, path)
            yield WorkerDefault(kind, option.replace("_", "-"), _worker_value(action, value, kind, path))


def _worker_option(
    parser: argparse.ArgumentParser, kind: str, option: str, path: Path | None
) -> argparse.Action:
    """The action of `trialog worker KIND --OPTION`; a ConfigError naming the key when there is none or it
    cannot have a default from a file (a required or repeatable option belongs on the command line)."""
    workers = _subcommand(_subcommand(parser, "worker"), None)
    if kind not in workers:
        raise ConfigError(
            f"{path}: unknown worker [worker.{kind}] (known: {', '.join(sorted(workers))})", HINT
        )
    flag = "--" + option.replace("_", "-")
    command: argparse.ArgumentParser = workers[kind]
    for action in command._actions:
        if flag in action.option_strings:
            if action.required or isinstance(action, argparse._AppendAction) or flag == "--help":
                raise ConfigError(
                    f"{path}: worker.{kind}.{option}: {flag} is required or repeatable; give it on the "
                    "command line",
                    HINT,
                )
            return action
    raise ConfigError(
        f"{path}: unknown key worker.{kind}.{option}: trialog worker {kind} has no {flag}", HINT
    )


def _worker_value(action: argparse.Action, value: object, kind: str, path: Path | None) -> Any:
    """The default to give `action`: a boolean for a switch, else the text its type parses (checked now)."""
    name = f"worker.{kind}.{action.option_strings[0][2:]}"
    if isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction):
        if not isinstance(value, bool):
            raise ConfigError(f"{path}: {name} must be true or false, not {value!r}", HINT)
        return value
    text = _as_text(value, name, str(path)) if not isinstance(value, bool) else None
    if text is None:
        raise ConfigError(f"{path}: {name} takes a value, not {value!r}", HINT)
    try:
        parsed = action.type(text) if callable(action.type) else text
    except (argparse.ArgumentTypeError, ValueError, TypeError) as exc:
        raise ConfigError(f"{path}: {name}: {exc}", HINT) from None
    if action.choices is not None and parsed not in action.choices:
        choices = ", ".join(map(str, action.choices))
        raise ConfigError(f"{path}: {name}: expected one of {choices}, not {value!r}", HINT)
    return text


def _subcommand(parser: argparse.ArgumentParser, name: str | None) -> Any:
    """The subparser `name` of `parser` (None: the mapping of all of them)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices if name is None else action.choices[name]
    raise KeyError(name)


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from _parsers(child)


def configure(
    parser: argparse.ArgumentParser, argv: Sequence[str], environ: MutableMapping[str, str] = os.environ
) -> Config:
    """Load the configuration `argv` and `environ` name, put the file's values in `environ` and the
    options' defaults in `parser`; the Config (for `config show`). ConfigError when it cannot be used."""
    config = load(config_path(argv, environ), environ, parser)
    config.export(environ)
    config.apply(parser)
    parser.set_defaults(effective_config=config)
    return config


# -- the command ------------------------------------------------------------------------------------------


def add_option(parser: argparse.ArgumentParser) -> None:
    """The global `--config FILE` (read before the command is parsed: `configure`)."""
    parser.add_argument(
        CONFIG_OPTION,
        dest="config_file",
        metavar="FILE",
        help=f"a TOML configuration file, given before the command (default: ${CONFIG_ENV}; see "
        "trialog config show)",
    )


def register(subparsers: kit.Subparsers) -> None:
    group = kit.command(
        subparsers,
        "config",
        "show the effective configuration (file, environment, defaults)",
        description=__doc__,
        examples=("trialog config show", "trialog --config ops/deploy/trialog.toml config show --json"),
    )
    commands = kit.subcommands(group, "config_command")
    show = kit.command(
        commands,
        "show",
        "print every key's value and where it came from (env, file, default); secrets masked",
        handler=_cmd_show,
        examples=("trialog config show", "trialog --config ops/deploy/trialog.toml config show --json"),
    )
    kit.add_json(show)


def _cmd_show(args: argparse.Namespace) -> int:
    config: Config = args.effective_config
    if args.json:
        print(json.dumps(config.document(), indent=2))
        return kit.EXIT_OK
    print(f"configuration file: {config.path or f'none (--config FILE or ${CONFIG_ENV})'}")
    rows = [
        (
            s.key.name,
            _shown(s) or f"({s.key.default})",
            s.source,
            s.key.env + (f", {s.key.flag}" if s.key.flag else ""),
        )
        for s in config.settings
    ]
    rows += [
        (f"worker.{w.kind}.{w.option}", str(w.value), "file", f"trialog worker {w.kind} --{w.option}")
        for w in config.workers
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    print(f"{'key':<{widths[0]}}  {'value':<{widths[1]}}  {'from':<{widths[2]}}  variable, option")
    for row in rows:
        print(f"{row[0]:<{widths[0]}}  {row[1]:<{widths[1]}}  {row[2]:<{widths[2]}}  {row[3]}")
    return kit.EXIT_OK
