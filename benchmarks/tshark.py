"""tshark with benchmarks/pulsar.lua: the yardstick, as users decode Pulsar today.

Input: a capture path and how much to print.
Output: tshark argument lists; the count of Pulsar commands (by type number) in the
`fields` output; tshark's version.
Rule: the Lua framer frames the broker port's streams and hands each command to Wireshark's
protobuf dissector with proto/pulsar_api.proto loaded (fields registered with
protobuf.pbf_as_hf, so they can be printed and filtered). `fields` prints, per packet, what
a frames table holds (time, endpoints, stream, frame size, command type, producer and
sequence ids, message ids, topic); `verbose` prints every decoded field of every layer (-V).
Name resolution is off (-n) so that no lookup slows tshark down.
"""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LUA = ROOT / "benchmarks" / "pulsar.lua"
PROTO_DIR = ROOT / "proto"

PB = "pbf.pulsar.proto."
TYPE_FIELD = PB + "BaseCommand.type"
#: The frames-table-like columns printed in `fields` mode; TYPE_FIELD must stay among them.
FIELDS = (
    "frame.time_epoch",
    "ip.src",
    "tcp.srcport",
    "ip.dst",
    "tcp.dstport",
    "tcp.stream",
    "pulsar.total_size",
    TYPE_FIELD,
    PB + "CommandSend.producer_id",
    PB + "CommandSend.sequence_id",
    PB + "CommandSendReceipt.producer_id",
    PB + "CommandSendReceipt.sequence_id",
    PB + "MessageIdData.ledgerId",
    PB + "MessageIdData.entryId",
    PB + "CommandProducer.topic",
)


def executable() -> str | None:
    return shutil.which("tshark")


def version() -> str:
    exe = executable()
    if exe is None:
        return "not installed"
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=False)
    return out.stdout.splitlines()[0] if out.stdout else "unknown"


def args(capture: Path, mode: str = "fields") -> list[str]:
    """tshark reading `capture` through the Lua framer; mode `fields` or `verbose`."""
    base = [
        executable() or "tshark",
        "-n",
        "-X",
        f"lua_script:{LUA}",
        "-o",
        f'uat:protobuf_search_paths:"{PROTO_DIR}","TRUE"',
        "-o",
        "protobuf.preload_protos:TRUE",
        "-o",
        "protobuf.pbf_as_hf:TRUE",
        "-r",
        str(capture),
    ]
    if mode == "verbose":
        return [*base, "-V"]
    fields = [x for f in FIELDS for x in ("-e", f)]
    return [*base, "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=,", *fields]


def tcp_args(capture: Path) -> list[str]:
    """tshark reading `capture`'s TCP only, no Pulsar at all (issue 27's floor: the port
    decoded as data, one line per packet)."""
    return [
        executable() or "tshark",
        "-n",
        "-r",
        str(capture),
        "-d",
        "tcp.port==6650,data",
        "-T",
        "fields",
        "-e",
        "tcp.stream",
        "-e",
        "tcp.len",
    ]


def count_commands(fields_output: Path) -> Counter[int]:
    """Decoded commands by BaseCommand type number, from a `fields` mode output."""
    column = FIELDS.index(TYPE_FIELD)
    counts: Counter[int] = Counter()
    with fields_output.open() as fh:
        for line in fh:
            cells = line.rstrip("\n").split("\t")
            if len(cells) > column and cells[column]:
                counts.update(int(t) for t in cells[column].split(","))
    return counts


def count_verbose(verbose_output: Path) -> int:
    """Commands whose type the protobuf dissector printed, in a `verbose` output (which is
    large: read in binary chunks)."""
    marker = b"\n        type: "  # BaseCommand.type, under "Protocol Buffers:"
    count, tail = 0, b""
    with verbose_output.open("rb") as fh:
        while chunk := fh.read(1 << 24):
            data = tail + chunk
            count += data.count(marker)
            tail = data[-(len(marker) - 1) :]
    return count
