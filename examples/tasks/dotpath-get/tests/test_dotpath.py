from dotpath import get
from settings import setting

CONFIG = {"server": {"host": "example.org", "ports": [80, 443], "tls": {"enabled": True}}, "name": "demo"}


def test_nested_keys():
    assert get(CONFIG, "server.host") == "example.org"
    assert get(CONFIG, "server.tls.enabled") is True


def test_list_index():
    assert get(CONFIG, "server.ports.1") == 443


def test_missing_returns_default():
    assert get(CONFIG, "server.port") is None
    assert get(CONFIG, "server.ports.5", 0) == 0
    assert get(CONFIG, "name.first", "x") == "x"
    assert get(CONFIG, "server.ports.-1", "neg") == "neg"


def test_falsy_values_are_returned():
    assert get({"a": {"b": 0}}, "a.b", 99) == 0
    assert get({"a": None}, "a", 5) is None


def test_empty_path():
    assert get(CONFIG, "") is CONFIG


def test_settings_fall_back_to_defaults():
    assert setting(CONFIG, "server.host") == "example.org"
    assert setting({}, "server.ports.0") == 8080
    assert setting({"debug": True}, "debug") is True
