"""EDGE: the `pulsar-dissect` command line.

Input: command-line arguments and the files they name.
Output: text or JSON lines on stdout; errors as one line on stderr with a non-zero exit.
Rule: bad input never shows a traceback: DissectorError and OSError become one clear line
(exit 2). Exit 0 when the input was read, even if it held anomalies.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

from dissector.describe import frame_text, message_dict
from dissector.errors import DissectorError
from dissector.events import Anomaly, Direction, Event, Frame
from dissector.framing import DEFAULT_MAX_FRAME_SIZE, FrameDecoder

_READ_SIZE = 1 << 20  # bytes read from a stream file at a time: memory stays bounded


def _stream_events(path: Path, args: argparse.Namespace) -> Iterator[Event]:
    decoder = FrameDecoder(
        direction=Direction(args.direction),
        max_frame_size=args.max_frame_size,
        synced=not args.mid_stream,
    )
    with path.open("rb") as fh:
        while chunk := fh.read(_READ_SIZE):
            yield from decoder.feed(chunk)
    yield from decoder.close()


def _event_json(name: str, event: Event, show_secrets: bool) -> dict[str, Any]:
    if isinstance(event, Anomaly):
        return {
            "file": name,
            "anomaly": event.code,
            "severity": str(event.severity),
            "stream_offset": event.stream_offset,
            "length": event.length,
            "detail": event.detail,
        }
    row: dict[str, Any] = {
        "file": name,
        "stream_offset": event.stream_offset,
        "frame_size": event.wire_size,
        "command": event.command_name,
        "fields": {} if event.body is None else message_dict(event.body, show_secrets=show_secrets),
    }
    if event.checksum is not None:
        row["checksum"] = str(event.checksum)
    if event.metadata is not None:
        row["metadata"] = message_dict(event.metadata, show_secrets=show_secrets)
    if event.payload is not None:
        row["payload_size"] = len(event.payload)
    if not event.complete:
        row["complete"] = False
    return row


def cmd_stream(args: argparse.Namespace, out: TextIO) -> int:
    """Decode files that each hold the raw bytes of one direction of a connection."""
    for name in args.files:
        path = Path(name)
        if not path.is_file():
            raise DissectorError(f"{name}: no such file")
        for event in _stream_events(path, args):
            if args.format == "jsonl":
                out.write(json.dumps(_event_json(name, event, args.show_secrets)) + "\n")
            elif isinstance(event, Frame):
                text = frame_text(event, show_secrets=args.show_secrets)
                out.write(f"{name}:{event.stream_offset:<8} {text}\n")
            else:
                out.write(f"{name}:{event.stream_offset:<8} ! {event.code}: {event.detail}\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pulsar-dissect",
        description="Decode Apache Pulsar binary-protocol traffic into frames and tables.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    stream = sub.add_parser(
        "stream",
        help="decode raw one-direction TCP byte streams (e.g. Wireshark 'Follow TCP stream' raw)",
    )
    stream.add_argument("files", nargs="+", metavar="FILE")
    stream.add_argument("--format", choices=["text", "jsonl"], default="text")
    stream.add_argument(
        "--direction", choices=[d.value for d in Direction], default=Direction.CLIENT_TO_BROKER
    )
    stream.add_argument(
        "--mid-stream",
        action="store_true",
        help="the file does not start at a frame boundary: resynchronise first",
    )
    stream.add_argument(
        "--max-frame-size",
        type=int,
        default=DEFAULT_MAX_FRAME_SIZE,
        help=f"largest totalSize accepted (default {DEFAULT_MAX_FRAME_SIZE})",
    )
    stream.add_argument(
        "--show-secrets", action="store_true", help="print authentication data unredacted"
    )
    stream.set_defaults(run=cmd_stream)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args, sys.stdout))
    except BrokenPipeError:
        # Output piped into `head`: not an error. Point stdout at devnull so that the
        # interpreter's final flush does not complain either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (DissectorError, OSError) as exc:
        print(f"pulsar-dissect: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
