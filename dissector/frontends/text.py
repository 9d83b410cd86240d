"""The text views: frame lines for `read` and `live`, and views of decoded messages.

Input: pipeline events (frames, anomalies, conversations opening and ending); a decoded
protobuf message (a command's sub-message, metadata) or a Frame.
Output: `FrameLines`: one line per frame, anomalies inline with `!`, with --values a short
line of each message's value after its frame's line (`=`; a BYTES value that is UTF-8
text shows its text too); a compact one-line
text of a message (`k=v k2={a=1}`) or a JSON-ready dict.
Rule: authentication data (CONNECT auth_data / original_auth_data, the AuthData carried by
AUTH_CHALLENGE and AUTH_RESPONSE) is replaced by a fixed placeholder plus its length in every
output unless show_secrets=True; in the hex view (-x) its bytes are shown as `**`. Nothing
else is hidden; long values are shortened. Strings from the capture are printed with their
control characters escaped (frontends/terminal.py): no topic can drive the user's terminal.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from dissector.events import (
    Anomaly,
    AppMessage,
    Conversation,
    ConversationOpened,
    Direction,
    FlowKey,
    Frame,
    PipelineEvent,
)
from dissector.frontends.terminal import printable
from dissector.pulsar.field_values import SECRET_FIELDS, message_dict, redacted, short_hex
from dissector.pulsar.wire import enum_value_name
from dissector.tables.filters import Filter

_MAX_ITEMS = 8  # repeated fields: items shown in text before "...+N"
_MAX_TEXT = 80  # strings and bytes: characters shown in text before truncation
#: --values: characters of a message's value shown under its frame's line (the value column
#: has all of it); a line stays a line.
MAX_VALUE_TEXT = 160


def _scalar_text(field: FieldDescriptor, value: Any, show_secrets: bool) -> str:
    if field.name in SECRET_FIELDS and not show_secrets:
        return redacted(len(value))
    if field.type == FieldDescriptor.TYPE_BYTES:
        return short_hex(value)
    if field.type == FieldDescriptor.TYPE_STRING:
        text = value if len(value) <= _MAX_TEXT else value[:_MAX_TEXT] + "..."
        return repr(text) if (not text or " " in text or "=" in text) else text
    if field.type == FieldDescriptor.TYPE_ENUM:
        return enum_value_name(field, value) or str(value)
    if field.type == FieldDescriptor.TYPE_BOOL:
        return "true" if value else "false"
    return str(value)


def message_text(msg: Message, *, show_secrets: bool = False) -> str:
    """`name=value ...` for every field set in msg, nested messages in braces."""
    parts = []
    for field, value in msg.ListFields():
        if field.is_repeated:
            items = [_value_text(field, v, show_secrets) for v in value[:_MAX_ITEMS]]
            more = f" ...+{len(value) - _MAX_ITEMS}" if len(value) > _MAX_ITEMS else ""
            parts.append(f"{field.name}=[{' '.join(items)}{more}]")
        else:
            parts.append(f"{field.name}={_value_text(field, value, show_secrets)}")
    return " ".join(parts)


def _value_text(field: FieldDescriptor, value: Any, show_secrets: bool) -> str:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return "{" + message_text(value, show_secrets=show_secrets) + "}"
    return _scalar_text(field, value, show_secrets)


def frame_text(frame: Frame, *, show_secrets: bool = False) -> str:
    """One line: command name, its fields, and for payload frames metadata and checksum."""
    parts = [frame.command_name]
    if frame.body is not None:
        parts.append(message_text(frame.body, show_secrets=show_secrets))
    if frame.metadata is not None:
        meta = frame.metadata
        parts.append(f"producer={meta.producer_name} seq={meta.sequence_id}")
        if meta.num_messages_in_batch != 1:
            parts.append(f"batch={meta.num_messages_in_batch}")
    if frame.payload is not None:
        parts.append(f"payload={len(frame.payload)}B")
    if frame.checksum is not None:
        parts.append(f"checksum={frame.checksum}")
    if not frame.complete:
        parts.append("[incomplete]")
    return " ".join(p for p in parts if p)


#: -t: how the text view writes a frame's time, as tshark's -t: r relative to the first
#: packet of the capture, d delta from the previous line, a/ad local time (of day / with the
#: date), u/ud the same in UTC, e seconds since the epoch.
TIME_FORMATS = ("r", "d", "a", "ad", "u", "ud", "e")


def frame_tree(frame: Frame, *, show_secrets: bool = False) -> str:
    """Every decoded field of a frame as an indented tree (the -V view), one field a line:
    the command and its fields, broker entry metadata, message metadata, payload, checksum."""
    lines: list[str] = []

    def walk(name: str, value: Any, depth: int) -> None:
        pad = "    " * depth
        if isinstance(value, dict):
            lines.append(f"{pad}{name}:")
            for k, v in value.items():
                walk(k, v, depth + 1)
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            for i, v in enumerate(value):
                walk(f"{name}[{i}]", v, depth)
        else:
            lines.append(f"{pad}{name}: {value}")

    body = {} if frame.body is None else message_dict(frame.body, show_secrets=show_secrets)
    walk(f"command {frame.command_name} ({frame.total_size + 4} bytes)", body, 1)
    if frame.broker_entry is not None:
        walk("broker entry metadata", message_dict(frame.broker_entry), 1)
    if frame.metadata is not None:
        walk("message metadata", message_dict(frame.metadata, show_secrets=show_secrets), 1)
    if frame.payload is not None:
        lines.append(f"    payload: {len(frame.payload)} bytes")
    if frame.checksum is not None:
        sums = ""
        if frame.checksum_expected is not None:
            sums = f" (carried 0x{frame.checksum_expected:08x}"
            if frame.checksum_computed is not None:
                sums += f", computed 0x{frame.checksum_computed:08x}"
            sums += ")"
        lines.append(f"    checksum: {frame.checksum}{sums}")
    if not frame.complete:
        lines.append("    incomplete: bytes of the frame are missing from the capture")
    return "".join(printable(line) + "\n" for line in lines)


class FrameLines:
    """The text view of `read` and `live`: one line per frame, anomalies inline with `!`.

    A frame line starts as Wireshark's packet list does: the number of the packet that
    completed the frame (tshark's frame.number), its time (`time_format`, relative to the
    capture's first packet by default: `start`), then the connection id (conn_id in every
    table); then endpoints, command and fields. A connection's endpoints are kept while it
    is open and forgotten when it ends (memory stays bounded).
    """

    def __init__(
        self,
        rows: Filter,
        *,
        show_secrets: bool = False,
        time_format: str = "r",
        verbose: bool = False,
        hexdump: bool = False,
        hide_payloads: bool = False,
    ) -> None:
        if time_format not in TIME_FORMATS:
            raise ValueError(f"time format {time_format!r}: one of {', '.join(TIME_FORMATS)}")
        self.rows = rows
        self.show_secrets = show_secrets
        self.time_format = time_format
        self.verbose = verbose  # -V: every decoded field under the line, as a tree
        self.hexdump = hexdump  # -x: the frame's bytes in hex under the line (and tree)
        self.hide_payloads = hide_payloads  # --redact-fields: -x masks every payload byte
        self.keys: dict[int, FlowKey] = {}
        self.first_ts: int | None = None
        self.previous_ts: int | None = None
        self.shown = False  # the last frame's line was shown: its messages' values follow

    def start(self, ts: int) -> None:
        """The capture's first packet time (µs): what relative times count from."""
        if self.first_ts is None:
            self.first_ts = ts

    def when(self, ts: int) -> str:
        """A frame's time as the time format asks."""
        fmt = self.time_format
        if fmt == "r":
            if self.first_ts is None:
                self.first_ts = ts
            return f"{(ts - self.first_ts) / 1e6:>11.6f}"
        if fmt == "d":
            before, self.previous_ts = self.previous_ts, ts
            return f"{(ts - (ts if before is None else before)) / 1e6:>11.6f}"
        if fmt == "e":
            return f"{ts // 1_000_000}.{ts % 1_000_000:06d}"
        seconds, micros = divmod(ts, 1_000_000)
        zone = dt.UTC if fmt.startswith("u") else None
        at = dt.datetime.fromtimestamp(seconds, zone).replace(microsecond=micros)
        if fmt in ("a", "u"):
            return at.strftime("%H:%M:%S.%f")
        return at.strftime("%Y-%m-%d %H:%M:%S.%f")

    def line(self, ev: PipelineEvent) -> str | None:
        """The text line of an event (newline included), or None when it has none."""
        if isinstance(ev, Frame):
            if self.first_ts is None:
                self.first_ts = ev.last_ts
            self.shown = False
            if not self.rows.frame(ev):
                return None
            self.shown = True
            where = _endpoints(self.keys.get(ev.conn_id), ev.direction)
            text = frame_text(ev, show_secrets=self.show_secrets)
            when = self.when(ev.last_ts)
            line = printable(f"{ev.last_packet:>6} {when} {ev.conn_id:>4} {where} {text}") + "\n"
            if self.verbose:
                line += frame_tree(ev, show_secrets=self.show_secrets)
            if self.hexdump:
                line += frame_hex(
                    ev, show_secrets=self.show_secrets, hide_payload=self.hide_payloads
                )
            return line
        if type(ev) is AppMessage:
            return self._value(ev) if self.shown else None
        if isinstance(ev, Anomaly):
            if not self.rows.anomaly(ev):
                return None
            where = f"conn {ev.conn_id}" if ev.conn_id else "capture"
            text = f"{'!':>6} {'':>11} {where}: {ev.code} ({ev.severity}) {ev.detail}"
            return printable(text) + "\n"
        if isinstance(ev, ConversationOpened):
            self.keys[ev.conn_id] = ev.key
        elif isinstance(ev, Conversation):
            self.keys.pop(ev.conn_id, None)
        return None

    @staticmethod
    def _value(m: AppMessage) -> str | None:
        """--values: the value line of a message of the frame just shown (None without)."""
        if m.value_schema is None and m.value_error is None:
            return None
        entry = "" if m.batch_index is None else f"[{m.batch_index}]"
        if m.value is None:
            text = f"value{entry}: none ({m.value_error})"
        else:
            shown = _capped(m.value)
            text = f"value{entry} {m.value_schema}: {shown}"
            from dissector.values.cells import bytes_text  # only with --values: lazily

            utf8 = bytes_text(m.value, m.value_schema)
            if utf8 is not None:  # BYTES that are text: the text too, as a JSON string
                text += f" text {_capped(json.dumps(utf8, ensure_ascii=False))}"
        return printable(f"{'=':>6} {'':>11} {text}") + "\n"


