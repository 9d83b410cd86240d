"""One located Pulsar frame -> events with provenance, and the byte accounting of a stream.

Input: the bytes of one frame whose position in the direction's stream is known (whole, or
the start of one that will not complete), and the (stream offset, packet, ts) of every piece
of the stream fed so far.
Output: the `Frame` event (decoded by `sections`, stamped with connection, direction, offset
and first/last packet and timestamp) and its `Anomaly` events; `StreamStats`.
Also: the `Frame` and anomaly events of the frames the compiled scan took (`_taken`), and
the `FrameRun` of the frames its run scan took (`_run`: no object per frame).
Rules: a frame that will not complete is emitted (complete=False) when its command is whole
and decodes, else its bytes count as skipped; a run of skipped bytes is reported once, as one
anomaly, when it ends; frame_bytes + skipped_bytes + gap_bytes == stream length.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Any, Final

from google.protobuf.message import DecodeError

from dissector._core import ScannedFrame
from dissector.anomalies import AnomalyCode
from dissector.events import Anomaly, Checksum, Decoded, Direction, Frame, FrameRun
from dissector.pulsar.frame_runs import C_OFFSET, C_TOTAL, NCOLS
from dissector.pulsar.sections import (
    HEADER,
    U32,
    Fault,
    PayloadParts,
    Reject,
    decode_command,
    decode_payload_section,
    header_problem,
    parse,
    parse_command,
    partial_metadata,
)
from dissector.pulsar.text_fields import describe, has_strings, repair
from dissector.pulsar.wire import (
    BODY_DESCRIPTORS,
    BODY_FIELDS,
    COMMAND_NAMES,
    PAYLOAD_TYPES,
    BrokerEntryMetadata,
    MessageMetadata,
    command_name,
)


@dataclass(slots=True)
class StreamStats:
    """Byte accounting of one direction; the three byte counts add up to its length."""

    frames: int = 0
    frame_bytes: int = 0
    skipped_bytes: int = 0
    gap_bytes: int = 0


_NO_PAYLOAD = PayloadParts(None, None, None, None, None, None, None)
#: The compiled scan's checksum verdicts (frames.h PD_CHECKSUM_*: none, absent, valid,
#: invalid) as the frames carry them.
CHECKSUM_VERDICTS: tuple[Checksum | None, ...] = (
    None,
    Checksum.ABSENT,
    Checksum.VALID,
    Checksum.INVALID,
)
_VERDICT_ABSENT: Final = 1
_VERDICT_INVALID: Final = 3
_NO_PROBLEMS: list[Anomaly] = []  # shared, never mutated: returned when a frame is clean
#: Builds a NamedTuple from a tuple without its keyword-aware __new__ (several times faster).
_new_frame = tuple.__new__
_parse_command = parse_command


class FrameEmitter:
    """Provenance and events of one direction; FrameDecoder finds where its frames are."""

    def __init__(self, conn_id: int, direction: Direction, offset: int) -> None:
        self.conn_id = conn_id
        self.direction = direction
        self.stats = StreamStats()
        self._base = offset  # stream offset of the first pending byte
        self._marks: list[tuple[int, int, int]] = []  # (stream offset, packet, ts) of pieces
        self._sync_reason = "capture starts mid-stream"
        self._skip_start = -1  # stream offset where the current run of skipped bytes began
        self._skip_len = 0

    def _where(self, offset: int) -> tuple[int, int]:
        """(packet, ts) of the piece that carried stream byte `offset`."""
        marks = self._marks
        if len(marks) == 1 or offset >= marks[-1][0]:
            _, packet, ts = marks[-1]
            return packet, ts
        i = bisect_right(marks, (offset, 1 << 62)) - 1
        _, packet, ts = marks[max(i, 0)]
        return packet, ts

    def _decode(
        self, buf: bytes, mv: memoryview, pos: int, total: int, csize: int, *, strict: bool
    ) -> tuple[Frame, list[Anomaly]]:
        """Decode the whole frame at buf[pos:], whose header the caller has read.

        Raise Reject if the command is unusable. strict (resync): anything wrong rejects the
        candidate instead of being reported.
        """
        end = pos + 4 + total
        cstart = pos + 8
        cend = cstart + csize
        cmd, ctype, body = decode_command(mv[cstart:cend])
        offset = self._base + pos
        problems: list[Fault] = []
        if body is None:
            if strict:
                raise Reject("no sub-message")
            if ctype in COMMAND_NAMES:
                detail = f"{COMMAND_NAMES[ctype]} without its sub-message"
                problems.append((AnomalyCode.PULSAR_COMMAND_MISSING_BODY, pos, detail, 0))
            else:
                problems.append((AnomalyCode.PULSAR_UNKNOWN_COMMAND_TYPE, pos, f"type {ctype}", 0))
        name = COMMAND_NAMES.get(ctype) or command_name(ctype)
        if ctype in PAYLOAD_TYPES:
            parts = decode_payload_section(buf, mv, cend, end, strict, problems)
        why = _repaired(name, body)
        if why is not None:
            problems.append((AnomalyCode.PULSAR_INVALID_UTF8, pos, why, 0))
        if ctype not in PAYLOAD_TYPES:
            parts = _NO_PAYLOAD
            if end > cend:
                if strict:
                    raise Reject("trailing bytes")
                detail = f"{end - cend} bytes after the {name} command"
                problems.append((AnomalyCode.PULSAR_TRAILING_BYTES, cend, detail, end - cend))
        frame = self._stamp(offset, end, total, csize, ctype, name, cmd, body, parts)
        if not problems:
            return frame, _NO_PROBLEMS
        base = self._base
        anomalies = [
            self._anomaly(code, base + at, detail, length=length)
            for code, at, detail, length in problems
        ]
        return frame, anomalies

    def _stamp(
        self,
        offset: int,
        end: int,
        total: int,
        csize: int,
        ctype: int,
        name: str,
        cmd: Any,
        body: Any,
        parts: PayloadParts,
    ) -> Frame:
        """The whole frame at stream `offset` (ending at buffer position `end`), stamped
        with its connection, direction and first/last packet and timestamp."""
        marks = self._marks
        if len(marks) == 1:
            _, first_packet, first_ts = marks[0]
            last_packet, last_ts = first_packet, first_ts
        else:
            first_packet, first_ts = self._where(offset)
            last_packet, last_ts = self._where(self._base + end - 1)
        frame: Frame = _new_frame(
            Frame,
            (
                self.conn_id,
                self.direction,
                offset,
                total,
                csize,
                ctype,
                name,
                cmd,
                body,
                *parts,
                True,
                first_packet,
                last_packet,
                first_ts,
                last_ts,
                None,  # raw: set by FrameDecoder when asked for
                None,  # topic: set by the pipeline
            ),
        )
        return frame

    def _taken(
        self, mv: memoryview, rows: list[ScannedFrame], keep_raw: bool, out: list[Decoded]
    ) -> int:
        """Events of the frames the compiled scan took (dissector._core.frames_scan), which
        the Python decoder would emit whole with no anomaly but a bad checksum: the same
        `Frame` (its protobuf parts decoded from the ranges the scan found) and, for a bad
        checksum, the same anomaly; counted in `stats`. Return the buffer position after the
        last frame made: short of the scan's when a part failed to decode after all (then
        Python decodes that frame and reports it, as without the scan)."""
        base = self._base
        start = done = rows[0][0] if rows else 0
        made = 0
        for offset, total, csize, verdict, expected, computed, meta_at, meta_len in rows:
            cend = offset + 8 + csize
            end = offset + 4 + total
            try:
                cmd = _parse_command(mv[offset + 8 : cend])  # type: ignore[arg-type]
                ctype: int = cmd.type
                body = getattr(cmd, BODY_FIELDS[ctype])
                if verdict:
                    crc = verdict != _VERDICT_ABSENT
                    bend = meta_at - (10 if crc else 4)  # broker entry metadata ends there
                    mend = meta_at + meta_len
                    parts = PayloadParts(
                        CHECKSUM_VERDICTS[verdict],
                        expected if crc else None,
                        computed if crc else None,
                        parse(BrokerEntryMetadata, mv[cend + 6 : bend]) if bend > cend else None,
                        meta_len,
                        parse(MessageMetadata, mv[meta_at:mend]),
                        mv[mend:end],
                    )
                else:
                    parts = _NO_PAYLOAD
            except DecodeError:
                break
            name = COMMAND_NAMES.get(ctype) or command_name(ctype)
            frame = self._stamp(base + offset, end, total, csize, ctype, name, cmd, body, parts)
            if keep_raw:
                frame = frame._replace(raw=bytes(mv[offset:end]))
            out.append(frame)
            if verdict == _VERDICT_INVALID:
                detail = f"expected 0x{expected:08x} computed 0x{computed:08x}"
                at = base + meta_at - 10  # the checksum's magic
                out.append(self._anomaly(AnomalyCode.PULSAR_BAD_CHECKSUM, at, detail))
            done = end
            made += 1
        stats = self.stats
        stats.frames += made
        stats.frame_bytes += done - start
        return done

    def _run(self, rows: bytes, count: int, start: int, end: int) -> FrameRun:
        """The `FrameRun` of `count` frames the compiled run scan took between buffer
        positions `start` and `end` (`rows`: its block), each frame's packets and time found
        as `_stamp` finds them; counted in `stats`."""
        marks = self._marks
        base = self._base
        if len(marks) == 1 or base + start >= marks[-1][0]:  # all in the last piece
            _, packet, ts = marks[-1]
            firsts = lasts = [packet] * count
            times = [ts] * count
        else:
            where = self._where
            cols = memoryview(rows).cast("q")
            firsts, lasts, times = [], [], []
            for r in range(0, count * NCOLS, NCOLS):
                at = base + cols[r + C_OFFSET]
                firsts.append(where(at)[0])
                packet, ts = where(at + 3 + cols[r + C_TOTAL])
                lasts.append(packet)
                times.append(ts)
        stats = self.stats
        stats.frames += count
        stats.frame_bytes += end - start
        return _new_frame(
            FrameRun,
            (self.conn_id, self.direction, count, rows, base, firsts, lasts, times, None),
        )

    def _cut_frame(self, buf: bytes, max_size: int, out: list[Decoded], why: str) -> int | None:
        """The pending bytes start a frame that will not complete here.

        Emit it as an incomplete frame when its command is whole and decodes, else count
        the bytes as skipped. Return the frame's end offset when its header is plausible.
        """
        base = self._base
        have = len(buf)
        if have < 8:
            self._skip(base, have)
            if have >= 4:  # its size, as the other header faults tell theirs
                why = f"{why}: {have} bytes, totalSize {U32.unpack_from(buf)[0]}"
            out.append(self._anomaly(AnomalyCode.PULSAR_TRUNCATED_FRAME, base, why, length=have))
            return None
        total: int
        csize: int
        total, csize = HEADER.unpack_from(buf, 0)
        if header_problem(total, csize, max_size) is not None:
            self._skip(base, have)
            return None
        frame_end = base + 4 + total
        truncated = self._anomaly(
            AnomalyCode.PULSAR_TRUNCATED_FRAME,
            base,
            f"{why}: {have} of {4 + total} bytes present",
            length=have,
        )
        try:
            if 8 + csize > have:
                raise Reject("command incomplete")
            cmd, ctype, body = decode_command(memoryview(buf)[8 : 8 + csize])
        except Reject:
            self._skip(base, have)
            out.append(truncated)
            return frame_end
        metadata = None
        if ctype in PAYLOAD_TYPES:
            metadata = partial_metadata(buf, 8 + csize)
        not_utf8 = _repaired(command_name(ctype), body)
        first_packet, first_ts = self._where(base)
        last_packet, last_ts = self._where(base + have - 1)
        out.append(
            Frame(
                conn_id=self.conn_id,
                direction=self.direction,
                stream_offset=base,
                total_size=total,
                command_size=csize,
                command_type=ctype,
                command_name=command_name(ctype),
                command=cmd,
                body=body,
                checksum=Checksum.UNKNOWN if ctype in PAYLOAD_TYPES else None,
                metadata=metadata,
                complete=False,
                first_packet=first_packet,
                last_packet=last_packet,
                first_ts=first_ts,
                last_ts=last_ts,
            )
        )
        if not_utf8 is not None:
            out.append(self._anomaly(AnomalyCode.PULSAR_INVALID_UTF8, base, not_utf8))
        out.append(truncated)
        self.stats.frames += 1
        self.stats.frame_bytes += have
        return frame_end

    # ----------------------------------------------------------------- reporting

    def _skip(self, offset: int, length: int) -> None:
        if length <= 0:
            return
        if self._skip_len == 0:
            self._skip_start = offset
        self._skip_len += length
        self.stats.skipped_bytes += length

    def _flush_skip(self, out: list[Decoded]) -> None:
        if self._skip_len:
            out.append(
                self._anomaly(
                    AnomalyCode.PULSAR_SKIPPED_BYTES,
                    self._skip_start,
                    f"{self._skip_len} bytes skipped to resynchronise ({self._sync_reason})",
                    length=self._skip_len,
                )
            )
            self._skip_len = 0
            self._skip_start = -1

    def _anomaly(self, code: str, offset: int, detail: str, *, length: int = 0) -> Anomaly:
        packet, ts = self._where(offset) if self._marks else (0, 0)
        return Anomaly.of(
            code,
            conn_id=self.conn_id,
            direction=self.direction,
            stream_offset=offset,
            detail=detail,
            length=length,
            packet=packet,
            ts=ts,
        )


def _repaired(name: str, body: Any) -> str | None:
    """Invalid UTF-8 in a command made text (in place): the anomaly's detail, or None when
    every string was UTF-8 (nearly always). The metadata of SEND and MESSAGE is repaired
    where its strings are read (`text_fields.repair_metadata`): walking it costs three
    times its parse, and the frames table reads none of it."""
    replaced = repair(body) if body is not None and body.DESCRIPTOR in _STRINGY else []
    return describe(name, replaced) if replaced else None


#: Command sub-message types with string fields: SEND, MESSAGE, ACK, FLOW ... are not.
_STRINGY = frozenset(d for d in BODY_DESCRIPTORS.values() if has_strings(d))
