"""Greets a list of people, one line each."""

from greet import greet


def greet_all(names):
    return "\n".join(greet(name) for name in names)
