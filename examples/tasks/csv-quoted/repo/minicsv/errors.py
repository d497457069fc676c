"""Errors of the reader."""


class CsvError(ValueError):
    def __init__(self, line, problem):
        super().__init__(f"{problem}: {line!r}")
        self.line = line
