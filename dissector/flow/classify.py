"""Which connections are Pulsar, which side is which, and which are TLS: judged in one table.

Input: what is learnt about a connection, as evidence: its first packet (ports, SYN flags),
then `Trigger`s: the port it opened on, what its client stream starts with, what each side's
first decoded (or decrypted) frame is, bounds reached, its end.
Output: which end of its first packet is the broker (`roles`, from the table `ROLES`); its
next `Mode` (`transition`, from the table `TRANSITIONS`), and whether that step swaps its
sides (`SWAPS`). The callers act on the answers (decode, hold, report, drop, decrypt; swap
the sides with `flow.sides.swap`). Pure and sans-IO: no I/O, no state here.
Rules (docs/cli.md, "Which connections are Pulsar"):
- Roles at the first packet (`ROLES`, one row per evidence, in order): a destination on a
  broker port is the broker, else a source on one; else a SYN's receiver, a SYN+ACK's
  sender; else the destination, guessed (`ConnOpened.guessed`: a CONNECT may tell otherwise).
- Every connection starts NEW and is classified when it opens: on a TLS port (6651) it is
  TLS; on a broker port (6650, 6651, every `--port`) with known roles it is PULSAR;
  anywhere else (or when neither a broker port nor a SYN said which side is the broker) it
  is PENDING: decoded, but its events are held back.
- A client stream opening with a TLS ClientHello makes a PULSAR connection TLS and a PENDING
  one TLS_PENDING: reported as encrypted; its bytes go to a TLS session (handshake facts,
  and with a key log decrypted streams: conversation/connection.py), not to the frame
  decoders. Off the broker ports the client's first decrypted frame is judged: CONNECT makes
  it TLS (decrypted frames published), anything else (or MAX_HELD events without a word from
  the client) TLS_OTHER (not Pulsar inside: nothing decrypted is framed). A PROXY header
  (v1 or v2) changes nothing: it is skipped and what follows it decides.
- Each side of a PENDING connection is judged once, on its first decoded event (`judge`):
  a CONNECT makes it PULSAR (if the side taken for the broker sent it, that side is the
  client: the step swaps the sides, `SWAPS`); anything else leaves it PENDING until both
  sides have opened with something else, which makes it IGNORED (another protocol: dropped
  silently).
- A PENDING connection that exceeds a bound (PENDING_LIMIT bytes without a frame, more than
  MAX_HELD held events) is IGNORED; one that ends still PENDING is IGNORED too.
- PULSAR, TLS, TLS_OTHER and IGNORED are final but for CLIENT_HELLO (PULSAR -> TLS); CLOSED
  keeps them. Only PULSAR and the TLS modes are reported (`REPORTED`), the TLS ones as
  encrypted (`ENCRYPTED`); only PENDING and PULSAR ones have their bytes decoded (`DECODED`);
  PENDING and TLS_PENDING ones still judge from frames (`JUDGING`). Any pair missing from the
  table is refused (`UsageError`): the caller has a bug.
"""

from __future__ import annotations

from collections.abc import Collection
from enum import Enum

from dissector.errors import UsageError
from dissector.events import Direction

#: Bytes a connection off the broker ports may send without completing a first frame before
#: it is judged not to be Pulsar (a CONNECT is well under 1 KiB, a few KiB with auth data).
PENDING_LIMIT = 64 << 10

#: Events held for a PENDING connection while its client side is unknown (and for a
#: TLS_PENDING one while its client's first decrypted frame is).
MAX_HELD = 1000


class RoleEvidence(Enum):
    """What the first packet of a connection tells of which end is the broker."""

    DST_BROKER_PORT = "dst_broker_port"  # its destination port is a broker port
    SRC_BROKER_PORT = "src_broker_port"  # its source port is (the broker spoke first)
    SYN = "syn"  # a SYN: the client opens
    SYN_ACK = "syn_ack"  # a SYN+ACK: the broker answers
    NOTHING = "nothing"  # no port, no SYN: a guess


#: evidence -> (the broker is the first packet's destination, the roles are guessed).
ROLES: dict[RoleEvidence, tuple[bool, bool]] = {
    RoleEvidence.DST_BROKER_PORT: (True, False),
    RoleEvidence.SRC_BROKER_PORT: (False, False),
    RoleEvidence.SYN: (True, False),
    RoleEvidence.SYN_ACK: (False, False),
    RoleEvidence.NOTHING: (True, True),
}


def roles(
    src_port: int, dst_port: int, syn: bool, ack: bool, broker_ports: Collection[int]
) -> tuple[bool, bool]:
    """(the broker is the destination, guessed) for a connection's first packet (`ROLES`)."""
    if dst_port in broker_ports:
        evidence = RoleEvidence.DST_BROKER_PORT
    elif src_port in broker_ports:
        evidence = RoleEvidence.SRC_BROKER_PORT
    elif syn:
        evidence = RoleEvidence.SYN_ACK if ack else RoleEvidence.SYN
    else:
        evidence = RoleEvidence.NOTHING
    return ROLES[evidence]


