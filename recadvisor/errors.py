"""Errors the CLI reports as one line (bad input), as opposed to bugs (tracebacks on request)."""

from __future__ import annotations


class UserError(Exception):
    """Bad input or environment: printed as one line, exit code `code` (2 by default)."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def one_line(e: BaseException) -> str:
    """An exception's first line of text, or its type's name when it has none."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


# Exceptions that mean "the input is wrong", not "recadvisor is wrong". OSError covers
# FileNotFoundError, NotADirectoryError, IsADirectoryError and PermissionError; they are listed
# for the reader.
USER_ERRORS: tuple[type[BaseException], ...] = (
    UserError,
    ValueError,
    FileNotFoundError,
    NotADirectoryError,
    IsADirectoryError,
    PermissionError,
    OSError,
)
