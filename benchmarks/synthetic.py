"""Write a large synthetic capture of small-frame Pulsar traffic for benchmarks.

Input: how many connections and request/response rounds. Output: a classic pcap file
(Ethernet/IPv4/TCP, microsecond timestamps) with a handshake per connection and one small
Pulsar frame per packet: SEND/SEND_RECEIPT, MESSAGE/ACK, FLOW, PING/PONG.
Rule: packets are built with precompiled structs (scapy would take minutes for 10^6 packets);
checksums in IP/TCP headers are left zero, as on loopback captures with offload.
"""

from __future__ import annotations

import struct
from pathlib import Path

from dissector import command, encode_frame
from dissector.pulsar.wire import MessageMetadata

_PCAP_HEADER = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
_RECORD = struct.Struct("<IIII")
_ETH = b"\x00" * 12 + b"\x08\x00"
_IP = struct.Struct("!BBHHHBBH4s4s")
_TCP = struct.Struct("!HHIIBBHHH")


def small_frames() -> tuple[list[bytes], list[bytes]]:
    """Typical small frames: client to broker, and broker to client (four each)."""
    meta = MessageMetadata(producer_name="bench", sequence_id=1, publish_time=1700000000000)
    c2b = [
        encode_frame(
            command("SEND", producer_id=1, sequence_id=1), metadata=meta, payload=b"x" * 64
        ),
        encode_frame(
            command("ACK", consumer_id=2, ack_type=0, message_id=[{"ledgerId": 9, "entryId": 1}])
        ),
        encode_frame(command("FLOW", consumer_id=2, messagePermits=1000)),
        encode_frame(command("PONG")),
    ]
    b2c = [
        encode_frame(
            command(
                "SEND_RECEIPT",
                producer_id=1,
                sequence_id=1,
                message_id={"ledgerId": 9, "entryId": 1},
            )
        ),
        encode_frame(
            command("MESSAGE", consumer_id=2, message_id={"ledgerId": 9, "entryId": 1}),
            metadata=meta,
            payload=b"y" * 64,
            checksum=False,
        ),
        encode_frame(command("SUCCESS", request_id=5)),
        encode_frame(command("PING")),
    ]
    return c2b, b2c


def write_pcap(path: Path, connections: int = 20, rounds: int = 2500) -> tuple[int, int]:
    """Write the capture; returns (packets, Pulsar frames) written."""
    c2b_frames, b2c_frames = small_frames()
    connect = encode_frame(command("CONNECT", client_version="bench", protocol_version=20))
    connected = encode_frame(command("CONNECTED", server_version="bench", protocol_version=20))
    packets = frames = 0
    ts = 1_700_000_000_000_000
    with path.open("wb") as out:
        out.write(_PCAP_HEADER)
        state = []
        for i in range(connections):
            client = bytes([10, 0, i // 250, i % 250 + 1])
            state.append([client, 40000 + i, 1000, 5000])

        def emit(conn: list, to_broker: bool, payload: bytes, flags: int = 0x18) -> None:
            nonlocal packets, ts
            client, port, cseq, bseq = conn
            broker = b"\x0a\x63\x00\x01"
            src, dst = (client, broker) if to_broker else (broker, client)
            sport, dport = (port, 6650) if to_broker else (6650, port)
            seq, ack = (cseq, bseq) if to_broker else (bseq, cseq)
            tcp = _TCP.pack(
                sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, 0x50, flags, 65535, 0, 0
            )
            ip = _IP.pack(0x45, 0, 20 + len(tcp) + len(payload), 0, 0x4000, 64, 6, 0, src, dst)
            frame = _ETH + ip + tcp + payload
            ts += 7
            out.write(_RECORD.pack(ts // 1_000_000, ts % 1_000_000, len(frame), len(frame)))
            out.write(frame)
            packets += 1
            step = len(payload) + (1 if flags & 0x03 else 0)
            if to_broker:
                conn[2] += step
            else:
                conn[3] += step

        for conn in state:
            emit(conn, True, b"", 0x02)  # SYN
            emit(conn, False, b"", 0x12)  # SYN-ACK
            emit(conn, True, connect)
            emit(conn, False, connected)
            frames += 2
        for r in range(rounds):
            for conn in state:
                emit(conn, True, c2b_frames[r % 4])
                emit(conn, False, b2c_frames[r % 4])
                frames += 2
    return packets, frames
