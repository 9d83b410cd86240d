"""The protocol facts' records (dissector.facts): what a frame completes or says.

Input: nothing. Output: `Pair` (a request answered, failed, never answered; a SEND
receipted or failed; a delivery acknowledged), `RequestIdReused`, `SchemaFact`, `Delivered`,
`Acked`, `Permits`, `Lifecycle`, `Delivering`, `AckedId`, `AckedIds`, and the entities and
handshake a connection declared (`Entity`, `ConnectionInfo`).
Rule: each fact follows the Frame that made it in the pipeline's events.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from dissector.events.decoded import Frame
from dissector.events.vocabulary import EntityKind, EntityState, LifeStep, Outcome, SchemaStep


class Pair(NamedTuple):
    """One timeline row: a request and its response (either may be missing)."""

    conn_id: int
    request: Frame | None
    response: Frame | None
    outcome: Outcome
    request_id: int | None
    producer_id: int | None
    consumer_id: int | None
    sequence_id: int | None
    ledger_id: int | None
    entry_id: int | None
    topic: str | None
    error_code: str | None
    error_message: str | None
    #: An ack of a message already acknowledged (unmatched, yet no fault: a cumulative ack
    #: covering individually acked messages, an ack sent twice): the packet of its first ack.
    first_ack_packet: int | None = None
    #: A SEND receipted or failed: whether it was its producer's oldest SEND waiting (the
    #: first sequence id still unanswered), and the producer's oldest SEND still waiting
    #: after it (None: none). The diagnoses' send timeout and receipt order read them.
    in_order: bool | None = None
    next_waiting: Frame | None = None


class RequestIdReused(NamedTuple):
    """A fact of dissector.facts: a request sent while an earlier one of the same
    (direction, request_id) still waits for its answer (both keep waiting). Made once per such
    request, right after its Frame; no table row of its own (the findings read it)."""

    conn_id: int
    request: Frame
    #: the command types of the requests of its id already waiting (oldest first)
    waiting: tuple[int, ...] = ()


class SchemaFact(NamedTuple):
    """A fact of dissector.facts: a schema declared, accepted, fetched or refused on a
    connection, per topic and version. Made only when a consumer wants them (the values'
    schema tracker), one per schema-bearing command (rare: no hot-path cost)."""

    conn_id: int
    step: SchemaStep
    command: str  # the command saying it: PRODUCER, PRODUCER_SUCCESS, GET_SCHEMA_RESPONSE, ...
    topic: str  # as the client named it (a partition's name included)
    kind: EntityKind | None  # the producer or consumer it concerns (PRODUCER, SUBSCRIBE)
    entity_id: int | None
    schema: Any  # the wire's Schema (protobuf) declared or fetched; None: none
    version: bytes | None  # the version the broker told (or the one GET_SCHEMA asked for)
    error_code: str | None  # REFUSED: the broker's code (IncompatibleSchema, TopicNotFound)
    error_message: str | None
    frame: Frame  # the frame that says it


class Delivered:
    """A fact of dissector.facts: one message delivered to a consumer and not acknowledged
    yet, as its first delivery made it (a redelivery keeps its place, time and number):
    `frame` is its latest MESSAGE as it waits (`facts.acks.held`), `waiting` whether a
    completion fact still waits for it (False once a REDELIVER_UNACKNOWLEDGED_MESSAGES asked
    for it again: still unacknowledged, its pair made), `size` the messages its latest
    delivery carried (a batch's entries to deliver: `Entity.unacked` counts them)."""

    __slots__ = ("first_packet", "first_ts", "frame", "number", "permits", "size", "waiting")

    def __init__(self, frame: Frame, number: int, size: int = 1) -> None:
        self.frame = frame
        self.first_ts, self.first_packet = frame.last_ts, frame.last_packet
        self.number = number  # first deliveries of its consumer are numbered in order
        self.waiting = True
        #: the permits its latest delivery debited its consumer (facts.permits; 0: none
        #: counted, or debited to an earlier life of its consumer id)
        self.permits = 0
        self.size = size


class Acked(NamedTuple):
    """A fact of dissector.facts, made once per ACK right after its Frame and Pairs (no table
    row of its own; the findings read it): what the ACK did to its consumer's
    unacknowledged deliveries (`Delivered`)."""

    conn_id: int
    ack: Frame
    consumer_id: int
    #: the consumer's oldest unacknowledged delivery before the ACK, and after it
    oldest: Delivered | None
    left: Delivered | None
    #: the deliveries it acknowledged: (ledger, entry), record
    done: tuple[tuple[tuple[int, int], Delivered], ...]
    #: with a validation_error: the unacknowledged deliveries of the ids it names, in order
    discarded: tuple[Delivered, ...] = ()
    #: a cumulative ACK: the highest id it acknowledges everything up to (a batch it names in
    #: part, an ack_set with bits still set: the entry before it); None: individual
    upto: tuple[int, int] | None = None


class Permits(NamedTuple):
    """A fact of dissector.facts (no table row of its own; the findings read it), made right
    after its Frame: a consumer's FLOW permits after a FLOW, or after a MESSAGE that left it
    none (or delivered its largest batch yet): what the flow rules read, with no permit
    count of their own (dissector.facts.permits)."""

    conn_id: int
    frame: Frame  # the FLOW or MESSAGE
    consumer_id: int
    #: FLOWs its consumer sent so far, this one included (0: a consumer not created on this
    #: connection, its permits unknown)
    flows: int
    #: permits left: its FLOWs' messagePermits minus the entries delivered to it
    left: int
    #: the largest batch delivered to it so far (1 before any)
    max_batch: int
    #: permits of its deliveries not processed yet: delivered and neither acknowledged
    #: (an ACK, with or without a validation_error) nor delivered again; `left + pending`
    #: is its window (its FLOWs' messagePermits minus the permits of what it processed)
    pending: int = 0
    #: redeliveries so far: MESSAGEs delivered again (a redelivery_count, an id delivered
    #: or acknowledged before) and REDELIVER_UNACKNOWLEDGED_MESSAGES sent
    redeliveries: int = 0
    #: a MESSAGE's: its debit is the broker's own CommandMessage.message_permits (PIP-491),
    #: not the count the facts infer (num_messages_in_batch, the ack_set's bits)
    broker_debit: bool = False
    #: a MESSAGE's: its FLOWs' messagePermits minus the MESSAGE commands (entries, a batch
    #: counting one) delivered to it: what a broker estimating batch sizes keeps at 0 or
    #: above (Apache's default dispatch, preciseDispatcherFlowControl=false)
    entries_left: int = 0


class Lifecycle(NamedTuple):
    """A fact of dissector.facts (no table row of its own; the findings and journeys read
    it), made right after the Frame that made the step, after its other facts: a producer or
    consumer declared, created, failed, closed by either side or migrated
    (dissector.facts.lifecycles)."""

    conn_id: int
    frame: Frame  # PRODUCER/SUBSCRIBE, its answer, CLOSE_PRODUCER/CLOSE_CONSUMER, TOPIC_MIGRATED
    kind: EntityKind
    entity_id: int
    step: LifeStep
    #: the producer or consumer as its PRODUCER / SUBSCRIBE made it (topic, subscription,
    #: sub_type, access mode; its state and counts as the facts keep them); None: its
    #: declaration was not captured (or forgotten beyond the facts' bound)
    entity: Entity | None
    #: its name as of this step: the PRODUCER's producer_name, then the PRODUCER_SUCCESS's
    name: str | None = None
    #: an answer (CREATED, FAILED): the PRODUCER or SUBSCRIBE it answers
    request: Frame | None = None
    #: MIGRATED, or closed by the broker naming its next one: the broker it is sent to
    #: (the service URL, else the TLS one)
    broker_url: str | None = None


class Handshake(NamedTuple):
    """A fact of dissector.facts (no table row of its own; the findings read it), made right
    after a CONNECT or CONNECTED Frame and its other facts: what the connection has said
    about itself so far (dissector.facts.lifecycles)."""

    conn_id: int
    frame: Frame  # the CONNECT or CONNECTED
    #: the connection's handshake as the facts keep it, this frame's fields included (the
    #: same record the conversations table reads at the end)
    info: ConnectionInfo


class Delivering(NamedTuple):
    """A fact of dissector.facts, made right after a MESSAGE's Frame and Pairs when the
    journeys read deliveries (`ConversationState(consumed=True)`; no table row of its own):
    the message delivered and to which consumer, as the protocol means it
    (dissector.facts.consumed)."""

    conn_id: int
    consumer_id: int
    #: its consumer as the connection's SUBSCRIBE made it (topic, subscription, sub_type,
    #: name); None: the capture missed that SUBSCRIBE
    consumer: Entity | None
    ledger: int
    entry: int
    partition: int
    #: the batch indexes it delivers, as its ack_set's words (set bits delivered:
    #: dissector.facts.consumed.has); (): every entry of it
    ack_set: tuple[int, ...]
    redelivery_count: int


class AckedId(NamedTuple):
    """One message id an ACK names, as the protocol means it (`AckedIds`)."""

    ledger: int
    entry: int
    partition: int
    #: a chunked message's: its first chunk's (ledger, entry) (the id names its last
    #: chunk's); None: not said
    first_chunk: tuple[int, int] | None
    #: a batch-index ack: its ack_set's words (clear bits acknowledged, set bits left:
    #: dissector.facts.consumed.has); (): the whole entry
    ack_set: tuple[int, ...]
    #: its batch's size as the ack says it, at most facts.batches.MAX_BATCH; None: not said
    batch_size: int | None


class AckedIds(NamedTuple):
    """A fact of dissector.facts, made right after an ACK's Frame, Pairs and `Acked` fact
    when the journeys read deliveries (no table row of its own): the message ids it
    acknowledges and whose consumer, as the protocol means them (dissector.facts.consumed)."""

    conn_id: int
    consumer_id: int
    #: as in `Delivering`
    consumer: Entity | None
    #: ack_type Cumulative: every message of its subscription before each id is acknowledged
    cumulative: bool
    ids: tuple[AckedId, ...]


@dataclass(slots=True)
class Entity:
    """A producer or consumer of the connection."""

    kind: EntityKind
    entity_id: int
    topic: str | None
    created_ts: int
    name: str | None = None
    subscription: str | None = None
    sub_type: str | None = None
    access_mode: str | None = None
    state: EntityState = EntityState.PENDING
    closed_ts: int | None = None
    permits: int = 0  # consumers: FLOW permits granted
    delivered: int = 0  # consumers: messages delivered (batch entries counted)
    sent: int = 0  # producers: messages sent (batch entries counted)
    # consumers, counted with facts only (dissector.facts.permits): FLOWs sent, permits
    # used (entries delivered, an ack_set applied), the largest batch delivered (1 before)
    flows: int = 0
    used: int = 0
    max_batch: int = 1
    # consumers, with facts only: MESSAGE commands delivered (entries, whatever their batch)
    entries: int = 0
    # consumers, with facts only: permits of deliveries processed (acknowledged, discarded
    # with a validation_error, or delivered again), and redeliveries (events.Permits)
    processed: int = 0
    redeliveries: int = 0
    # consumers, counted with facts only (dissector.facts.acks): messages delivered and
    # neither acknowledged nor asked for again (a batch's entries; what a broker counts as
    # its unackedMessages for a Shared or Key_Shared consumer)
    unacked: int = 0


@dataclass(slots=True)
class ConnectionInfo:
    """What the connection said about itself (for the conversations table): its handshake
    (CONNECT, CONNECTED: versions, features), its producers and consumers, and how many auth
    exchanges and keep-alives it made (facts the diagnoses may read)."""

    client_version: str | None = None
    server_version: str | None = None
    client_protocol: int | None = None
    server_protocol: int | None = None
    auth_method: str | None = None
    proxy_to_broker_url: str | None = None
    original_principal: str | None = None
    max_message_size: int | None = None
    feature_flags: list[str] = field(default_factory=list)
    entities: list[Entity] = field(default_factory=list)
    # auth exchanges and keep-alives, counted (their pairs, when made, are timeline rows)
    auth_challenges: int = 0  # the broker's AUTH_CHALLENGE
    auth_responses: int = 0  # the client's AUTH_RESPONSE
    pings: int = 0  # PING, either side
    pongs: int = 0  # PONG, either side

    def supports(self, feature: str) -> bool:
        """Whether the client's CONNECT declared `feature` ("supports_auth_refresh")."""
        return feature in self.feature_flags
