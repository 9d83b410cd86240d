"""Crafted captures the compiled stage (dissector._core) is compared on.

Input: a folder to write captures in.
Output: `link_captures` (the baseline session over every link type, byte order, timestamp
resolution, snap length, gzip, pcapng interfaces, IP fragments), `odd_pcapng` (pcapng rules
the C walk leaves to Python), `tcp_scenarios` (sessions reordered, duplicated, cut and
interleaved, several connections, IPv4 and IPv6, idle pauses).
Rule: every capture is made from encoded frames by tests/support/crafted.py; the same seed
gives the same files.
"""

from __future__ import annotations

import struct
from pathlib import Path
from random import Random

from tests.support.crafted import (
    LINKTYPES,
    Conn,
    Seg,
    baseline_session,
    fragment_l3,
    link_frame,
    write_frames,
    write_pcap,
    write_pcapng,
)


def link_captures(tmp_path: Path) -> list[Path]:
    """The baseline session over every link type, IPv4 and IPv6, both byte orders, µs and
    ns, a snap length, gzip; pcapng with several interfaces; IP fragments."""
    out = []
    v4, v6 = Conn(), Conn(client_ip="fd00::1", broker_ip="fd00::2")
    for link in LINKTYPES:
        for conn in (v4, v6):
            segs = baseline_session(conn).segs
            name = f"{link}-{'v6' if conn.ipv6 else 'v4'}"
            out.append(write_pcap(tmp_path / f"{name}.pcap", segs, link=link).path)
            for order in "<>":
                for nano in (False, True):
                    path = tmp_path / f"{name}-{order == '<'}-{nano}.pcap"
                    out.append(write_pcap(path, segs, link=link, nano=nano, endianness=order).path)
            path = tmp_path / f"{name}-snap.pcap"
            out.append(write_pcap(path, segs, link=link, snaplen=70).path)
            out.append(write_pcap(tmp_path / f"{name}.pcap.gz", segs, link=link, gz=True).path)
    segs = baseline_session(v4).segs + baseline_session(v6).segs
    out.append(write_pcapng(tmp_path / "ng.pcapng", segs))
    out.append(write_pcapng(tmp_path / "ng-all.pcapng", segs, links=list(LINKTYPES)))
    out.append(write_pcapng(tmp_path / "ng.pcapng.gz", segs, links=("vlan", "sll"), gz=True))
    frames = []  # IP fragments (the Python path reassembles them) around whole packets
    for number, seg in enumerate(baseline_session(v4).segs):
        l3 = seg.l3()
        pieces = fragment_l3(l3, 16, number) if len(l3) > 60 else [l3]
        frames += [link_frame(p, "ether") for p in pieces]
    out.append(write_frames(tmp_path / "fragments.pcap", frames))
    return out


def odd_pcapng(tmp_path: Path) -> Path:
    """Interfaces whose timestamp rules the C walk declines (2^-n, huge offsets), a bad
    timestamp, a simple packet block and a statistics block between packets."""
    segs = baseline_session().segs
    frames = [link_frame(s.l3(), "ether") for s in segs]

    def block(btype: int, body: bytes) -> bytes:
        body += b"\0" * (-len(body) % 4)
        size = struct.pack("<I", 12 + len(body))
        return struct.pack("<I", btype) + size + body + size

    def idb(options: bytes) -> bytes:
        return block(1, struct.pack("<HHI", 1, 0, 0) + options + b"\0\0\0\0")

    def option(code: int, value: bytes) -> bytes:
        return struct.pack("<HH", code, len(value)) + value + b"\0" * (-len(value) % 4)

    out = [block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))]
    out += [idb(b""), idb(option(9, b"\x94")), idb(option(14, struct.pack("<q", 1 << 62)))]
    out += [idb(option(9, b"\x7f"))]
    for i, frame in enumerate(frames):
        ts = 1_700_000_000_000_000 + i
        if i == 3:
            ts = 1 << 63  # beyond 9999: capture.bad_timestamp
        head = struct.pack("<IIIII", i % 4, ts >> 32, ts & 0xFFFFFFFF, len(frame), len(frame))
        out.append(block(6, head + frame))
        if i == 5:
            out.append(block(3, struct.pack("<I", len(frame)) + frame))
            out.append(block(5, struct.pack("<III", 0, 0, 0)))
    path = tmp_path / "odd.pcapng"
    path.write_bytes(b"".join(out))
    return path


def tcp_scenarios(tmp_path: Path, count: int, seed: int = 27) -> list[Path]:
    """`count` captures of 1 to 4 baseline sessions (IPv4 or IPv6, own ports, some not
    closed), interleaved, with segments swapped, repeated or dropped, pauses of up to 3 s
    between packets, over Ethernet, VLAN or SLL, as pcap or pcapng."""
    rng = Random(seed)
    out = []
    for n in range(count):
        lanes: list[list[Seg]] = []
        for k in range(rng.randint(1, 4)):
            v6 = rng.random() < 0.3
            conn = Conn(
                client_ip="fd00::1" if v6 else "10.0.0.1",
                broker_ip="fd00::2" if v6 else "10.0.0.2",
                client_port=40000 + rng.choice((k, k, 0)),  # sometimes a port reused
                client_isn=rng.randrange(1 << 32),
                broker_isn=rng.randrange(1 << 32),
            )
            lanes.append(list(baseline_session(conn, close=rng.random() < 0.7).segs))
        segs: list[Seg] = []
        while any(lanes):
            lane = rng.choice([lane for lane in lanes if lane])
            segs.append(lane.pop(0))
        for _ in range(rng.randint(0, 4)):
            i = rng.randrange(len(segs))
            what = rng.random()
            if what < 0.4 and i + 1 < len(segs):
                segs[i], segs[i + 1] = segs[i + 1], segs[i]
            elif what < 0.7:
                segs.insert(i, segs[i])
            else:
                del segs[i]
        ts = 1_700_000_000_000_000
        timed = []
        for seg in segs:
            ts += rng.choice((10, 200, 5_000, 3_000_000))
            timed.append(seg.replace(ts_us=ts))
        link = rng.choice(("ether", "ether", "vlan", "sll"))
        if rng.random() < 0.7:
            out.append(write_pcap(tmp_path / f"tcp{n}.pcap", timed, link=link).path)
        else:
            out.append(write_pcapng(tmp_path / f"tcp{n}.pcapng", timed, links=(link,)))
    return out
