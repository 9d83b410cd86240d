"""Fuzzing where data leaves the core: string fields with any bytes, commands without body.

A Hypothesis harness over a whole producer/consumer conversation: every string field of
every command and of the metadata gets arbitrary bytes (valid UTF-8 or not), and any
command may lose its sub-message. Whatever it draws, reading the capture gives every table
and the text view without an exception, every string column holds text, stream bytes are
accounted for, and every anomaly code is a registered one.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dissector.anomalies import REGISTRY
from dissector.frontends.cli import main
from dissector.pulsar.encoder import command, encode_frame
from dissector.pulsar.wire import BaseCommand, MessageMetadata
from dissector.read import read_tables
from tests.support.crafted import B2C, C2B, Msg, Session, write_pcap

MARK = b"QQQQ"  # every string below holds it; drawn bytes of the same length replace it


def conversation() -> list[tuple[str, Any, dict[str, Any]]]:
    """(command, direction, fields) of a short session, every string carrying MARK."""
    m = MARK.decode()
    mid = {"ledgerId": 7, "entryId": 3}
    return [
        ("CONNECT", C2B, {"client_version": f"c{m}", "protocol_version": 21}),
        ("CONNECTED", B2C, {"server_version": f"s{m}", "protocol_version": 21}),
        ("LOOKUP", C2B, {"topic": f"t{m}", "request_id": 1}),
        ("PRODUCER", C2B, {"topic": f"t{m}", "producer_id": 1, "request_id": 2}),
        ("PRODUCER_SUCCESS", B2C, {"request_id": 2, "producer_name": f"p{m}"}),
        ("SEND", C2B, {"producer_id": 1, "sequence_id": 0}),
        ("SEND_RECEIPT", B2C, {"producer_id": 1, "sequence_id": 0, "message_id": mid}),
        (
            "SUBSCRIBE",
            C2B,
            {
                "topic": f"t{m}",
                "subscription": f"s{m}",
                "subType": 0,
                "consumer_id": 2,
                "request_id": 3,
            },
        ),
        ("ERROR", B2C, {"request_id": 3, "error": 1, "message": f"e{m}"}),
        ("MESSAGE", B2C, {"consumer_id": 2, "message_id": mid}),
    ]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    strings=st.lists(st.binary(min_size=4, max_size=4), min_size=20, max_size=20),
    bodiless=st.sets(st.integers(0, 9), max_size=3),
)
def test_any_string_bytes_and_missing_bodies_give_tables(
    tmp_path_factory: Any, strings: list[bytes], bodiless: set[int]
) -> None:
    drawn = iter(strings)

    def spoil(raw: bytes) -> bytes:
        while MARK in raw:
            raw = raw.replace(MARK, next(drawn), 1)
        return raw

    meta = MessageMetadata(producer_name=f"p{MARK.decode()}", sequence_id=0, publish_time=1)
    meta.properties.add(key=f"k{MARK.decode()}", value=f"v{MARK.decode()}")
    msgs = []
    for i, (name, direction, fields) in enumerate(conversation()):
        cmd = command(name, **fields)
        if i in bodiless:
            cmd = BaseCommand(type=cmd.type)
        raw = spoil(cmd.SerializeToString())
        if name in ("SEND", "MESSAGE"):
            head = raw if i in bodiless else cmd
            metadata = spoil(meta.SerializeToString())
            data = encode_frame(head, metadata=metadata, payload=b"x", checksum=name == "SEND")
        else:
            data = encode_frame(raw)
        msgs.append(Msg(direction, name, data))
    s = Session()
    s.handshake()
    s.exchange(msgs)
    s.close()
    path = write_pcap(Path(tmp_path_factory.mktemp("fz")) / "f.pcap", s.segs).path
    tables = read_tables(path)
    for table in tables.values():
        for column in table.columns:
            if str(column.type) == "string":
                assert all(v is None or isinstance(v, str) for v in column.to_pylist())
    assert set(tables["anomalies"]["code"].to_pylist()) <= set(REGISTRY)
    (conv,) = tables["conversations"].to_pylist()
    for side in ("c2b", "b2c"):
        parts = sum(conv[f"{k}_bytes_{side}"] for k in ("frame", "skipped", "gap"))
        assert (
            parts + (conv["preamble_bytes"] if side == "c2b" else 0) == conv[f"stream_bytes_{side}"]
        )
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["read", str(path)]) == 0