class Mode(Enum):
    NEW = "new"  # opened, not classified yet
    PENDING = "pending"  # off the broker ports: decoded, events held until a side says CONNECT
    PULSAR = "pulsar"  # decoded and reported
    TLS = "tls"  # reported as encrypted; decrypted only with a key log (conversation/connection.py)
    TLS_PENDING = "tls_pending"  # TLS off the broker ports: decrypted frames held until judged
    TLS_OTHER = "tls_other"  # TLS whose decrypted client did not open with CONNECT: not framed
    IGNORED = "ignored"  # not Pulsar: tracked by TCP, nothing reported


class Trigger(Enum):
    """What is learnt about a connection: the input of a transition."""

    TLS_PORT = "tls_port"  # opened on a TLS port
    BROKER_PORT = "broker_port"  # opened on a broker port, client and broker known
    OTHER_PORT = "other_port"  # opened elsewhere, or which side is the broker was guessed
    CLIENT_HELLO = "client_hello"  # the client stream starts with a TLS ClientHello
    CONNECT = "connect"  # the client side's first (decrypted) frame is CONNECT
    CONNECT_FROM_BROKER = "connect_from_broker"  # the broker side's first frame is: swap roles
    NOT_CONNECT = "not_connect"  # one side opened with something else, the other not yet
    NEITHER_CONNECT = "neither_connect"  # both sides opened with something else
    CLIENT_OTHER = "client_other"  # the client's first decrypted event is not CONNECT
    OVER_LIMIT = "over_limit"  # PENDING_LIMIT or MAX_HELD exceeded
    CLOSED = "closed"  # the connection ended


M, E = Mode, Trigger

#: (mode, event) -> next mode. A pair that is not here is refused.
TRANSITIONS: dict[tuple[Mode, Trigger], Mode] = {
    (M.NEW, E.TLS_PORT): M.TLS,
    (M.NEW, E.BROKER_PORT): M.PULSAR,
    (M.NEW, E.OTHER_PORT): M.PENDING,
    (M.PENDING, E.CLIENT_HELLO): M.TLS_PENDING,
    (M.PENDING, E.CONNECT): M.PULSAR,
    (M.PENDING, E.CONNECT_FROM_BROKER): M.PULSAR,
    (M.PENDING, E.NOT_CONNECT): M.PENDING,
    (M.PENDING, E.NEITHER_CONNECT): M.IGNORED,
    (M.PENDING, E.OVER_LIMIT): M.IGNORED,
    (M.PENDING, E.CLOSED): M.IGNORED,
    (M.PULSAR, E.CLIENT_HELLO): M.TLS,
    (M.PULSAR, E.CLOSED): M.PULSAR,
    (M.TLS_PENDING, E.CONNECT): M.TLS,
    (M.TLS_PENDING, E.CLIENT_OTHER): M.TLS_OTHER,
    (M.TLS_PENDING, E.OVER_LIMIT): M.TLS_OTHER,
    (M.TLS_PENDING, E.CLOSED): M.TLS_PENDING,
    (M.TLS, E.CLOSED): M.TLS,
    (M.TLS_OTHER, E.CLOSED): M.TLS_OTHER,
    (M.IGNORED, E.CLOSED): M.IGNORED,
}

#: The steps that also judge the roles: the side taken for the broker is the client, the
#: connection's sides swap (`flow.sides.swap`).
SWAPS = frozenset({(M.PENDING, E.CONNECT_FROM_BROKER)})

#: Modes whose stream bytes are handed to the frame decoders.
DECODED = frozenset({M.PENDING, M.PULSAR})
#: Modes whose connection is reported (ConversationOpened, Conversation).
REPORTED = frozenset({M.PULSAR, M.TLS, M.TLS_PENDING, M.TLS_OTHER})
#: Modes reported as encrypted.
ENCRYPTED = frozenset({M.TLS, M.TLS_PENDING, M.TLS_OTHER})
#: Modes still judged from their frames (no frame runs: every frame is looked at).
JUDGING = frozenset({M.PENDING, M.TLS_PENDING})


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


def judge_decrypted(client_spoke: bool, connect: bool) -> Trigger:
    """The event a TLS_PENDING connection gives when its client's first decrypted event came
    (`client_spoke`), or MAX_HELD events came without one; connect: that event (else the
    first held) is a CONNECT frame."""
    if connect:
        return E.CONNECT
    return E.CLIENT_OTHER if client_spoke else E.OVER_LIMIT
