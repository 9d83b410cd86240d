"""flow.sides.swap: the one operation that swaps what a connection says or keeps per side.

Each expected value is written by hand from the rule (a swap changes what is said per side
and nothing else), not read from the module.
"""

from __future__ import annotations

from dissector.anomalies import AnomalyCode
from dissector.events import (
    Anomaly,
    CloseReason,
    ConnClosed,
    ConnOpened,
    Direction,
    FlowKey,
    StreamData,
    StreamGap,
)
from dissector.flow.sides import swap
from dissector.pulsar.framing import FrameDecoder

C2B, B2C = Direction.CLIENT_TO_BROKER, Direction.BROKER_TO_CLIENT
KEY = FlowKey("10.0.0.1", 40000, "10.0.0.2", 8080)


def test_a_key_trades_client_and_broker() -> None:
    assert swap(KEY) == FlowKey("10.0.0.2", 8080, "10.0.0.1", 40000)
    opened = ConnOpened(7, KEY, 100, 1, False, True)
    assert swap(opened) == ConnOpened(7, FlowKey("10.0.0.2", 8080, "10.0.0.1", 40000), 100, 1,
                                      False, True)  # fmt: skip


def test_an_event_trades_its_direction_only() -> None:
    data = StreamData(7, C2B, 12, b"abc", 3, 300)
    assert swap(data) == StreamData(7, B2C, 12, b"abc", 3, 300)
    assert swap(StreamGap(7, B2C, 5, 9, 4, 400)) == StreamGap(7, C2B, 5, 9, 4, 400)
    anomaly = Anomaly.of(AnomalyCode.TCP_GAP, conn_id=7, direction=C2B, stream_offset=0,
                         detail="x", packet=1, ts=1)  # fmt: skip
    assert swap(anomaly) == anomaly._replace(direction=B2C)
    sideless = anomaly._replace(direction=None)
    assert swap(sideless) is sideless


def test_an_end_trades_its_counts() -> None:
    closed = ConnClosed(7, CloseReason.FIN, 900, 9, 3, 5, 120, 4000)
    assert swap(closed) == ConnClosed(7, CloseReason.FIN, 900, 9, 5, 3, 4000, 120)
    by_client = closed._replace(closed_by=C2B, close_packet=8, close_ts=899)
    assert swap(by_client) == swap(closed)._replace(closed_by=B2C, close_packet=8, close_ts=899)


def test_a_map_by_side_trades_keys_and_what_its_values_read() -> None:
    assert swap({C2B: True, B2C: False}) == {C2B: False, B2C: True}
    only = swap({B2C: "broker's"})
    assert only == {C2B: "broker's"}
    client, broker = FrameDecoder(direction=C2B), FrameDecoder(direction=B2C)
    swapped = swap({C2B: client, B2C: broker})
    assert list(swapped) == [C2B, B2C]  # the client side first, as a fresh map
    assert swapped[C2B] is broker and broker.direction is C2B
    assert swapped[B2C] is client and client.direction is B2C


def test_twice_is_as_before() -> None:
    closed = ConnClosed(7, CloseReason.RST, 900, 9, 3, 5, 120, 4000)
    assert swap(swap(closed)) == closed
    assert swap(swap(KEY)) == KEY
