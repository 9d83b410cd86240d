"""Write classic pcap files of Ethernet/IPv4/TCP Pulsar traffic, fast, for benchmarks.

Input: TCP connections (client and broker endpoints) and the bytes each side sends.
Output: a pcap file (microsecond timestamps, Ethernet link type) with a three-way handshake
per connection, data cut into segments of at most `mss` bytes, pure ACKs when asked, and a
FIN exchange at the end; `small_frames()` gives typical small frames for the framing
micro-benchmark.
Rule: headers are packed with precompiled structs and written in large chunks (scapy would
take minutes for 10^6 packets); sequence numbers advance with every byte, SYN and FIN and
wrap modulo 2**32; IP/TCP checksums are left zero, as on captures with checksum offload.
"""

from __future__ import annotations

import struct
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from dissector import command, encode_frame
from dissector.pulsar.wire import MessageMetadata

_PCAP_HEADER = struct.Struct("<IHHiIII")
_RECORD = struct.Struct("<IIII")
_ETH = b"\x02\x00\x00\x00\x00\x02\x02\x00\x00\x00\x00\x01\x08\x00"  # dst, src, IPv4
_IP = struct.Struct("!BBHHHBBH4s4s")
_TCP = struct.Struct("!HHIIBBHHH")
HEADERS = len(_ETH) + _IP.size + _TCP.size  # 54 bytes in front of every TCP payload

SYN, FIN, ACK, PSH = 0x02, 0x01, 0x10, 0x08
BROKER_PORT = 6650
ETHERNET_MSS = 1448  # a 1500-byte MTU with TCP timestamps: what busy brokers send
SNAPLEN = 262144  # tcpdump's default: every packet is captured whole
_FLUSH = 1 << 22  # bytes buffered before a write


class Conn:
    """One TCP connection: endpoints and the next sequence number of each side."""

    __slots__ = ("broker", "bseq", "client", "cport", "cseq")

    def __init__(self, index: int, broker: bytes = b"\x0a\x63\x00\x01") -> None:
        self.client = bytes([10, 0, (index >> 8) & 0xFF, (index & 0xFF) + 1])
        self.cport = 40000 + index
        self.broker = broker
        self.cseq = (1_000_003 * (index + 1)) & 0xFFFFFFFF
        self.bseq = (2_000_029 * (index + 1)) & 0xFFFFFFFF


class PcapWriter:
    """Packets to a pcap file; counts packets and payload bytes as it goes."""

    def __init__(self, path: Path, start_us: int = 1_700_000_000_000_000, step_us: int = 5):
        self._out: BinaryIO = path.open("wb")
        self._out.write(_PCAP_HEADER.pack(0xA1B2C3D4, 2, 4, 0, 0, SNAPLEN, 1))
        self._buf: list[bytes] = []
        self._pending = 0
        self.ts = start_us
        self.step_us = step_us
        self.packets = 0
        self.payload_bytes = 0

    def __enter__(self) -> PcapWriter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def packet(self, conn: Conn, to_broker: bool, payload: bytes = b"", flags: int = ACK) -> None:
        """One segment from client to broker (or back); advances that side's sequence."""
        if to_broker:
            src, dst, sport, dport = conn.client, conn.broker, conn.cport, BROKER_PORT
            seq, ack = conn.cseq, conn.bseq
        else:
            src, dst, sport, dport = conn.broker, conn.client, BROKER_PORT, conn.cport
            seq, ack = conn.bseq, conn.cseq
        n = len(payload)
        tcp = _TCP.pack(sport, dport, seq, ack if flags & ACK else 0, 0x50, flags, 65535, 0, 0)
        ip = _IP.pack(0x45, 0, 40 + n, 0, 0x4000, 64, 6, 0, src, dst)
        size = HEADERS + n
        self.ts += self.step_us
        self._buf.append(_RECORD.pack(self.ts // 1_000_000, self.ts % 1_000_000, size, size))
        self._buf.append(_ETH + ip + tcp)
        if n:
            self._buf.append(payload)
        self._pending += size + 16
        self.packets += 1
        self.payload_bytes += n
        step = n + (1 if flags & (SYN | FIN) else 0)
        if to_broker:
            conn.cseq = (seq + step) & 0xFFFFFFFF
        else:
            conn.bseq = (seq + step) & 0xFFFFFFFF
        if self._pending >= _FLUSH:
            self.flush()

    def send(self, conn: Conn, to_broker: bool, data: bytes, mss: int = ETHERNET_MSS) -> int:
        """`data` as segments of at most `mss` bytes (PSH on the last); returns segments."""
        view = memoryview(data)
        count = 0
        for start in range(0, len(data), mss):
            last = start + mss >= len(data)
            self.packet(
                conn, to_broker, bytes(view[start : start + mss]), ACK | PSH if last else ACK
            )
            count += 1
        return count

    def handshake(self, conn: Conn) -> None:
        self.packet(conn, True, flags=SYN)
        self.packet(conn, False, flags=SYN | ACK)
        self.packet(conn, True)

    def finish(self, conn: Conn) -> None:
        """The client closes: FIN, FIN-ACK, ACK."""
        self.packet(conn, True, flags=FIN | ACK)
        self.packet(conn, False, flags=FIN | ACK)
        self.packet(conn, True)

    def flush(self) -> None:
        self._out.write(b"".join(self._buf))
        self._buf.clear()
        self._pending = 0

    def close(self) -> None:
        if not self._out.closed:
            self.flush()
            self._out.close()


def small_frames() -> tuple[list[bytes], list[bytes]]:
    """Typical small frames: client to broker, and broker to client (four each)."""
    meta = MessageMetadata(producer_name="bench", sequence_id=1, publish_time=1700000000000)
    msg_id = {"ledgerId": 9, "entryId": 1}
    c2b = [
        encode_frame(
            command("SEND", producer_id=1, sequence_id=1), metadata=meta, payload=b"x" * 64
        ),
        encode_frame(command("ACK", consumer_id=2, ack_type=0, message_id=[msg_id])),
        encode_frame(command("FLOW", consumer_id=2, messagePermits=1000)),
        encode_frame(command("PONG")),
    ]
    b2c = [
        encode_frame(command("SEND_RECEIPT", producer_id=1, sequence_id=1, message_id=msg_id)),
        encode_frame(
            command("MESSAGE", consumer_id=2, message_id=msg_id),
            metadata=meta,
            payload=b"y" * 64,
            checksum=False,
        ),
        encode_frame(command("SUCCESS", request_id=5)),
        encode_frame(command("PING")),
    ]
    return c2b, b2c
