"""Splitting expressions into tokens."""

import re

TOKEN = re.compile(r"\s*(?:(\d+(?:\.\d*)?)|(.))")


class ParseError(ValueError):
    pass


def tokenize(text):
    """Return a list of tokens: floats for numbers, one-character strings for operators."""
    tokens = []
    position = 0
    text = text.rstrip()
    while position < len(text):
        match = TOKEN.match(text, position)
        number, operator = match.groups()
        if number is not None:
            tokens.append(float(number))
        elif operator in "+-*/()":
            tokens.append(operator)
        else:
            raise ParseError(f"unexpected character {operator!r} at {match.start(2)}")
        position = match.end()
    return tokens
