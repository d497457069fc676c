"""Roman numerals."""

NUMERALS = [
    (1000, "M"),
    (500, "D"),
    (100, "C"),
    (50, "L"),
    (10, "X"),
    (5, "V"),
    (1, "I"),
]
VALUES = {"M": 1000, "D": 500, "C": 100, "L": 50, "X": 10, "V": 5, "I": 1}


def to_roman(n):
    if not 1 <= n <= 3999:
        raise ValueError(f"{n} cannot be written in Roman numerals")
    out = []
    for value, numeral in NUMERALS:
        while n >= value:
            out.append(numeral)
            n -= value
    return "".join(out)


def from_roman(text):
    total = 0
    for index, char in enumerate(text):
        value = VALUES[char]
        if index + 1 < len(text) and VALUES[text[index + 1]] > value:
            total -= value
        else:
            total += value
    return total
