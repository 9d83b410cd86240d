"""EDGE: `pulsar-dissect stream`: files of raw one-direction TCP bytes, decoded.

Input: files that each hold the bytes of one direction of a connection.
Output: one line per frame or anomaly (text or JSON lines) on stdout.
Rule: the file is read in bounded chunks (_READ_SIZE); a missing file is an error line.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from dissector.errors import DissectorError
from dissector.events import Anomaly, Direction, Event, Frame
from dissector.frontends.cli.options import Subcommands, max_frame_size_argument, secrets_argument
from dissector.frontends.terminal import printable
from dissector.frontends.text import frame_text
from dissector.pulsar.field_values import message_dict
from dissector.pulsar.framing import FrameDecoder, plain
from dissector.pulsar.text_fields import repair_metadata

_READ_SIZE = 1 << 20  # bytes read from a stream file at a time: memory stays bounded


def _stream_events(path: Path, args: argparse.Namespace) -> Iterator[Event]:
    decoder = FrameDecoder(
        direction=Direction(args.direction),
        max_frame_size=args.max_frame_size,
        synced=not args.mid_stream,
    )
    with path.open("rb") as fh:
        while chunk := fh.read(_READ_SIZE):
            yield from _with_metadata_text(plain(decoder.feed(chunk)))
    yield from _with_metadata_text(plain(decoder.close()))


def _with_metadata_text(events: list[Event]) -> Iterator[Event]:
    """Events, each payload frame followed by the anomaly of its metadata's invalid UTF-8
    (as the message extractor reports it when captures are read)."""
    for ev in events:
        not_utf8 = repair_metadata(ev) if isinstance(ev, Frame) else None  # before rendering
        yield ev
        if not_utf8 is not None:
            yield not_utf8


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
                out.write(printable(f"{name}:{event.stream_offset:<8} {text}") + "\n")
            else:
                line = f"{name}:{event.stream_offset:<8} ! {event.code}: {event.detail}"
                out.write(printable(line) + "\n")
    return 0


def add_parser(sub: Subcommands) -> None:
    """The `stream` command's arguments."""
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
    max_frame_size_argument(stream)
    secrets_argument(stream)
    stream.set_defaults(run=cmd_stream)
