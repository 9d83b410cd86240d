"""Pulsar frames of producer and consumer sessions, encoded fast, for benchmark captures.

Input: ids, names, sequence numbers, payload bytes and their MessageMetadata fields.
Output: frames as bytes (CONNECT ... CLOSE_PRODUCER, SEND, SEND_RECEIPT, MESSAGE, ACK, FLOW)
and a count of every command made, by name (the generator's record of what it wrote).
Rule: one BaseCommand and one MessageMetadata per kind are built once and only their
changing fields are set per frame (dissector.command would rebuild them every time); frames
are exactly what dissector.encode_frame makes, checksums included.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from dissector import command, encode_frame
from dissector.pulsar.wire import MessageMetadata

PUBLISH_TIME = 1_700_000_000_000  # ms: the MessageMetadata publish_time of every message


class Session:
    """The frames of one connection's client and broker; `commands` counts what was made."""

    def __init__(self, index: int, commands: Counter[str]) -> None:
        self.index = index
        self.commands = commands
        self.topic = f"persistent://public/default/bench-{index}"
        self._send = command("SEND", producer_id=index, sequence_id=0)
        self._receipt = command(
            "SEND_RECEIPT",
            producer_id=index,
            sequence_id=0,
            message_id={"ledgerId": 100 + index, "entryId": 0},
        )
        self._message = command(
            "MESSAGE", consumer_id=index, message_id={"ledgerId": 100 + index, "entryId": 0}
        )
        self._ack = command(
            "ACK",
            consumer_id=index,
            ack_type=0,
            message_id=[{"ledgerId": 100 + index, "entryId": 0}],
        )
        self.meta = MessageMetadata(
            producer_name=f"bench-producer-{index}", sequence_id=0, publish_time=PUBLISH_TIME
        )

    def make(self, name: str, **fields: Any) -> bytes:
        """Any command without payload, built the slow general way (setup and rare frames)."""
        self.commands[name] += 1
        return encode_frame(command(name, **fields))

    def connect(self) -> tuple[bytes, bytes]:
        return (
            self.make("CONNECT", client_version="bench-client", protocol_version=21),
            self.make("CONNECTED", server_version="bench-broker", protocol_version=21),
        )

    def producer(self) -> tuple[bytes, bytes]:
        name = self.meta.producer_name
        return (
            self.make(
                "PRODUCER",
                topic=self.topic,
                producer_id=self.index,
                request_id=1,
                producer_name=name,
            ),
            self.make("PRODUCER_SUCCESS", request_id=1, producer_name=name, last_sequence_id=-1),
        )

    def close_producer(self) -> tuple[bytes, bytes]:
        return (
            self.make("CLOSE_PRODUCER", producer_id=self.index, request_id=2),
            self.make("SUCCESS", request_id=2),
        )

    def subscribe(self) -> tuple[bytes, bytes]:
        return (
            self.make(
                "SUBSCRIBE",
                topic=self.topic,
                subscription="bench-sub",
                subType=0,
                consumer_id=self.index,
                request_id=1,
            ),
            self.make("SUCCESS", request_id=1),
        )

    def send(self, sequence_id: int, payload: bytes, num_messages: int = 1) -> bytes:
        """A SEND with the session's metadata (set its other fields on `self.meta` first)."""
        self.commands["SEND"] += 1
        body = self._send.send
        body.sequence_id = sequence_id
        if num_messages != 1:
            body.num_messages = num_messages
        else:
            body.ClearField("num_messages")
        self.meta.sequence_id = sequence_id
        return encode_frame(self._send, metadata=self.meta, payload=payload)

    def receipt(self, sequence_id: int, entry_id: int) -> bytes:
        self.commands["SEND_RECEIPT"] += 1
        body = self._receipt.send_receipt
        body.sequence_id = sequence_id
        body.message_id.entryId = entry_id
        return encode_frame(self._receipt)

    def message(self, entry_id: int, payload: bytes) -> bytes:
        """A MESSAGE delivering `payload` with the session's metadata, checksummed."""
        self.commands["MESSAGE"] += 1
        self._message.message.message_id.entryId = entry_id
        return encode_frame(self._message, metadata=self.meta, payload=payload)

    def ack(self, entry_id: int) -> bytes:
        self.commands["ACK"] += 1
        self._ack.ack.message_id[0].entryId = entry_id
        return encode_frame(self._ack)
