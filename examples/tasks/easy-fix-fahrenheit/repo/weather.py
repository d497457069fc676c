"""Formatting a forecast."""

from units import celsius_to_fahrenheit


def forecast(city, celsius):
    fahrenheit = celsius_to_fahrenheit(celsius)
    return f"{city}: {celsius:.0f}°C / {fahrenheit:.0f}°F"
