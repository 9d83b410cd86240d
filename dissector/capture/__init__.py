"""EDGE: capture files -> raw packets.

Input: a path to a pcap or pcapng file, plain or gzip-compressed.
Output: `RawPacket`s (see `dissector.events`) and the `CaptureIssue` that ended the reading.
Rule: this subpackage is the only one here that opens capture files; everything after it
works on `RawPacket`s.
"""

from dissector.capture._source import CaptureIssue
from dissector.capture.files import CaptureReader, open_capture

__all__ = ["CaptureIssue", "CaptureReader", "open_capture"]
