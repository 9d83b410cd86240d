"""How the flow table scales with connections that never close (the fuzzing finding 4).

Input: counts of connections. Output: for each, a classic pcap with SYN + CONNECT per
connection (none closed), and the CPU time and peak memory of reading it to the
conversations table (`python -m benchmarks.flow_table 10000 30000 100000 150000`).
Rule: packets are built with precompiled structs, as benchmarks/synthetic.py does; one
process per read, measured with resource.getrusage, so figures are whole-process.
"""

from __future__ import annotations

import resource
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

from dissector.pulsar.encoder import command, encode_frame

_PCAP_HEADER = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
_RECORD = struct.Struct("<IIII")
_ETH = b"\x00" * 12 + b"\x08\x00"
_IP = struct.Struct("!BBHHHBBH4s4s")
_TCP = struct.Struct("!HHIIBBHHH")
_BROKER = bytes([10, 99, 0, 1])


def write_pcap(path: Path, connections: int) -> int:
    """SYN, then a CONNECT, from `connections` clients to one broker; returns packets."""
    connect = encode_frame(command("CONNECT", client_version="fuzz", protocol_version=20))
    ts = 1_700_000_000_000_000
    with path.open("wb") as out:
        out.write(_PCAP_HEADER)
        for i in range(connections):
            client = bytes([10, 1 + (i >> 16), (i >> 8) & 0xFF, i & 0xFF])
            for flags, seq, payload in ((0x02, 1000, b""), (0x18, 1001, connect)):
                tcp = _TCP.pack(40000 + i % 20000, 6650, seq, 0, 0x50, flags, 65535, 0, 0)
                ip = _IP.pack(0x45, 0, 40 + len(payload), 0, 0x4000, 64, 6, 0, client, _BROKER)
                frame = _ETH + ip + tcp + payload
                ts += 3
                out.write(_RECORD.pack(ts // 1_000_000, ts % 1_000_000, len(frame), len(frame)))
                out.write(frame)
    return 2 * connections


def measure(path: Path, timeout: float) -> tuple[float | None, float]:
    """(CPU seconds of all children so far or None past `timeout`, the largest child's peak
    RSS in MB) after reading `path` in a child: callers subtract, and go in rising sizes."""
    code = (
        "import sys, dissector; t = dissector.read_capture(sys.argv[1]).conversations;print(len(t))"
    )
    try:
        subprocess.run([sys.executable, "-c", code, str(path)], check=True, timeout=timeout,
                       capture_output=True)  # fmt: skip
    except subprocess.TimeoutExpired:
        return None, 0.0
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # children so far: CPU adds up,
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main(argv: list[str]) -> None:
    counts = [int(a) for a in argv] or [10_000, 30_000]
    cpu_before = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for n in counts:
            path = Path(tmp) / f"conns{n}.pcap"
            write_pcap(path, n)
            cpu, rss = measure(path, timeout=300)
            if cpu is None:
                print(f"{n:>8} connections: did not finish in 300 s")
                continue
            print(f"{n:>8} connections: {cpu - cpu_before:6.1f} s CPU, peak RSS {rss:7.0f} MB")
            cpu_before = cpu


if __name__ == "__main__":
    main(sys.argv[1:])
