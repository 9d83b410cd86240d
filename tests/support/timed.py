"""Pulsar connections whose every packet's time is chosen: for idle-timeout tests.

Input: `Conn`s (one client port each, to 10.0.0.100:6650) and, per packet, the time at which
it is written (microseconds since the epoch; any order, steps back included).
Output: Ethernet/IPv4/TCP frames with correct sequence and acknowledgement numbers, written
as a classic pcap in the order they were made (`write`), built with struct (fast).
Rule: a connection opens with SYN, SYN-ACK, ACK and a CONNECT; `ping` sends a PING from the
client; `close` is FIN, FIN, ACK. The times are the test's: nothing here reorders packets
or sorts them by time.
"""

from __future__ import annotations

import struct
from pathlib import Path

from dissector.pulsar.encoder import command, encode_frame

BROKER = bytes([10, 0, 0, 100])
BROKER_PORT = 6650
SYN, FIN, ACK, PSH = 0x02, 0x01, 0x10, 0x08
_ETH = bytes.fromhex("020000000002020000000001") + b"\x08\x00"
_IP = struct.Struct("!BBHHHBBH4s4s")
_TCP = struct.Struct("!HHIIBBHHH")
CONNECT = encode_frame(command("CONNECT", client_version="idle", protocol_version=20))
PING = encode_frame(command("PING"))

Record = tuple[int, bytes]  # (time in µs, frame)


class Conn:
    """One client's connection; each method appends its packets to `records`."""

    def __init__(self, records: list[Record], client: int) -> None:
        self.records = records
        self.ip = bytes([10, 0, 1, client])
        self.port = 40000 + client
        self.cseq, self.bseq = 1000, 5000

    def _packet(self, ts: int, to_broker: bool, flags: int, payload: bytes = b"") -> None:
        if to_broker:
            src, dst, sport, dport = self.ip, BROKER, self.port, BROKER_PORT
            seq, ack = self.cseq, self.bseq
        else:
            src, dst, sport, dport = BROKER, self.ip, BROKER_PORT, self.port
            seq, ack = self.bseq, self.cseq
        tcp = _TCP.pack(sport, dport, seq, ack, 5 << 4, flags, 65535, 0, 0) + payload
        ip = _IP.pack(0x45, 0, 20 + len(tcp), 0, 0x4000, 64, 6, 0, src, dst)
        self.records.append((ts, _ETH + ip + tcp))
        grow = len(payload) + (1 if flags & (SYN | FIN) else 0)
        if to_broker:
            self.cseq += grow
        else:
            self.bseq += grow

    def open(self, ts: int) -> Conn:
        """SYN, SYN-ACK, ACK, CONNECT: four packets 1 µs apart from `ts`."""
        self._packet(ts, True, SYN)
        self._packet(ts + 1, False, SYN | ACK)
        self._packet(ts + 2, True, ACK)
        self._packet(ts + 3, True, PSH | ACK, CONNECT)
        return self

    def ping(self, ts: int) -> Conn:
        self._packet(ts, True, PSH | ACK, PING)
        return self

    def close(self, ts: int) -> Conn:
        """FIN from the client, FIN from the broker, the last ACK: 1 µs apart."""
        self._packet(ts, True, FIN | ACK)
        self._packet(ts + 1, False, FIN | ACK)
        self._packet(ts + 2, True, ACK)
        return self


def write(path: Path, records: list[Record]) -> Path:
    """The records as a classic pcap (microseconds, Ethernet), in the order given."""
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)]
    for ts, frame in records:
        out.append(struct.pack("<IIII", ts // 1_000_000, ts % 1_000_000, len(frame), len(frame)))
        out.append(frame)
    path.write_bytes(b"".join(out))
    return path
