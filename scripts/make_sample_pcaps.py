"""Regenerate the sample captures in pcaps/ from real Pulsar peers on loopback.

Input:  optional capture names (default: all of ``CAPTURES``; ``--list`` shows them).
Output: per capture, pcaps/NAME.pcap (pcaps/NAME.pcap.gz for the big chunked one) and
        pcaps/NAME.manifest.json: what the official client itself reported (topics,
        producers and consumers, every message sent and received with payload sha256,
        size, key, properties and MessageId, acks, seeks, quirks), plus the broker
        port, versions and tcpdump's statistics.  Also pcaps/README.md.
Rule:   each capture gets a fresh pulsar-lite broker on a free 127.0.0.1 port and a
        tcpdump on ``lo`` filtered to that port (tests/support/capture.py); the client
        connects to the broker directly.  A capture is only written if the scenario
        succeeded, tcpdump dropped nothing and every connection starts with CONNECT;
        a failed attempt (pulsar-lite has racy dispatch quirks) is retried, and so is
        one where pulsar-lite dispatched a message twice, unless it is the last try.
        tcpdump is required (``apt-get install -y tcpdump``) and needs root/CAP_NET_RAW.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support import peers  # noqa: E402
from tests.support.capture import (  # noqa: E402
    TcpdumpMissing,
    capture_scenario,
    tcpdump_path,
)

OUT = ROOT / "pcaps"
REGENERATE = ".venv/bin/python scripts/make_sample_pcaps.py [NAME...]"


@dataclass(frozen=True)
class Spec:
    """One sample capture: a scenario of tests/support/peers.py and its settings."""

    name: str
    description: str
    scenario: peers.Scenario
    kwargs: dict[str, Any] = field(default_factory=dict)
    broker_config: dict[str, int | bool | str] | None = None
    keep_alive_interval_secs: int = 30
    gzip_output: bool = False

    @property
    def filename(self) -> str:
        return f"{self.name}.pcap.gz" if self.gzip_output else f"{self.name}.pcap"


def _compression(codec: str) -> Spec:
    return Spec(
        f"compression_{codec.lower()}",
        f"batched producer with {codec} compression, 12 compressible 2 KiB messages "
        "(groups of 4: three send_async then one send)",
        peers.run_compression_scenario,
        {"compression": codec, "messages": 12, "async_every": 4, "payload_size": 2048},
    )


CAPTURES: list[Spec] = [
    Spec(
        "produce_consume",
        "one producer and one Exclusive consumer on one connection; 20 unbatched messages "
        "with keys and properties (send and send_async alternately), individual acks and "
        "a final cumulative ack",
        peers.run_scenario,
        {"messages": 20, "batching": False, "async_every": 2},
    ),
    Spec(
        "multi_producer",
        "three producers on one client connection, each on its own topic, and one "
        "multi-topic consumer subscribed to all three; 15 messages, individual acks",
        peers.run_multi_producer_scenario,
        {"producers": 3, "messages_per_producer": 5},
    ),
    Spec(
        "batching",
        "batched producer, three bursts of send_async (8, 5 and 3 messages) each flushed "
        "as one SEND; the manifest gives each message's batch index",
        peers.run_batching_scenario,
        {"bursts": (8, 5, 3)},
    ),
    *(_compression(codec) for codec in ("LZ4", "ZLib", "ZSTD", "SNAPPY")),
    Spec(
        "partitioned",
        "a 3-partition topic (broker default_partitions=3): PARTITIONED_METADATA, then the "
        "client's producer and consumer open one PRODUCER and one SUBSCRIBE per partition; "
        "12 messages, keyed (hash routed) or not (round robin)",
        peers.run_partitioned_scenario,
        {"messages": 12},
        broker_config={"default_partitions": 3},
    ),
    Spec(
        "acks",
        "batch-index acks (batch_index_ack_enabled), individual and cumulative acks inside "
        "one batch; then on a Shared subscription a negative ack with redelivery and a "
        "REDELIVER_UNACKNOWLEDGED_MESSAGES request with redelivery",
        peers.run_acks_scenario,
    ),
    Spec(
        "seek",
        "6 messages consumed and acked, then SEEK to the first message id and SEEK to a "
        "publish time, each followed by re-dispatched MESSAGEs and a nudge message (see the "
        "manifest's quirks and notes: more MESSAGE frames than received messages)",
        peers.run_seek_scenario,
    ),
    Spec(
        "keepalive",
        "3 messages, then ~5 s idle with the broker's keep-alive interval at 2 s: "
        "broker PING and client PONG frames",
        peers.run_scenario,
        {"messages": 3, "batching": False, "async_every": 1, "idle_secs": 5.0},
        keep_alive_interval_secs=2,
    ),
    Spec(
        "large_1mib",
        "one 1 MiB message without batching: SEND and MESSAGE frames spanning many TCP segments",
        peers.run_large_message_scenario,
        {"size": 1 << 20},
    ),
    Spec(
        "chunked",
        "one compressible 6 MiB message sent with chunking (the client assumes a 5 MiB "
        "limit): two chunk SENDs and two chunk MESSAGEs; gzip-compressed capture",
        peers.run_chunked_scenario,
        {"size": (6 << 20) + 12345},
        gzip_output=True,
    ),
]


def run_one(spec: Spec, out: Path, attempts: int) -> bool:
    """Capture ``spec`` into ``out`` (retrying); print a one-line summary. True on success."""
    for attempt in range(1, attempts + 1):
        started = time.monotonic()
        try:
            manifest, summary = capture_scenario(
                spec.scenario,
                out / spec.filename,
                name=spec.name,
                description=spec.description,
                gzip_output=spec.gzip_output,
                keep_alive_interval_secs=spec.keep_alive_interval_secs,
                broker_config=spec.broker_config,
                **spec.kwargs,
            )
        except TcpdumpMissing:
            raise
        except Exception as exc:
            print(f"{spec.name}: attempt {attempt}/{attempts} failed: {exc!r}", file=sys.stderr)
            continue
        if manifest["unexpected_duplicates"] and attempt < attempts:
            # Keep the samples plain where possible: a run hit by pulsar-lite's duplicate
            # dispatch is redone (the last attempt is kept whatever happened).
            print(f"{spec.name}: attempt {attempt}/{attempts} had duplicate dispatches, redoing")
            continue
        manifest["capture"]["attempt"] = attempt
        stale = out / (f"{spec.name}.pcap" if spec.gzip_output else f"{spec.name}.pcap.gz")
        stale.unlink(missing_ok=True)
        (out / f"{spec.name}.manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        size = (out / spec.filename).stat().st_size
        commands = ", ".join(
            f"{direction}: " + " ".join(f"{k}x{v}" for k, v in sorted(counts.items()))
            for direction, counts in sorted(summary.commands.items())
        )
        print(
            f"{spec.filename}: {size} bytes, {summary.packets} packets, "
            f"{summary.connections} connection(s), {len(manifest['sent'])} sent, "
            f"{len(manifest['received'])} received, quirks={len(manifest['quirks'])}, "
            f"{time.monotonic() - started:.1f}s\n    {commands}"
        )
        return True
    return False


def write_readme(out: Path) -> None:
    """pcaps/README.md: one line per capture, how to regenerate, caveats."""
    lines = [
        "# Sample captures",
        "",
        "Real traffic between the official Pulsar client (pulsar-client, C++ core) and the",
        "pulsar-lite broker on loopback, captured with tcpdump (`-i lo`, Ethernet link type,",
        "filter `tcp port BROKERPORT`).  Each `NAME.pcap` comes with `NAME.manifest.json`: what",
        "the client itself reported (topics, producers, consumers, every message sent and",
        "received with payload sha256, size, key, properties and message id, acks, seeks),",
        "never values decoded from the capture; plus broker port, versions, broker warnings",
        "and the quirks observed during the run.",
        "",
        "| capture | what it shows |",
        "| --- | --- |",
    ]
    lines += [f"| `{spec.filename}` | {spec.description} |" for spec in CAPTURES]
    lines += [
        "",
        "Regenerate all, or some by name (needs tcpdump and root; each run takes seconds):",
        "",
        f"    {REGENERATE}",
        "",
        "Runs are not deterministic: ports, timestamps, ids, TCP segmentation and ack grouping",
        "change from run to run; the manifests always describe the capture next to them.",
        "",
        "Caveats:",
        "",
        "- pulsar-lite's MESSAGE frames carry no magic 0x0e01 and no CRC32C checksum (the",
        "  client's SEND frames always do).",
        "- pulsar-lite reports `Pulsar-Lite-0.1.0`, sends no `max_message_size` (the client",
        "  then assumes 5 MiB, hence chunking above it), and its dispatch has quirks (duplicate",
        "  deliveries, nothing dispatched after SEEK until a new message arrives): each",
        "  manifest's `quirks` and `notes` list what happened during that run.",
        "- Loopback frames reach 65549 bytes (MTU 65536): scapy's `rdpcap` and `PcapReader`",
        "  iteration silently cut records at 65535 bytes; use",
        "  `PcapReader.read_packet(size=1 << 20)` (or another reader) for the large captures.",
        "- tcpdump runs with `--immediate-mode`: without it, packets still in the kernel ring",
        "  when tcpdump gets SIGINT are never written (short runs can give empty files).",
        "- `pcaps/streams/` (if present) holds raw byte streams made by",
        "  `scripts/record_streams.py`, not by this script.",
        "",
    ]
    (out / "README.md").write_text("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    names = [spec.name for spec in CAPTURES]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"captures: {' '.join(names)}")
    parser.add_argument("--out", type=Path, default=OUT, help="output directory (pcaps/)")
    parser.add_argument("--attempts", type=int, default=3, help="tries per capture")
    parser.add_argument("--list", action="store_true", help="list the captures and exit")
    parser.add_argument("--readme", action="store_true", help="only rewrite the README.md")
    args = parser.parse_args(argv)
    if args.list:
        for spec in CAPTURES:
            print(f"{spec.name}: {spec.description}")
        return 0
    if args.readme:
        write_readme(args.out)
        return 0
    unknown = sorted(set(args.names) - set(names))
    if unknown:
        parser.error(f"unknown capture(s) {unknown}; choose from {names}")
    try:
        tcpdump_path()
    except TcpdumpMissing as exc:
        print(exc, file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    failed = [
        spec.name
        for spec in CAPTURES
        if (not args.names or spec.name in args.names)
        and not run_one(spec, args.out, args.attempts)
    ]
    write_readme(args.out)
    if failed:
        print(f"failed: {' '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
