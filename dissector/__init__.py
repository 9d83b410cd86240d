"""pulsar-dissector: turn captures of Apache Pulsar traffic into trustworthy tables.

The public API is re-exported here; see README.md and docs/python.md for usage.
Names whose modules bring pyarrow or the protobuf runtime (the readers, the frame decoder,
the encoder) are imported on first use (PEP 562 `__getattr__`), so that `import dissector`
(which every submodule import runs first, the command line's too) stays cheap: a text read of
a small capture never imports pyarrow or pandas (tests/test_startup.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dissector._lazy import lazy_names
from dissector.anomalies import REGISTRY, Severity
from dissector.errors import DissectorError, InputError, UsageError
from dissector.events import (
    Acked,
    AckedId,
    AckedIds,
    Anomaly,
    AppMessage,
    Checksum,
    Conversation,
    ConversationOpened,
    Delivered,
    Delivering,
    Direction,
    Event,
    Finding,
    FlowKey,
    Frame,
    Handshake,
    Lifecycle,
    LifeStep,
    Pair,
    Permits,
    PipelineEvent,
    RequestIdReused,
)

if TYPE_CHECKING:
    from dissector.diagnose import Diagnoser
    from dissector.findings import Thresholds
    from dissector.pulsar.encoder import command, encode_frame
    from dissector.pulsar.framing import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, StreamStats
    from dissector.read import Capture, ReaderOptions, iter_events, read_capture, read_tables
    from dissector.tables.otlp import journey_spans

#: Public name -> the module it is imported from on first use.
_LAZY = {
    "Diagnoser": "dissector.diagnose",
    "Thresholds": "dissector.findings",
    **dict.fromkeys(("command", "encode_frame"), "dissector.pulsar.encoder"),
    **dict.fromkeys(
        ("DEFAULT_MAX_FRAME_SIZE", "FrameDecoder", "StreamStats"), "dissector.pulsar.framing"
    ),
    **dict.fromkeys(
        ("Capture", "ReaderOptions", "iter_events", "read_capture", "read_tables"),
        "dissector.read",
    ),
    "journey_spans": "dissector.tables.otlp",
}

if not TYPE_CHECKING:  # type checkers see the imports above
    __getattr__, __dir__ = lazy_names(__name__, globals(), _LAZY)

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "REGISTRY",
    "Acked",
    "AckedId",
    "AckedIds",
    "Anomaly",
    "AppMessage",
    "Capture",
    "Checksum",
    "Conversation",
    "ConversationOpened",
    "Delivered",
    "Delivering",
    "Diagnoser",
    "Direction",
    "DissectorError",
    "Event",
    "Finding",
    "FlowKey",
    "Frame",
    "FrameDecoder",
    "Handshake",
    "InputError",
    "LifeStep",
    "Lifecycle",
    "Pair",
    "Permits",
    "PipelineEvent",
    "ReaderOptions",
    "RequestIdReused",
    "Severity",
    "StreamStats",
    "Thresholds",
    "UsageError",
    "command",
    "encode_frame",
    "iter_events",
    "journey_spans",
    "read_capture",
    "read_tables",
]
