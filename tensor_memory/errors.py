"""What every entry point (the command line, the app) does with an expected failure: say it in one line."""

from __future__ import annotations

import errno


class FileFormatError(ValueError):
    """A file that cannot be read as what it should be; the message says which file, why, and what to do."""


# Failures a bad input, a full disk or too large a request can cause; anything else is a bug.
EXPECTED_ERRORS = (ValueError, FloatingPointError, OSError, MemoryError, RuntimeError)


def describe(error: BaseException) -> str:
    """One line for an error: what went wrong and, where it helps, what to do."""
    if isinstance(error, OSError):
        where = f"{error.filename}: " if error.filename else ""
        if error.errno in (errno.ENOSPC, errno.EDQUOT):
            return (
                f"{where}no space left on the disk it is on; free some space or write to another disk (a killed "
                f"or stopped training run continues with --resume, losing nothing)"
            )
        return f"{where}{error.strerror or error}"
    if isinstance(error, MemoryError) or "can't allocate" in str(error) or "out of memory" in str(error).lower():
        return "out of memory; use a smaller batch, sequence or model"
    if isinstance(error, (ValueError, FloatingPointError)):
        return " ".join(str(error).split())
    first = (str(error).strip().splitlines() or [""])[0]
    return f"unexpected {type(error).__name__}: {first} (run again with --debug for the traceback)"


__all__ = ["EXPECTED_ERRORS", "FileFormatError", "describe"]
