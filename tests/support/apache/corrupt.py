"""A recording proxy that corrupts MESSAGE frames in flight: what a flaky link, a bad NIC or
a broken middlebox does to a batch (apache/pulsar#26336's failure, made on purpose).

Input:  the broker's port, how many MESSAGE frames to corrupt (the first ones the broker
        sends through it).
Output: `CorruptingProxy`, a tests.support.peers.RecordingProxy (LOOKUP_RESPONSE pointed at
        itself, so the client keeps to its one connection through it) whose broker->client
        filter drops the broker entry metadata of every MESSAGE (as a broker without
        brokerEntryMetadataInterceptors sends it: the Java client 4.0.0 checks a checksum
        only when it comes first, ConsumerImpl.messageReceived calling verifyChecksum
        before it skips broker entry metadata) and flips every bit of the last byte of
        each MESSAGE to corrupt (its payload's last byte: the CRC32C the producer wrote no
        longer matches); `corrupted`: the (ledger, entry) of each, in order.
Rule:   a MESSAGE is held until whole; everything else streams through unchanged.
"""

from __future__ import annotations

import struct
from typing import Any

from dissector.pulsar.sections import HEADER, MAGIC_BROKER_ENTRY, Reject, decode_command
from dissector.pulsar.wire import COMMAND_TYPES
from tests.support.peers import RecordingProxy, _LookupRewriter

_MESSAGE = COMMAND_TYPES["MESSAGE"]
_U32 = struct.Struct(">I")


class CorruptingProxy(RecordingProxy):
    """See the module docstring."""

    def __init__(self, target_port: int, *, frames: int, **kw: Any) -> None:
        super().__init__(target_port, **kw)
        self.left = frames
        self.corrupted: list[tuple[int, int]] = []
        proxy = self

        class Rewriter(_Corrupting):
            owner = proxy

        self.rewriter_class = Rewriter


class _Corrupting(_LookupRewriter):
    owner: CorruptingProxy

    def feed(self, data: bytes) -> bytes:
        buf = self._buf + data
        out: list[bytes] = []
        while buf:
            if self._passthrough:
                take = min(self._passthrough, len(buf))
                out.append(buf[:take])
                buf = buf[take:]
                self._passthrough -= take
                continue
            if len(buf) < HEADER.size:
                break
            total, cmd_size = HEADER.unpack_from(buf)
            if len(buf) < HEADER.size + cmd_size:
                break
            command = buf[HEADER.size : HEADER.size + cmd_size]
            body = self._message(command) if total != 4 + cmd_size else None
            if body is not None:  # a MESSAGE: held whole, rewritten
                if len(buf) < 4 + total:
                    break
                out.append(self._altered(buf[: 4 + total], cmd_size, body))
                buf = buf[4 + total :]
                continue
            rewritten = self._rewrite(command, total, cmd_size)
            if rewritten is None:
                self._passthrough = 4 + total
            else:
                out.append(rewritten)
                buf = buf[HEADER.size + cmd_size :]
        self._buf = buf
        return b"".join(out)

    @staticmethod
    def _message(command: bytes) -> Any:
        """The CommandMessage of a MESSAGE command (None: another command)."""
        try:
            _, ctype, body = decode_command(memoryview(command))
        except Reject:
            return None
        return body if ctype == _MESSAGE else None

    def _altered(self, frame: bytes, cmd_size: int, body: Any) -> bytes:
        """The MESSAGE without its broker entry metadata, its last byte flipped if it is one
        to corrupt."""
        rest = frame[HEADER.size + cmd_size :]
        if rest[:2] == MAGIC_BROKER_ENTRY:
            (size,) = _U32.unpack_from(rest, 2)
            rest = rest[6 + size :]
        owner = self.owner
        if owner.left > 0:
            owner.left -= 1
            owner.corrupted.append((body.message_id.ledgerId, body.message_id.entryId))
            rest = rest[:-1] + bytes([rest[-1] ^ 0xFF])
        command = frame[HEADER.size : HEADER.size + cmd_size]
        return HEADER.pack(4 + cmd_size + len(rest), cmd_size) + command + rest