def _capped(text: str) -> str:
    """A value's text, at most MAX_VALUE_TEXT characters then how many it has."""
    if len(text) <= MAX_VALUE_TEXT:
        return text
    return text[:MAX_VALUE_TEXT] + f"...({len(text)} chars)"


#: Bytes per line of the hex view, as tshark -x and xxd.
HEX_WIDTH = 16


def secret_values(msg: Message | None) -> list[bytes]:
    """The values of every secret field in a decoded message, however deep."""
    found: list[bytes] = []
    if msg is None:
        return found
    for field, value in msg.ListFields():
        if field.name in SECRET_FIELDS:
            found.extend(value if field.is_repeated else [value])
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            items = value if field.is_repeated else [value]
            for item in items:
                found.extend(secret_values(item))
    return [v.encode() if isinstance(v, str) else bytes(v) for v in found if v]


def hex_dump(
    data: bytes, *, hidden: list[bytes] | None = None, hidden_from: int | None = None
) -> str:
    """Bytes as tshark -x prints them: offset, 16 bytes in two groups of 8, then the
    printable characters (others as `.`). Every occurrence of a `hidden` value, and every
    byte from offset `hidden_from` on, is shown as `**` (hex) and `*` (characters)."""
    masked = bytearray(len(data))
    for value in hidden or ():
        at = data.find(value)
        while at >= 0:
            masked[at : at + len(value)] = b"\x01" * len(value)
            at = data.find(value, at + 1)
    if hidden_from is not None and hidden_from < len(data):
        masked[hidden_from:] = b"\x01" * (len(data) - hidden_from)
    lines = []
    for start in range(0, len(data), HEX_WIDTH):
        chunk = data[start : start + HEX_WIDTH]
        hexes = ["**" if masked[start + i] else f"{b:02x}" for i, b in enumerate(chunk)]
        left, right = " ".join(hexes[:8]), " ".join(hexes[8:])
        text = "".join(
            "*" if masked[start + i] else (chr(b) if 0x20 <= b < 0x7F else ".")
            for i, b in enumerate(chunk)
        )
        lines.append(f"{start:04x}  {left:<23}  {right:<23}   {text}\n")
    return "".join(lines)


