from app import greet_all
from greet import greet


def test_greet():
    assert greet("Ada") == "Hello, Ada!"


def test_greet_empty_name():
    assert greet("") == "Hello, !"


def test_greet_all():
    assert greet_all(["Ada", "Alan"]) == "Hello, Ada!\nHello, Alan!"
