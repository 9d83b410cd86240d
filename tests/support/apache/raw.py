"""A raw Pulsar client of ours: one socket (plain or TLS) speaking frames we build, for what
the official clients cannot be made to do (CONNECT without supports_auth_refresh) or cannot
give us (a TLS key log).

Input:  the broker's host and port, optionally an `ssl.SSLContext` (with its keylog_filename)
        and the server name; commands to send (type name and fields, MessageMetadata and
        payload for SEND).
Output: `RawClient`, a context manager whose `.record` is its own account of the connection:
        every frame it sent and received, in order (direction, command name, the sub-message's
        fields as protobuf's own JSON mapping gives them, the time), and `eof_ms`, the time it
        read the broker's end of the stream (None: it closed first), `closed_ms` its own close.
Rule:   frames are built with dissector.pulsar.encoder (the bytes a conforming peer sends)
        and read back with nothing but the size fields and protobuf's BaseCommand parser, so
        the record never goes through our dissector's reading code. Reads are bounded by
        READ_TIMEOUT (generous); a PING from the broker is answered with PONG (recorded).
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct
import time
from typing import Any, Self

from google.protobuf.json_format import MessageToDict

from dissector._pb.pulsar_api_pb2 import BaseCommand, MessageMetadata
from dissector.pulsar.encoder import command, encode_frame

READ_TIMEOUT = 120.0
_U32 = struct.Struct(">I")


def _now_ms() -> int:
    return int(time.time() * 1000)


class RawClient:
    """One connection to a broker; see the module docstring."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
    ) -> None:
        raw = socket.create_connection((host, port), timeout=READ_TIMEOUT)
        self.sock: socket.socket = (
            raw if context is None else context.wrap_socket(raw, server_hostname=server_hostname)
        )
        self.local_port: int = self.sock.getsockname()[1]
        self.frames: list[dict[str, Any]] = []
        self.eof_ms: int | None = None
        self.closed_ms: int | None = None

    @property
    def record(self) -> dict[str, Any]:
        return {
            "local_port": self.local_port,
            "frames": self.frames,
            "eof_ms": self.eof_ms,
            "closed_ms": self.closed_ms,
        }

    def send(
        self,
        name: str,
        *,
        metadata: dict[str, Any] | None = None,
        payload: bytes = b"",
        **fields: Any,
    ) -> None:
        """Send one command `name` with `fields` (and for SEND its metadata and payload)."""
        cmd = command(name, **fields)
        meta = None if metadata is None else MessageMetadata(**metadata)
        self.sock.sendall(encode_frame(cmd, metadata=meta, payload=payload))
        self._note("sent", cmd, payload)

    def connect(self, version: str, token: str, **fields: Any) -> BaseCommand:
        """CONNECT with a token (protocol 21; `fields` adds, e.g. feature_flags), and its
        CONNECTED."""
        self.send(
            "CONNECT",
            client_version=version,
            protocol_version=21,
            auth_method_name="token",
            auth_data=token.encode(),
            **fields,
        )
        return self.expect("CONNECTED")

    def receive(self) -> BaseCommand | None:
        """The next frame's command from the broker (PINGs answered and skipped); None at the
        end of its stream."""
        while True:
            head = self._read(4)
            if head is None:
                return None
            body = self._read(_U32.unpack(head)[0])
            if body is None:
                return None
            size = _U32.unpack(body[:4])[0]
            cmd = BaseCommand.FromString(body[4 : 4 + size])
            self._note("received", cmd, b"")
            if cmd.type != BaseCommand.PING:
                return cmd
            self.send("PONG")

    def expect(self, name: str) -> BaseCommand:
        """The next command, which must be `name` (else the run is wrong: raise)."""
        cmd = self.receive()
        got = None if cmd is None else BaseCommand.Type.Name(cmd.type)
        if got != name:
            raise RuntimeError(f"expected {name} from the broker, got {got}: {cmd}")
        assert cmd is not None
        return cmd

    def _read(self, n: int) -> bytes | None:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                self.eof_ms = _now_ms()
                return None
            data += chunk
        return data

    def _note(self, direction: str, cmd: BaseCommand, payload: bytes) -> None:
        name = BaseCommand.Type.Name(cmd.type)
        subs = [value for field, value in cmd.ListFields() if field.name != "type"]
        fields = MessageToDict(subs[0], preserving_proto_field_name=True) if subs else {}
        self.frames.append(
            {
                "direction": direction,
                "command": name,
                "fields": fields,
                "ms": _now_ms(),
                "payload_size": len(payload),
            }
        )

    def close(self) -> None:
        if self.closed_ms is None:
            self.closed_ms = _now_ms()
            if isinstance(self.sock, ssl.SSLSocket) and self.eof_ms is None:
                with contextlib.suppress(OSError, ssl.SSLError):
                    self.sock.unwrap()  # close_notify both ways, then the TCP close
            self.sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
