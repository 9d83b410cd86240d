"""EDGE: text from a capture made safe to print on a terminal.

Input: a string that may hold bytes an attacker chose (a topic, a producer name, an error
message, a file name).
Output: the same string with every control character written as an escape.
Rule: as tshark shows strings, nothing from the capture reaches the terminal as a control:
C0 controls (ESC, BEL, CR, LF, TAB, ... : `\\x1b`, `\\a`, `\\r`, `\\n`, `\\t`), DEL, C1 controls
(U+0080 to U+009F: CSI and OSC on some terminals), the bidirectional overrides and isolates
that can hide or reorder text (U+202A to U+202E, U+2066 to U+2069) and lone surrogates (the
undecodable bytes of a file name, shown as the byte `\\xNN`). A string with none of them is
returned as it is (one regex search, in C).
"""

from __future__ import annotations

import re

_NAMED = {0x07: "\\a", 0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0B: "\\v", 0x0C: "\\f", 0x0D: "\\r"}

_ESCAPES: dict[int, str] = {}
for _cp in [*range(0x20), 0x7F]:
    _ESCAPES[_cp] = _NAMED.get(_cp, f"\\x{_cp:02x}")
for _cp in [*range(0x80, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A)]:
    _ESCAPES[_cp] = f"\\u{_cp:04x}"
for _cp in range(0xD800, 0xE000):  # surrogateescape keeps an undecodable byte b as U+DC00+b
    _ESCAPES[_cp] = f"\\x{_cp - 0xDC00:02x}" if 0xDC80 <= _cp <= 0xDCFF else f"\\u{_cp:04x}"

_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]", re.UNICODE)


def printable(text: str) -> str:
    """`text` with its control characters escaped (newlines too: one value, one line)."""
    if _UNSAFE.search(text) is None:
        return text
    return text.translate(_ESCAPES)


def printable_lines(text: str) -> str:
    """Text made of our own lines (a view, a message): each line made printable, the line
    breaks kept."""
    return "\n".join(printable(line) for line in text.split("\n"))
