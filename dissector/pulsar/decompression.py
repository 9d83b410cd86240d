"""Bounded decompression of one Pulsar payload.

Input: a payload's CompressionType, its bytes, the uncompressed_size its MessageMetadata
claims (or None) and the size limit.
Output: the decompressed bytes (None on failure) and problems as (anomaly code, detail)
pairs (`Problem`, the payload modules' problem report). The bytes are not copied once more:
a NONE payload is returned as given, a codec's output as a view of the buffer it filled.
Rules:
- Decompression is bounded: a claimed or produced size above the limit is reported as a
  suspected decompression bomb and not expanded, whatever the codec (a failed LZ4 block is
  walked to tell a bomb from a corrupt block); output is checked against uncompressed_size.
- Without uncompressed_size the output buffer starts near the input's size and grows up to
  the limit, so memory and time follow the output, not the bound.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable
from typing import Any

import cramjam

from dissector.anomalies import AnomalyCode
from dissector.pulsar.wire import COMPRESSION_NAMES, COMPRESSION_TYPES

#: Largest decompressed payload by default: Pulsar's 5 MiB message limit plus framing slack.
DEFAULT_MAX_UNCOMPRESSED = 5 * 1024 * 1024 + 64 * 1024
#: First output buffer for a payload whose metadata has no uncompressed_size (it grows).
FIRST_GUESS = 64 * 1024

_CODEC = COMPRESSION_TYPES
NONE, LZ4, ZLIB, ZSTD, SNAPPY = (_CODEC[n] for n in ("NONE", "LZ4", "ZLIB", "ZSTD", "SNAPPY"))
#: CompressionType value -> name, from the schema.
CODEC_NAMES = COMPRESSION_NAMES

Problem = tuple[str, str]  # (anomaly code, detail)
#: A payload's bytes: a view into its frame's buffer where nothing needed a copy.
Payload = bytes | memoryview


def decompress(
    codec: int, data: Payload, uncompressed_size: int | None, limit: int
) -> tuple[Payload | None, list[Problem]]:
    """The decompressed bytes (None on failure) and the problems found: `data` itself,
    uncopied, when the codec is NONE."""
    if codec == NONE:
        return data, []
    inflate = _DECOMPRESSORS.get(codec)
    if inflate is None:
        return None, [
            (AnomalyCode.PAYLOAD_DECOMPRESSION_FAILED, f"unknown compression type {codec}")
        ]
    name = CODEC_NAMES[codec]
    if uncompressed_size is not None and uncompressed_size > limit:
        detail = f"{name}: uncompressed_size {uncompressed_size} exceeds the {limit}-byte bound"
        return None, [(AnomalyCode.PAYLOAD_DECOMPRESSION_BOMB, detail)]
    try:
        if uncompressed_size is None:
            out = _unsized(inflate, data, limit)
        else:
            out = inflate(data, uncompressed_size, limit)
    except _Bomb as bomb:
        return None, [(AnomalyCode.PAYLOAD_DECOMPRESSION_BOMB, str(bomb))]
    except _TooBig:
        if uncompressed_size is not None and uncompressed_size < limit:
            detail = f"{name}: output exceeds uncompressed_size {uncompressed_size}"
            return None, [(AnomalyCode.PAYLOAD_SIZE_MISMATCH, detail)]
        return None, [
            (AnomalyCode.PAYLOAD_DECOMPRESSION_BOMB, f"{name}: output exceeds {limit} bytes")
        ]
    except (cramjam.DecompressionError, zlib.error, ValueError) as exc:
        return None, [(AnomalyCode.PAYLOAD_DECOMPRESSION_FAILED, f"{name}: {exc}")]
    if uncompressed_size is not None and len(out) != uncompressed_size:
        detail = f"{name}: {len(out)} bytes, uncompressed_size says {uncompressed_size}"
        return out, [(AnomalyCode.PAYLOAD_SIZE_MISMATCH, detail)]
    return out, []


def _unsized(
    inflate: Callable[[bytes | memoryview, int, int], Payload], data: Payload, limit: int
) -> Payload:
    """Decompress without a claimed size: into a buffer that starts near the input's size
    and grows eightfold up to the bound, not one of the bound's size (5 MiB, zeroed) for
    every message (fuzzing finding 10). `_TooBig` at the bound, as before."""
    size = min(limit, max(FIRST_GUESS, 4 * len(data)))
    while True:
        try:
            return inflate(data, size, limit)
        except _TooBig:
            if size >= limit:
                raise
            size = min(limit, size * 8)


class _TooBig(Exception):
    """Decompressed output does not fit the buffer it was given."""


class _Bomb(Exception):
    """The stream itself claims more than the bound (the message is the detail)."""


def _into(fn: Any, data: bytes | memoryview, size: int) -> Payload:
    buf = bytearray(size)
    try:
        n = fn(bytes(data), buf)
    except cramjam.DecompressionError as exc:
        text = str(exc)
        if "large enough" in text or "smaller than required" in text or "whole buffer" in text:
            raise _TooBig from None
        raise
    return memoryview(buf)[:n]  # the output, uncopied


def _zlib(data: bytes | memoryview, size: int, limit: int) -> bytes:
    d = zlib.decompressobj()
    out = d.decompress(bytes(data), size + 1)
    if len(out) > size or d.unconsumed_tail:
        raise _TooBig
    out += d.flush()
    if len(out) > min(size, limit):
        raise _TooBig
    return out


def _snappy(data: bytes | memoryview, size: int, limit: int) -> Payload:
    claimed = cramjam.snappy.decompress_raw_len(bytes(data))
    if claimed > limit:
        raise _Bomb(f"SNAPPY: stream claims {claimed} bytes, above the {limit}-byte bound")
    return _into(cramjam.snappy.decompress_raw_into, data, max(claimed, 1))


def _lz4(data: bytes | memoryview, size: int, limit: int) -> Payload:
    raw = bytes(data)
    buf = bytearray(size)
    try:  # output_len: no size prefix (without it cramjam retries as if there were one)
        n = cramjam.lz4.decompress_block_into(raw, buf, output_len=size)
    except cramjam.DecompressionError:
        if _lz4_output_exceeds(raw, size):  # liblz4 reports a full buffer as a corrupt block
            raise _TooBig from None
        raise
    return memoryview(buf)[:n]  # the output, uncopied


_FF_RUN = re.compile(b"\xff*")


def _lz4_len(data: bytes, pos: int, base: int) -> tuple[int, int]:
    """(LZ4 length field, position after it): 15 adds the bytes after it while they are 255
    (a run measured in C); position -1 when the data ends first."""
    if base < 15:
        return base, pos
    run = _FF_RUN.match(data, pos).end()  # type: ignore[union-attr]  # b"x*" always matches
    return (base + 255 * (run - pos) + data[run], run + 1) if run < len(data) else (0, -1)


def _lz4_output_exceeds(data: bytes, size: int) -> bool:
    """Whether an LZ4 block describes more than `size` output bytes before its first fault
    (cut short, offset 0 or before the output); sequence headers only, nothing written."""
    n, pos, out = len(data), 0, 0
    while 0 <= pos < n:
        token = data[pos]
        literals, pos = _lz4_len(data, pos + 1, token >> 4)
        if pos < 0 or pos + literals > n:
            return False
        pos += literals
        out += literals
        if out > size:
            return True
        if pos + 2 > n:  # the last sequence (literals only), or cut short
            return False
        offset = data[pos] | data[pos + 1] << 8
        if not 0 < offset <= out:
            return False
        match, pos = _lz4_len(data, pos + 2, token & 15)
        out += match + 4
        if out > size and pos >= 0:
            return True
    return False


def _zstd(data: bytes | memoryview, size: int, limit: int) -> Payload:
    return _into(cramjam.zstd.decompress_into, data, size)


#: CompressionType value -> decompressor(data, size, limit); keyed by the schema's names.
_DECOMPRESSORS: dict[int, Callable[[bytes | memoryview, int, int], Payload]] = {
    _CODEC["LZ4"]: _lz4,
    _CODEC["ZLIB"]: _zlib,
    _CODEC["ZSTD"]: _zstd,
    _CODEC["SNAPPY"]: _snappy,
}
