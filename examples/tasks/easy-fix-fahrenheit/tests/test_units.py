import pytest
from units import celsius_to_fahrenheit, fahrenheit_to_celsius
from weather import forecast


def test_freezing_point():
    assert celsius_to_fahrenheit(0) == 32


def test_boiling_point():
    assert celsius_to_fahrenheit(100) == 212


def test_round_trip():
    assert fahrenheit_to_celsius(celsius_to_fahrenheit(37)) == pytest.approx(37)


def test_forecast():
    assert forecast("Oslo", -40) == "Oslo: -40°C / -40°F"
