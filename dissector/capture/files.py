"""Open a capture file (pcap or pcapng, plain or gzip-compressed) and read its packets.

Input: a path, or a location in object storage or HDFS (`s3://`, `gs://`, `hdfs://`, `file://`;
see dissector.capture.locations).
Output: a `CaptureReader`, a single-pass iterable of `RawPacket` with the damage that ended
the reading (if any) in `.issues` afterwards. The file is closed when the iteration ends or
on `close()` (also a context manager).
Rules:
- Compression and format are told by the magic bytes, never by the file name: 1f 8b is gzip,
  then the (decompressed) first four bytes name pcap or pcapng.
- A file that cannot be used at all (missing, unreadable, empty, not a capture, header cut
  short) raises `InputError` from `open_capture` with a one-line message naming the file.
- Damage after the header never raises: the packets before it are yielded, then a
  `CaptureIssue` is recorded and the iteration stops.
- Files are read in chunks (`CHUNK_SIZE`), never whole; remote files are streamed in ranged
  reads of that size, never downloaded to local disk.
- `parsed()` iterates with the compiled stage (dissector._core) where it is built and not
  turned off: packets it parsed come as `Segment`s, the others as `RawPacket`s, in capture
  order; given a compiled dealer (a -j worker's), as dissector.flow.shard says.
"""

from __future__ import annotations

import gzip
import io
import os
import zlib
from collections.abc import Iterator
from types import TracebackType
from typing import Any, Literal

from dissector import _core
from dissector.capture import pcap, pcapng
from dissector.capture._source import ByteWindow, CaptureIssue, Stream
from dissector.capture.locations import input_error, is_local, local_path, open_input, redact
from dissector.errors import InputError, UsageError
from dissector.events import RawPacket, Segment, Skipped

GZIP_MAGIC = b"\x1f\x8b"

#: Other formats people hand us by mistake, to name them in the error message.
_KNOWN_OTHERS = {
    b"\x28\xb5\x2f\xfd": "a zstd-compressed file (decompress it first)",
    b"\xfd\x37\x7a\x58": "an xz-compressed file (decompress it first)",
    b"\x42\x5a\x68": "a bzip2-compressed file (decompress it first)",
    b"\x50\x4b\x03\x04": "a zip archive (extract it first)",
    b"\xa1\xb2\xcd\x34": "a Kuznetzov-patched pcap (unsupported variant)",
    b"\x34\xcd\xb2\xa1": "a Kuznetzov-patched pcap (unsupported variant)",
}

Format = Literal["pcap", "pcapng"]