def payload_start(frame: Frame, size: int) -> int | None:
    """Where the payload section starts in the frame's `size` bytes: the payload is their
    tail; when it is not known (metadata that does not decode), everything after the
    command. None for a frame without one (a simple command)."""
    after_command = 8 + frame.command_size  # totalSize, commandSize, the command
    if size <= after_command:
        return None
    if frame.payload is not None:
        return max(after_command, size - len(frame.payload))
    return after_command


def frame_hex(frame: Frame, *, show_secrets: bool = False, hide_payload: bool = False) -> str:
    """The -x view of a frame: its bytes as on the wire, secrets masked unless asked, and
    with `hide_payload` (--redact-fields) every byte of the payload: the redacted fields are
    in it, encoded (JSON, Avro, protobuf, compressed) where no field can be found exactly."""
    if frame.raw is None:
        return "      (bytes of this frame are missing from the capture)\n"
    hidden = None if show_secrets else secret_values(frame.body)
    hidden_from = payload_start(frame, len(frame.raw)) if hide_payload else None
    return hex_dump(frame.raw, hidden=hidden, hidden_from=hidden_from) + "\n"


def _endpoints(key: FlowKey | None, direction: Direction) -> str:
    if key is None:
        return "?"
    client = f"{key.client_ip}:{key.client_port}"
    broker = f"{key.broker_ip}:{key.broker_port}"
    return (
        f"{client} -> {broker}"
        if direction is Direction.CLIENT_TO_BROKER
        else f"{broker} -> {client}"
    )
