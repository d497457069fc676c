"""Greetings."""


def greet(name):
    """Return 'Hello, NAME!'."""
    return f"Hello {name}"
