"""What the connections of one pipeline share: its settings, its flow table, TLS keys.

Input: the pipeline's settings (broker and TLS ports, frame bound, what to extract), its TCP
flow table and the TLS key log.
Output: one `Shared` every `connection.Connection` of that pipeline holds, and what they
report back through it: the ports of connections found not to be Pulsar, the connections
whose sides were swapped.
Rule: the pipeline makes it once; a connection reads the settings and tells the flow table
only to ignore it (`Reassembler.ignore`): TCP keys a connection once, and what it says of a
connection whose sides were swapped later is swapped on its way in (`swapped`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dissector.flow.tcp import Reassembler
from dissector.pulsar.messages import MessageExtractor
from dissector.tls.keylog import KeyLog
from dissector.tls.session import WaitingPool


@dataclass
class Shared:
    """What the connections of one pipeline share; see the module docstring."""

    tcp: Reassembler
    broker_ports: frozenset[int]
    tls_ports: frozenset[int]
    max_frame_size: int
    messages: MessageExtractor | None
    pairs: bool
    frame_bytes: bool
    frame_runs: bool
    keylog: KeyLog | None
    tls_waiting: WaitingPool = field(default_factory=WaitingPool)  # of all sessions together
    #: the journeys' facts of deliveries and acks are made (dissector.facts.consumed)
    consumed: bool = False
    #: each producer's and consumer's steps are facts (dissector.facts.lifecycles)
    lifecycles: bool = False
    #: the schema facts are made and follow their frame as events (dissector.facts.schemas)
    schemas: bool = False
    #: TCP connections found not to be Pulsar, by server port (what a user may have meant
    #: with --port when no Pulsar traffic is found).
    other_ports: dict[int, int] = field(default_factory=dict)
    #: Connections whose sides were swapped (`flow.classify.SWAPS`): TCP keeps the roles it
    #: took at their first packet, so the pipeline swaps every TCP event of theirs, those
    #: already made when the swap came included (`flow.sides.swap`). One id per connection
    #: that started without a SYN off the broker ports and whose broker spoke first, until
    #: TCP forgets it (`Reassembler.on_forget`: at most MAX_CLOSED_KEPT closed ones kept).
    swapped: set[int] = field(default_factory=set)
