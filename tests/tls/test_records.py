"""tls.records: records out of one direction's bytes, resync after garbage and gaps.

Streams are hand-built records (5-byte header, RFC 8446 5.1 / RFC 5246 6.2) and garbage made
of plausible headers; the expected records are the ones the test put in. Each stream is fed
whole, one byte at a time and in 7-byte pieces (the h11 way): the records are the same.
Rules checked: every byte is a record or lost (record bytes + lost bytes == stream length);
a candidate found while resyncing is accepted when `check` says it opens, rejected when it
says it cannot, judged by the header after it when `check` cannot say; and `check` is asked
once per candidate it gives a verdict on, so what a check costs (trial decryptions in
tls.side) is paid once per candidate, never again as more bytes arrive.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dissector.tls.records import HEADER_LEN, Lost, Record, RecordReader
from tests.support.tls13_craft import record

Check = Callable[[Record], bool | None]
FEEDS = {"whole": 0, "bytes": 1, "pieces": 7}
#: A plausible header claiming a 1 KiB application data record: garbage made of these has a
#: resync candidate every 5 bytes.
UNIT = bytes.fromhex("1703030400")


def read(
    stream: bytes, each: int, check: Check | None = None, synced: bool = True
) -> list[Record | Lost]:
    reader = RecordReader(synced=synced, check=check)
    out: list[Record | Lost] = []
    pieces = [stream] if not each else [stream[i : i + each] for i in range(0, len(stream), each)]
    for piece in pieces:
        out += reader.feed(piece)
    return out + reader.close()


def accounted(items: list[Record | Lost]) -> int:
    return sum(HEADER_LEN + len(i.fragment) if isinstance(i, Record) else i.length for i in items)


def records(items: list[Record | Lost]) -> list[tuple[int, bytes, int]]:
    return [(i.ctype, i.fragment, i.offset) for i in items if type(i) is Record]


REAL = [record(23, bytes([n]) * (40 + n)) for n in range(30)]  # 1.8 KB after garbage


def stream_with_garbage(units: int) -> tuple[bytes, int]:
    """Two records, garbage (a byte that is no header, then `units` plausible headers),
    the other records (longer than a garbage candidate, so that every candidate is whole);
    returns the stream and the offset of the third record."""
    head = REAL[0] + REAL[1]
    garbage = b"\x00" + UNIT * units
    return head + garbage + b"".join(REAL[2:]), len(head) + len(garbage)


@pytest.mark.parametrize("feed", list(FEEDS))
def test_clean_stream_gives_its_records(feed: str) -> None:
    stream = b"".join(REAL)
    items = read(stream, FEEDS[feed])
    at, want = 0, []
    for r in REAL:
        want.append((23, r[5:], at))
        at += len(r)
    assert records(items) == want
    assert accounted(items) == len(stream)


@pytest.mark.parametrize("feed", list(FEEDS))
@pytest.mark.parametrize("verdict", ["opens", "never", "cannot_say"])
def test_every_byte_is_a_record_or_lost_after_plausible_garbage(feed: str, verdict: str) -> None:
    stream, third = stream_with_garbage(300)
    starts = {third + sum(len(r) for r in REAL[2:k]) for k in range(2, len(REAL))}

    def check(rec: Record) -> bool | None:
        if verdict == "cannot_say":
            return None
        return verdict == "opens" and rec.offset in starts  # the key opens real records only

    items = read(stream, FEEDS[feed], check)
    assert accounted(items) == len(stream)
    lost = [i for i in items if type(i) is Lost]
    assert all(i.reason == "skipped" for i in lost)
    found = [r for r in records(items) if r[2] >= third]
    if verdict == "opens":  # resynced on the third record, then the rest in order
        assert [r[1] for r in found] == [r[5:] for r in REAL[2:]]
        assert sum(i.length for i in lost) == 1 + 5 * 300
    elif verdict == "never":  # nothing after the garbage can be a record
        assert found == [] and sum(i.length for i in lost) == len(stream) - third + 1 + 1500


@pytest.mark.parametrize("units", [500, 1000])
def test_check_is_asked_once_per_candidate(units: int) -> None:
    stream, third = stream_with_garbage(units)
    asked: list[int] = []

    def check(rec: Record) -> bool:
        asked.append(rec.offset)
        return rec.offset == third

    items = read(stream, 1, check)  # one byte at a time: the most chances to ask again
    assert len(asked) == len(set(asked))
    assert len(asked) == units + 1  # each header of the garbage, then the third record
    assert [r[1] for r in records(items)] == [r[5:] for r in REAL]


def test_gap_then_garbage_is_accounted() -> None:
    stream, third = stream_with_garbage(200)
    reader = RecordReader(check=lambda rec: rec.offset == third + 1000)
    cut = len(REAL[0]) + 3  # in the second record's header
    items = reader.feed(stream[:cut]) + reader.gap(1000)
    items += reader.feed(stream[cut:]) + reader.close()
    assert accounted(items) == len(stream) + 1000
    assert [r[1] for r in records(items)] == [REAL[0][5:]] + [r[5:] for r in REAL[2:]]
