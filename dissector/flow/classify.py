"""Which connections are Pulsar: one connection's mode as a state machine, in one table.

Input: what is learnt about a connection, as `Trigger`s: the port it opened on, what its client
stream starts with, what each side's first decoded frame is, bounds reached, its end.
Output: its next `Mode` (`transition`), from the table `TRANSITIONS`; the caller acts on it
(decode, hold, report, or drop the connection). Pure and sans-IO: no I/O, no state here.
Rules (docs/cli.md, "Which connections are Pulsar"):
- Every connection starts NEW and is classified when it opens: on a TLS port (6651) it is
  TLS; on a broker port (6650, 6651, every `--port`) with known roles it is PULSAR;
  anywhere else (or when neither a broker port nor a SYN said which side is the broker) it
  is PENDING: decoded, but its events are held back.
- A client stream opening with a TLS ClientHello makes a PENDING or PULSAR connection TLS:
  reported as encrypted; its bytes go to a TLS session (handshake facts, and with a key log
  decrypted streams: conversation/connection.py), not to the frame decoders. A PROXY header
  (v1 or v2) changes nothing: it is skipped and what follows it decides.
- Each side of a PENDING connection is judged once, on its first decoded event (`judge`):
  a CONNECT makes it PULSAR (if the side taken for the broker sent it, that side is the
  client: the roles swap); anything else leaves it PENDING until both sides have opened with
  something else, which makes it IGNORED (another protocol: dropped silently).
- A PENDING connection that exceeds a bound (PENDING_LIMIT bytes without a frame, more than
  MAX_HELD held events) is IGNORED; one that ends still PENDING is IGNORED too.
- PULSAR, TLS and IGNORED are final but for CLIENT_HELLO (PULSAR -> TLS); CLOSED keeps them.
  Only PULSAR and TLS connections are reported (`REPORTED`); only PENDING and PULSAR ones
  have their bytes decoded (`DECODED`). Any pair missing from the table is refused
  (`UsageError`): the caller has a bug.
"""

from __future__ import annotations

from collections.abc import Collection
from enum import Enum

from dissector.errors import UsageError
from dissector.events import Direction

#: Bytes a connection off the broker ports may send without completing a first frame before
#: it is judged not to be Pulsar (a CONNECT is well under 1 KiB, a few KiB with auth data).
PENDING_LIMIT = 64 << 10

#: Events held for a PENDING connection while its client side is unknown.
MAX_HELD = 1000


class Mode(Enum):
    NEW = "new"  # opened, not classified yet
    PENDING = "pending"  # off the broker ports: decoded, events held until a side says CONNECT
    PULSAR = "pulsar"  # decoded and reported
    TLS = "tls"  # reported as encrypted; decrypted only with a key log (conversation/connection.py)
    IGNORED = "ignored"  # not Pulsar: tracked by TCP, nothing reported


class Trigger(Enum):
    """What is learnt about a connection: the input of a transition."""

    TLS_PORT = "tls_port"  # opened on a TLS port
    BROKER_PORT = "broker_port"  # opened on a broker port, client and broker known
    OTHER_PORT = "other_port"  # opened elsewhere, or which side is the broker was guessed
    CLIENT_HELLO = "client_hello"  # the client stream starts with a TLS ClientHello
    CONNECT = "connect"  # the client side's first frame is CONNECT
    CONNECT_FROM_BROKER = "connect_from_broker"  # the broker side's first frame is: swap roles
    NOT_CONNECT = "not_connect"  # one side opened with something else, the other not yet
    NEITHER_CONNECT = "neither_connect"  # both sides opened with something else
    OVER_LIMIT = "over_limit"  # PENDING_LIMIT or MAX_HELD exceeded
    CLOSED = "closed"  # the connection ended


M, E = Mode, Trigger

#: (mode, event) -> next mode. A pair that is not here is refused.
TRANSITIONS: dict[tuple[Mode, Trigger], Mode] = {
    (M.NEW, E.TLS_PORT): M.TLS,
    (M.NEW, E.BROKER_PORT): M.PULSAR,
    (M.NEW, E.OTHER_PORT): M.PENDING,
    (M.PENDING, E.CLIENT_HELLO): M.TLS,
    (M.PENDING, E.CONNECT): M.PULSAR,
    (M.PENDING, E.CONNECT_FROM_BROKER): M.PULSAR,
    (M.PENDING, E.NOT_CONNECT): M.PENDING,
    (M.PENDING, E.NEITHER_CONNECT): M.IGNORED,
    (M.PENDING, E.OVER_LIMIT): M.IGNORED,
    (M.PENDING, E.CLOSED): M.IGNORED,
    (M.PULSAR, E.CLIENT_HELLO): M.TLS,
    (M.PULSAR, E.CLOSED): M.PULSAR,
    (M.TLS, E.CLOSED): M.TLS,
    (M.IGNORED, E.CLOSED): M.IGNORED,
}

#: Modes whose stream bytes are handed to the frame decoders.
DECODED = frozenset({M.PENDING, M.PULSAR})
#: Modes whose connection is reported (ConversationOpened, Conversation).
REPORTED = frozenset({M.PULSAR, M.TLS})


def transition(mode: Mode, event: Trigger) -> Mode:
    """The mode after `event`; `UsageError` if the table refuses the pair."""
    try:
        return TRANSITIONS[mode, event]
    except KeyError:
        raise UsageError(f"connection mode {mode.value}: {event.value} refused") from None


def on_open(
    broker_port: int, guessed: bool, broker_ports: Collection[int], tls_ports: Collection[int]
) -> Trigger:
    """The event a new connection gives: `broker_port` is the port of the side taken for the
    broker, `guessed` says neither a broker port nor a SYN told which side that is."""
    if broker_port in tls_ports:
        return E.TLS_PORT
    if broker_port in broker_ports and not guessed:
        return E.BROKER_PORT
    return E.OTHER_PORT


def judge(direction: Direction, connect: bool, judged: Collection[Direction]) -> Trigger | None:
    """The event a PENDING connection's side gives with its first decoded event.

    connect: that event is a CONNECT frame; judged: the sides judged before (each opened with
    something else). None when `direction` was judged already: it is judged only once.
    """
    if direction in judged:
        return None
    if connect:
        return E.CONNECT if direction is Direction.CLIENT_TO_BROKER else E.CONNECT_FROM_BROKER
    return E.NEITHER_CONNECT if judged else E.NOT_CONNECT
