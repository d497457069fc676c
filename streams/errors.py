"""The error a process raises when something it needs is missing or unusable (a service that does not
answer, a model that cannot be fetched): a message and, where there is one, the command that fixes it.
The CLI prints both on one line each and exits with code 2; it never shows a traceback for one."""

from __future__ import annotations


class StackError(Exception):
    """A component could not be set up, started or reached; `hint` says what the user can do about it."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}\n  hint: {self.hint}" if self.hint else self.message
