import pytest
from arith import evaluate
from arith.tokens import ParseError


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("8 - 3 - 2", 3),
        ("16 / 4 / 2", 2),
        ("2 * 3 - 4 / 2 + 1", 5),
        ("10 - 2 + 3", 11),
        ("7", 7),
        ("1.5 * 4", 6),
    ],
)
def test_binary_operators(text, value):
    assert evaluate(text) == value


@pytest.mark.parametrize(("text", "value"), [("-3", -3), ("2 * -(1 + 1)", -4), ("--4", 4), ("-2 - -2", 0)])
def test_unary_minus(text, value):
    assert evaluate(text) == value


def test_true_division():
    assert evaluate("7 / 2") == 3.5


@pytest.mark.parametrize("text", ["", "1 +", "(1 + 2", "1 2", "2 * * 3", "1 + x", ")"])
def test_malformed(text):
    with pytest.raises(ParseError):
        evaluate(text)
