"""Defaults, then a file, then the environment: later layers win."""

from settings.merge import deep_merge

DEFAULTS = {
    "server": {"host": "127.0.0.1", "port": 8000, "tls": {"enabled": False}},
    "log": {"level": "info", "handlers": ["console"]},
}


def layered(*layers):
    result = DEFAULTS
    for layer in layers:
        result = deep_merge(result, layer)
    return result
