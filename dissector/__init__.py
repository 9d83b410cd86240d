"""pulsar-dissector: turn captures of Apache Pulsar traffic into trustworthy tables.

The public API is re-exported here; see README.md and docs/python.md for usage.
"""

from dissector.anomalies import REGISTRY, Severity
from dissector.diagnose import Diagnoser
from dissector.errors import DissectorError, InputError, UsageError
from dissector.events import (
    Anomaly,
    AppMessage,
    Checksum,
    Conversation,
    ConversationOpened,
    Direction,
    Event,
    Finding,
    FlowKey,
    Frame,
    Pair,
    PipelineEvent,
)
from dissector.findings import Thresholds
from dissector.pulsar.encoder import command, encode_frame
from dissector.pulsar.framing import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, StreamStats
from dissector.read import Capture, ReaderOptions, iter_events, read_capture, read_tables

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "REGISTRY",
    "Anomaly",
    "AppMessage",
    "Capture",
    "Checksum",
    "Conversation",
    "ConversationOpened",
    "Diagnoser",
    "Direction",
    "DissectorError",
    "Event",
    "Finding",
    "FlowKey",
    "Frame",
    "FrameDecoder",
    "InputError",
    "Pair",
    "PipelineEvent",
    "ReaderOptions",
    "Severity",
    "StreamStats",
    "Thresholds",
    "UsageError",
    "command",
    "encode_frame",
    "iter_events",
    "read_capture",
    "read_tables",
]
