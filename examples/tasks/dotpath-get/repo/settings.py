"""Application settings with defaults."""

from dotpath import get

DEFAULTS = {"server.host": "127.0.0.1", "server.ports.0": 8080, "debug": False}


def setting(config, name):
    return get(config, name, DEFAULTS.get(name))