class CaptureReader:
    """Packets of one capture file. Iterate once; then `issues` says how the reading ended."""

    def __init__(self, path: str, stream: Stream, raw: Stream, compressed: bool) -> None:
        self.path = path
        self.gzip = compressed
        self.issues: list[CaptureIssue] = []
        self._stream = stream
        self._raw = raw
        self._closed = False
        self._window = ByteWindow(stream)
        self.format: Format
        self._packets: Iterator[RawPacket]
        self._header: pcap.PcapHeader | None = None  # pcap's file header
        self._started = False
        self._start()

    def _start(self) -> None:
        window = self._window
        window.fill(pcap.HEADER_SIZE)
        head = window.buf[: pcap.HEADER_SIZE]
        where = " after decompression" if self.gzip else ""
        if window.error is not None and len(head) < 4:
            raise InputError(f"{self.path}: cannot read its start ({window.error[1]})")
        if not head:
            raise InputError(f"{self.path}: empty file{where}")
        if head[:4] in pcap.MAGICS:
            if len(head) < pcap.HEADER_SIZE:
                raise InputError(
                    f"{self.path}: pcap file header cut short ({len(head)} of 24 bytes)"
                )
            header = self._header = pcap.parse_header(head)
            window.pos = pcap.HEADER_SIZE
            self.format = "pcap"
            self._packets = pcap.packets(window, header, self.issues)
        elif head[:4] == pcapng.SHB_MAGIC:
            problem = pcapng.start_problem(head)
            if problem is not None:
                raise InputError(f"{self.path}: {problem}")
            self.format = "pcapng"
            self._packets = pcapng.packets(window, self.issues)
        else:
            raise InputError(f"{self.path}: {_not_a_capture(head)}{where}")

    def __iter__(self) -> Iterator[RawPacket]:
        """The packets; a second pass yields nothing. `UsageError` once closed."""
        if self._closed:
            raise UsageError(f"{self.path}: capture reader used after close()")
        self._started = True
        for packet in self._packets:
            yield packet
            if self._closed:  # closed by the consumer mid-iteration
                return
        self._release()

    def parsed(self, dealer: _core.Dealer | None = None) -> Iterator[RawPacket | Segment | Skipped]:
        """The packets, those the compiled stage parsed as their `Segment` (see the module
        rules); the reader itself (plain packets) when it is not active or the iteration
        has begun. dealer: the compiled walk deals with it (dissector.flow.shard)."""
        if self._closed:
            raise UsageError(f"{self.path}: capture reader used after close()")
        if self._started or not _core.active():
            return iter(self)
        self._started = True
        header = self._header
        items: Iterator[RawPacket | Segment | Skipped]
        if header is not None:
            walk = _core.pcap_walk(header, dealer)
            assert walk is not None
            items = pcap.packets(self._window, header, self.issues, walk)
        else:
            ng_walk = _core.pcapng_walk(dealer)
            assert ng_walk is not None
            items = pcapng.packets(self._window, self.issues, ng_walk)
        self._packets = iter(())
        return self._walked(items)

    def _walked(
        self, items: Iterator[RawPacket | Segment | Skipped]
    ) -> Iterator[RawPacket | Segment | Skipped]:
        for item in items:
            yield item
            if self._closed:
                return
        self._release()

    @property
    def position(self) -> int:
        """Bytes of the file read so far (compressed bytes for gzip), for progress."""
        try:
            return int(self._raw.tell())
        except (OSError, ValueError):  # a pipe, or closed
            return 0

    def close(self) -> None:
        """Close the file; safe to call more than once. Iteration ends after this."""
        self._closed = True
        self._release()

    def _release(self) -> None:
        self._packets = iter(())
        self._stream.close()
        self._raw.close()

    def __enter__(self) -> CaptureReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _not_a_capture(head: bytes) -> str:
    for magic, what in _KNOWN_OTHERS.items():
        if head.startswith(magic):
            return f"not a pcap or pcapng file but {what}"
    return f"not a pcap or pcapng file (starts with {head[:4].hex(' ')})"


def open_capture(path: str | os.PathLike[str], s3_endpoint: str | None = None) -> CaptureReader:
    """Open a pcap or pcapng file, gzip-compressed or not, local or remote (s3_endpoint: an
    S3 endpoint URL other than AWS's); `InputError` if it is unusable."""
    name = os.fspath(path)
    raw: Any  # a local buffered file or a pyarrow NativeFile: both read, read1, tell, close
    if is_local(name):
        raw = _open_local(local_path(name), name)
        head = raw.peek(2)[:2]  # peek, not seek: pipes work too
    else:
        remote = open_input(name, s3_endpoint)
        raw = remote
        try:
            head = remote.read(2)
            remote.seek(0)
        except OSError as exc:
            remote.close()
            raise input_error(name, exc, s3_endpoint=s3_endpoint) from None
    try:
        compressed = head == GZIP_MAGIC
        stream: Stream = gzip.GzipFile(fileobj=raw, mode="rb") if compressed else raw
        return CaptureReader(name, stream, raw, compressed)
    except InputError:
        raw.close()
        raise
    except (OSError, EOFError, zlib.error) as exc:
        raw.close()
        raise InputError(f"{name}: cannot read ({redact(str(exc))})") from None


def _open_local(path: str, name: str) -> io.BufferedReader:
    try:
        return open(path, "rb")  # owned by the reader, closed by it
    except FileNotFoundError:
        raise InputError(f"{name}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{name}: is a directory, not a capture file") from None
    except OSError as exc:
        raise InputError(f"{name}: cannot open ({exc.strerror or exc})") from None
