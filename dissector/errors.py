"""The project's few exceptions: for misuse of the API and for bugs, never for bad input.

Input: nothing. Output: exception classes.
Rule: protocol faults in captured bytes are anomaly events, not exceptions; these classes
are raised only when the caller breaks a contract (wrong argument, use after close).
"""


class DissectorError(Exception):
    """Base of every exception this package raises on purpose."""


class UsageError(DissectorError, ValueError):
    """The caller broke an API contract (bad argument, wrong call order)."""


class InputError(DissectorError):
    """A file or source cannot be used at all (missing, not a capture)."""
