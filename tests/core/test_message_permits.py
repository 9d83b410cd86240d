"""CommandMessage.message_permits (field 6, apache/pulsar PIP-491) through the compiled core:
the C scan and the Python decoder agree on MESSAGE frames that carry it, and the tables
read with the core on are the pure-Python ones.

MESSAGE commands are encoded by hand (tests.facts.test_permits.message_command, not our
bindings), with the field as the PIP declares it (a uint32 varint), absent, at the largest
varint a uint32 field is decoded from, and with the wrong wire type (a length-delimited
field 6: upb keeps it as an unknown field, so the C scan must hand that frame back to
Python). The comparison is tests/core/test_frames_differential.py's (`compare`), and
tests/core/test_frame_runs.py's for the tables (`same`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dissector.events import Frame
from dissector.pulsar.encoder import encode_frame
from dissector.pulsar.framing import FrameDecoder
from dissector.pulsar.wire import MessageMetadata
from tests.core.test_frame_runs import RunCount, same
from tests.core.test_frames_differential import Walk, compare, needs_frames
from tests.facts.test_permits import _field, message_command
from tests.support.crafted import B2C, C2B, Msg, msg
from tests.support.scenes import Scene, ack, flow, subscribe


def _meta(n: int) -> MessageMetadata:
    return MessageMetadata(
        producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=n
    )


def _wrong_wire(entry: int) -> bytes:
    """A MESSAGE whose field 6 is length-delimited (wire type 2), not a varint."""
    mid = _field(1, 0, 1) + _field(2, 0, entry)
    body = _field(1, 0, 2) + _field(2, 2, mid) + _field(6, 2, b"\x05")
    return _field(1, 0, 9) + _field(9, 2, body)


def _frames() -> list[bytes]:
    commands = [
        message_command(2, 1, 0, 5),
        message_command(2, 1, 1, None),
        message_command(2, 1, 2, 2**32 - 1),
        _wrong_wire(3),
        message_command(2, 1, 4, 1),
    ]
    return [encode_frame(c, metadata=_meta(5), payload=b"x" * 5, checksum=False) for c in commands]


def test_python_decodes_each_variant() -> None:
    decoder = FrameDecoder(conn_id=1, direction=B2C)
    frames = decoder.feed(b"".join(_frames()), packet=1, ts=1)
    bodies = [f.body for f in frames if isinstance(f, Frame)]
    assert len(bodies) == 5
    assert [b.message_permits if b.HasField("message_permits") else None for b in bodies] == [
        5,
        None,
        2**32 - 1,
        None,  # the wrong wire type: an unknown field, not the value
        1,
    ]


@needs_frames
def test_the_c_scan_agrees_and_takes_the_valid_ones() -> None:
    walk = Walk()
    compare(b"".join(_frames()), walk)
    assert walk.taken == 4 and walk.handed_back == 1, vars(walk)


def test_tables_with_the_core_are_the_pure_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = Scene()
    s.open()
    for m in subscribe():
        s.at(0, m)
    s.at(0.1, flow(100))
    for i, data in enumerate(_frames()):
        s.at(1 + i / 10, Msg(B2C, "MESSAGE", data))
    s.at(2, ack(0, 1, 2, 3, 4))
    s.at(2.1, msg(C2B, "FLOW", consumer_id=2, messagePermits=25))
    s.close(3)
    path = s.write(tmp_path / "c.pcap")
    from dissector import _core

    if not _core.COMPILED:
        pytest.skip("pure-Python build: nothing to compare")
    same(monkeypatch, RunCount(monkeypatch), [path])
