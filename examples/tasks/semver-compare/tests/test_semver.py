import pytest
from release import latest, sort_versions
from semver import compare, parse


def test_numeric_order():
    assert compare("1.9.0", "1.10.0") == -1
    assert compare("10.0.0", "9.99.99") == 1
    assert compare("1.2.3", "1.2.3") == 0


def test_parse():
    assert parse("1.2.3") == (1, 2, 3, [])
    assert parse("2.0.0-rc.1") == (2, 0, 0, ["rc", "1"])


@pytest.mark.parametrize("text", ["1.2", "v1.2.3", "1.2.3.4", "1.2.x", "", "1.2.3-", "01.2.3"])
def test_parse_rejects(text):
    with pytest.raises(ValueError):
        parse(text)


def test_prerelease_before_release():
    assert compare("1.0.0-rc.1", "1.0.0") == -1
    assert compare("1.0.0", "1.0.0-alpha") == 1


def test_prerelease_precedence():
    ordered = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2"]
    ordered += ["1.0.0-beta.11", "1.0.0-rc.1", "1.0.0"]
    assert sort_versions(list(reversed(ordered))) == ordered


def test_latest():
    assert latest(["1.9.0", "1.10.0", "1.2.0"]) == "1.10.0"
    assert latest(["2.0.0-rc.2", "1.9.9", "2.0.0-rc.10"]) == "2.0.0-rc.10"
