import copy

from settings.layers import DEFAULTS, layered
from settings.merge import deep_merge


def test_flat_override():
    assert deep_merge({"a": 1, "b": 2}, {"b": 3, "c": 4}) == {"a": 1, "b": 3, "c": 4}


def test_nested_dicts_merge():
    base = {"server": {"host": "h", "port": 1}}
    assert deep_merge(base, {"server": {"port": 2}}) == {"server": {"host": "h", "port": 2}}


def test_lists_are_replaced():
    assert deep_merge({"x": [1, 2]}, {"x": [3]}) == {"x": [3]}


def test_dict_replaces_scalar_and_back():
    assert deep_merge({"a": 1}, {"a": {"b": 2}}) == {"a": {"b": 2}}
    assert deep_merge({"a": {"b": 2}}, {"a": 1}) == {"a": 1}


def test_inputs_are_not_modified():
    base = {"a": {"b": 1}, "l": [1]}
    override = {"a": {"c": 2}}
    saved_base, saved_override = copy.deepcopy(base), copy.deepcopy(override)
    result = deep_merge(base, override)
    assert base == saved_base and override == saved_override
    result["a"]["b"] = 99
    result["l"].append(2)
    assert base == saved_base


def test_result_does_not_alias_override():
    override = {"a": {"b": [1]}}
    result = deep_merge({}, override)
    result["a"]["b"].append(2)
    assert override == {"a": {"b": [1]}}


def test_layers():
    config = layered(
        {"server": {"port": 9000}}, {"server": {"tls": {"enabled": True}}, "log": {"level": "debug"}}
    )
    assert config["server"] == {"host": "127.0.0.1", "port": 9000, "tls": {"enabled": True}}
    assert config["log"] == {"level": "debug", "handlers": ["console"]}
    assert DEFAULTS["server"]["port"] == 8000
