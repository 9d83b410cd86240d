"""Every record passed between the stages, and the closed vocabularies they use.

Input: nothing. Output: the records capture, flow, pulsar and the pipeline hand on (packets,
segments, stream bytes, frames, anomalies, messages, request/response pairs and the other
protocol facts, entities, conversations, findings, journeys) and enums for every closed
vocabulary, each defined in one module of this package and named here:
`vocabulary` (the enums), `packets` (below the framing), `decoded` (the framing's records),
`facts` (dissector.facts' records), `outputs` (conversations, findings, journeys).
Rule: records are defined here and nowhere else, so that no stage imports another just for
its types; importers name `dissector.events`, never a module of it. Every event carries
provenance (connection id, direction, stream offset, first/last packet number and
timestamp) so that every table row traces back to captured bytes. Records made per packet or
per frame are NamedTuples: immutable, slotted, and about ten times cheaper to create than
frozen dataclasses (the hot path makes one per frame). Timestamps are integer microseconds
since the Unix epoch; packet numbers count from 1 (0 means "not from a capture", e.g. a raw
stream file).
"""

from __future__ import annotations

from dissector.events.decoded import (
    Anomaly,
    AppMessage,
    Decoded,
    Event,
    Frame,
    FrameRun,
)
from dissector.events.facts import (
    Acked,
    AckedId,
    AckedIds,
    ConnectionInfo,
    Delivered,
    Delivering,
    Entity,
    Handshake,
    Lifecycle,
    Pair,
    Permits,
    RequestIdReused,
    SchemaFact,
)
from dissector.events.outputs import (
    Conversation,
    ConversationOpened,
    DirectionStats,
    Finding,
    Journey,
    TlsInfo,
)
from dissector.events.packets import (
    ConnClosed,
    ConnOpened,
    Dealt,
    DealtRaw,
    FlowKey,
    NetIssue,
    Preamble,
    RawPacket,
    Segment,
    Skipped,
    StreamData,
    StreamGap,
    TcpEvent,
)
from dissector.events.vocabulary import (
    Checksum,
    CloseReason,
    Direction,
    EntityKind,
    EntityState,
    LifeStep,
    MessageKind,
    Outcome,
    PreambleKind,
    SchemaStep,
    TraceFormat,
)

#: Every event the pipeline hands its consumers, in order.
PipelineEvent = (
    ConversationOpened
    | Frame
    | FrameRun
    | Anomaly
    | Conversation
    | AppMessage
    | Pair
    | RequestIdReused
    | Acked
    | Permits
    | Lifecycle
    | Handshake
    | Delivering
    | AckedIds
    | SchemaFact
)

__all__ = [
    "Acked",
    "AckedId",
    "AckedIds",
    "Anomaly",
    "AppMessage",
    "Checksum",
    "CloseReason",
    "ConnClosed",
    "ConnOpened",
    "ConnectionInfo",
    "Conversation",
    "ConversationOpened",
    "Dealt",
    "DealtRaw",
    "Decoded",
    "Delivered",
    "Delivering",
    "Direction",
    "DirectionStats",
    "Entity",
    "EntityKind",
    "EntityState",
    "Event",
    "Finding",
    "FlowKey",
    "Frame",
    "FrameRun",
    "Handshake",
    "Journey",
    "LifeStep",
    "Lifecycle",
    "MessageKind",
    "NetIssue",
    "Outcome",
    "Pair",
    "Permits",
    "PipelineEvent",
    "Preamble",
    "PreambleKind",
    "RawPacket",
    "RequestIdReused",
    "SchemaFact",
    "SchemaStep",
    "Segment",
    "Skipped",
    "StreamData",
    "StreamGap",
    "TcpEvent",
    "TlsInfo",
    "TraceFormat",
]
