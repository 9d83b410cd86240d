"""Work counted by comparisons: message ids whose parts count every comparison made with them.

Input: ledger and entry numbers.
Output: `Counted` (an int that counts its comparisons in `Counted.calls`), `mid` (a
MessageIdData stand-in made of them), `body` (a command stand-in with the given fields;
`HasField` says which were given) and `frame` (a Frame carrying it).
Rule: a scan of n pending ids compares about n ids, a heap about log n: the count is the work,
whatever the machine's speed (no wall clock). Only interpreted code calls these methods (a
compiled module unboxes the ints): under mypyc the counts are lower, never higher.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from dissector.events import Direction, Frame
from dissector.pulsar.wire import COMMAND_TYPES


class Counted(int):
    """An int counting the comparisons made with it (class-wide, in `calls`)."""

    calls = 0

    def _count(self, other: object, op: Any) -> Any:
        Counted.calls += 1
        return op(int(self), other)

    def __eq__(self, other: object) -> bool:
        return bool(self._count(other, int.__eq__))

    def __ne__(self, other: object) -> bool:
        return bool(self._count(other, int.__ne__))

    def __lt__(self, other: int) -> bool:
        return bool(self._count(other, int.__lt__))

    def __le__(self, other: int) -> bool:
        return bool(self._count(other, int.__le__))

    def __gt__(self, other: int) -> bool:
        return bool(self._count(other, int.__gt__))

    def __ge__(self, other: int) -> bool:
        return bool(self._count(other, int.__ge__))

    __hash__ = int.__hash__


def mid(ledger: int, entry: int) -> SimpleNamespace:
    """A MessageIdData stand-in whose ids count their comparisons."""
    return SimpleNamespace(ledgerId=Counted(ledger), entryId=Counted(entry), ack_set=[])


def body(**fields: Any) -> SimpleNamespace:
    """A command stand-in: the fields given, and HasField naming them."""
    given = set(fields)
    return SimpleNamespace(HasField=given.__contains__, **fields)


def frame(name: str, body: Any, ts: int, packet: int, direction: Direction) -> Frame:
    """A Frame of command `name` carrying `body`, completed at `ts` in `packet`."""
    return Frame(
        conn_id=1,
        direction=direction,
        stream_offset=packet * 100,
        total_size=0,
        command_size=0,
        command_type=COMMAND_TYPES[name],
        command_name=name,
        command=None,
        body=body,
        checksum=None,
        first_packet=packet,
        last_packet=packet,
        first_ts=ts,
        last_ts=ts,
    )
