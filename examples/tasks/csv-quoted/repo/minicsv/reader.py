"""Parsing one line of CSV."""


def parse_line(line):
    """Return the fields of one CSV line."""
    return line.split(",")
