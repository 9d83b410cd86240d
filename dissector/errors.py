"""The project's few exceptions: for misuse of the API and for bugs, never for bad input.

Input: nothing. Output: exception classes.
Rule: protocol faults in captured bytes are anomaly events, not exceptions; these classes
are raised only when the caller breaks a contract (wrong argument, use after close).
"""

import os
import re


class DissectorError(Exception):
    """Base of every exception this package raises on purpose."""


class UsageError(DissectorError, ValueError):
    """The caller broke an API contract (bad argument, wrong call order)."""


class InputError(DissectorError):
    """A file or source cannot be used at all (missing, not a capture)."""


class OutputError(DissectorError):
    """An output cannot be written (missing folder, no permission, disk full)."""


def os_reason(exc: OSError) -> str:
    """What went wrong, in words, without errno numbers or temporary names: 'permission
    denied', 'no space left on device'."""
    found = re.search(r"\[errno (\d+)\]", str(exc), re.IGNORECASE)  # as Arrow's I/O errors
    if found:
        text = os.strerror(int(found.group(1)))
    else:
        text = exc.strerror or str(exc) or type(exc).__name__
    return text[0].lower() + text[1:] if text[:2] != text[:2].upper() else text


def describe_os_error(exc: OSError) -> str:
    """One line for an OSError nobody turned into our own: the path, then the reason."""
    where = f"{exc.filename}: " if exc.filename else ""
    return f"{where}{os_reason(exc)}"
