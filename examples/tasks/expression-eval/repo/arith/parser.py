"""A recursive-descent parser that evaluates as it parses.

Grammar:
    expression := term (("+" | "-") term)*
    term       := factor (("*" | "/") factor)*
    factor     := NUMBER | "(" expression ")"
"""

from arith.tokens import ParseError, tokenize


class _Parser:
    def __init__(self, tokens):
        self.tokens = tokens
        self.position = 0

    def peek(self):
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def take(self):
        token = self.peek()
        if token is None:
            raise ParseError("unexpected end of expression")
        self.position += 1
        return token

    def expression(self):
        left = self.term()
        if self.peek() in ("+", "-"):
            operator = self.take()
            right = self.expression()
            return left + right if operator == "+" else left - right
        return left

    def term(self):
        left = self.factor()
        if self.peek() in ("*", "/"):
            operator = self.take()
            right = self.term()
            return left * right if operator == "*" else left / right
        return left

    def factor(self):
        token = self.take()
        if isinstance(token, float):
            return token
        if token == "(":
            value = self.expression()
            if self.take() != ")":
                raise ParseError("expected ')'")
            return value
        raise ParseError(f"unexpected {token!r}")


def evaluate(text):
    parser = _Parser(tokenize(text))
    value = parser.expression()
    if parser.peek() is not None:
        raise ParseError(f"unexpected {parser.peek()!r} after the expression")
    return value
