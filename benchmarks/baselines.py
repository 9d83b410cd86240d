"""Baselines the benchmark runs as processes on the same captures: Python's floor and scapy.

Input: `python -m benchmarks.baselines walk|scapy CAPTURE`.
Output: one JSON line on stdout: packets (and for scapy, Pulsar frames and commands by name).
Rules:
- `walk` is a do-nothing pcap record walk in pure Python: 1 MiB reads, the 16-byte record
  header unpacked with a precompiled struct, the packet skipped. No Python reader of a
  capture can be faster; it is the machine's Python limit.
- `scapy` is what a Python user writes today with scapy: RawPcapReader for the records,
  Ether() to dissect each packet, TCPSession to reassemble the broker port's streams into
  whole frames (a Packet class with tcp_reassemble, frames split on the 4-byte totalSize),
  and each frame's command decoded with the protobuf bindings.
"""

from __future__ import annotations

import json
import struct
import sys
from collections import Counter
from typing import Any, ClassVar

_RECORD = struct.Struct("<IIII")
_U32 = struct.Struct(">I")
_READ = 1 << 20


def walk(path: str) -> dict[str, int]:
    """Count the records of a little-endian classic pcap, touching nothing else."""
    packets = captured = 0
    unpack = _RECORD.unpack_from
    with open(path, "rb") as fh:
        fh.read(24)
        buf = b""
        while chunk := fh.read(_READ):
            buf = buf + chunk if buf else chunk
            pos, n = 0, len(buf)
            while pos + 16 <= n:
                incl = unpack(buf, pos)[2]
                end = pos + 16 + incl
                if end > n:
                    break
                packets += 1
                captured += incl
                pos = end
            buf = buf[pos:]
    return {"packets": packets, "captured_bytes": captured}


def scapy(path: str, port: int = 6650) -> dict[str, Any]:
    """Frames reassembled by scapy's TCPSession, each command decoded."""
    from scapy.fields import IntField, StrLenField
    from scapy.layers.inet import TCP
    from scapy.layers.l2 import Ether
    from scapy.packet import Packet, bind_layers
    from scapy.sessions import TCPSession
    from scapy.utils import RawPcapReader

    from dissector.pulsar.wire import COMMAND_NAMES, BaseCommand

    class PulsarFrame(Packet):
        name = "Pulsar"
        fields_desc: ClassVar[list[Any]] = [
            IntField("total_size", 0),
            IntField("command_size", 0),
            StrLenField("cmd", b"", length_from=lambda p: p.command_size),
            StrLenField("rest", b"", length_from=lambda p: p.total_size - 4 - p.command_size),
        ]

        def extract_padding(self, s: bytes) -> tuple[bytes, bytes]:
            return b"", s  # what follows the frame is the next frame

        @classmethod
        def tcp_reassemble(cls, data: bytes, metadata: dict[str, Any], session: Any) -> Any:
            if len(data) < 4:
                return None
            size = _U32.unpack_from(data)[0] + 4
            if len(data) < size:
                metadata["tcp_min_len"] = size
                return None
            return cls(data)

    bind_layers(TCP, PulsarFrame, dport=port)
    bind_layers(TCP, PulsarFrame, sport=port)
    session = TCPSession()
    packets = frames = 0
    commands: Counter[str] = Counter()
    for data, _meta in RawPcapReader(path):
        packets += 1
        out = session.process(Ether(data))
        layer = None if out is None else out.getlayer(PulsarFrame)
        while isinstance(layer, PulsarFrame):
            if layer.command_size and len(layer.cmd) == layer.command_size:
                cmd = BaseCommand.FromString(layer.cmd)
                commands[COMMAND_NAMES.get(cmd.type, str(cmd.type))] += 1
                frames += 1
            layer = layer.payload
    return {"packets": packets, "frames": frames, "commands": dict(sorted(commands.items()))}


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("walk", "scapy"):
        print("usage: python -m benchmarks.baselines walk|scapy CAPTURE", file=sys.stderr)
        return 2
    result = walk(argv[1]) if argv[0] == "walk" else scapy(argv[1])
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
