"""flow.classify: the connection-mode table checked against the documented rules.

docs/cli.md, "Which connections are Pulsar": those on a broker port (6650, 6651 and every
`--port`), and on any other port those whose client opens with a decodable CONNECT. Port
6651 and connections opening with a TLS ClientHello are reported as encrypted, not decoded
(docs/tls.md: off the broker ports, with a key log, one is Pulsar when its client's first
decrypted frame is CONNECT). A PROXY header before CONNECT is parsed (it is not a mode
change). Which end is the broker: the one on a broker port, else the SYN's receiver, else a
guess that a CONNECT may overturn (docs/cli.md). The expected tables below are written from
those sentences, not read from the module.
"""

from __future__ import annotations

import itertools

import pytest

from dissector.errors import UsageError
from dissector.events import Direction
from dissector.flow.classify import (
    DECODED,
    ENCRYPTED,
    JUDGING,
    REPORTED,
    SWAPS,
    TRANSITIONS,
    Mode,
    Trigger,
    judge,
    judge_decrypted,
    on_open,
    roles,
    transition,
)

C2B, B2C = Direction.CLIENT_TO_BROKER, Direction.BROKER_TO_CLIENT
M, E = Mode, Trigger
BROKER_PORTS = frozenset({6650, 6651, 16650})  # the defaults and one `--port`
TLS_PORTS = frozenset({6651})

#: Every allowed transition, one documented rule each.
EXPECTED: dict[tuple[Mode, Trigger], Mode] = {
    # Opening: 6651 is TLS, a broker port is Pulsar, anything else waits for a CONNECT.
    (M.NEW, E.TLS_PORT): M.TLS,
    (M.NEW, E.BROKER_PORT): M.PULSAR,
    (M.NEW, E.OTHER_PORT): M.PENDING,
    # A TLS ClientHello first: encrypted, whatever the port; off the broker ports the
    # client's first decrypted frame still has to be CONNECT for its frames to count.
    (M.PENDING, E.CLIENT_HELLO): M.TLS_PENDING,
    (M.PULSAR, E.CLIENT_HELLO): M.TLS,
    (M.TLS_PENDING, E.CONNECT): M.TLS,
    (M.TLS_PENDING, E.CLIENT_OTHER): M.TLS_OTHER,
    (M.TLS_PENDING, E.OVER_LIMIT): M.TLS_OTHER,  # the client says nothing decrypted
    # Off the broker ports: a side opening with CONNECT is the client, the connection Pulsar.
    (M.PENDING, E.CONNECT): M.PULSAR,
    (M.PENDING, E.CONNECT_FROM_BROKER): M.PULSAR,
    # One side opening with something else proves nothing yet; both sides doing so does.
    (M.PENDING, E.NOT_CONNECT): M.PENDING,
    (M.PENDING, E.NEITHER_CONNECT): M.IGNORED,
    # Bounds: too much without a frame or too many held events is not Pulsar.
    (M.PENDING, E.OVER_LIMIT): M.IGNORED,
    # The end: undecided is dropped; the others stay what they were.
    (M.PENDING, E.CLOSED): M.IGNORED,
    (M.PULSAR, E.CLOSED): M.PULSAR,
    (M.TLS, E.CLOSED): M.TLS,
    (M.TLS_PENDING, E.CLOSED): M.TLS_PENDING,
    (M.TLS_OTHER, E.CLOSED): M.TLS_OTHER,
    (M.IGNORED, E.CLOSED): M.IGNORED,
}
REFUSED = [pair for pair in itertools.product(Mode, Trigger) if pair not in EXPECTED]


@pytest.mark.parametrize(("mode", "event"), sorted(EXPECTED, key=str))
def test_every_allowed_transition(mode: Mode, event: Trigger) -> None:
    assert transition(mode, event) is EXPECTED[mode, event]


@pytest.mark.parametrize(("mode", "event"), REFUSED, ids=str)
def test_every_other_transition_is_refused(mode: Mode, event: Trigger) -> None:
    with pytest.raises(UsageError, match=f"{mode.value}: {event.value} refused"):
        transition(mode, event)


def test_the_table_is_exactly_the_rules() -> None:
    assert TRANSITIONS == EXPECTED
    assert len(REFUSED) == len(Mode) * len(Trigger) - len(EXPECTED)


def test_final_modes() -> None:
    """Nothing leaves TLS, TLS_OTHER or IGNORED but the end; PULSAR only turns TLS on a
    ClientHello."""
    for mode in (M.TLS, M.TLS_OTHER, M.IGNORED):
        assert {e for (m, e) in EXPECTED if m is mode} == {E.CLOSED}
    assert {e for (m, e) in EXPECTED if m is M.PULSAR} == {E.CLIENT_HELLO, E.CLOSED}
    assert {m for (m, e) in EXPECTED if e is E.CLOSED} == set(Mode) - {M.NEW}


def test_decoded_and_reported() -> None:
    assert {M.PENDING, M.PULSAR} == DECODED  # TLS is not decoded, IGNORED is dropped
    # an undecided or other connection is not reported; TLS is, as encrypted
    assert {M.PULSAR, M.TLS, M.TLS_PENDING, M.TLS_OTHER} == REPORTED
    assert {M.TLS, M.TLS_PENDING, M.TLS_OTHER} == ENCRYPTED
    assert {M.PENDING, M.TLS_PENDING} == JUDGING  # roles or protocol still judged from frames


def test_only_a_connect_from_the_side_taken_for_the_broker_swaps() -> None:
    assert {(M.PENDING, E.CONNECT_FROM_BROKER)} == SWAPS


@pytest.mark.parametrize(
    ("src", "dst", "syn", "ack", "judged"),
    [
        (40000, 6650, False, False, (True, False)),  # to a broker port: the destination
        (6650, 40000, False, False, (False, False)),  # from one: the source
        (6650, 6651, False, False, (True, False)),  # both: the destination's port wins
        (40000, 8080, True, False, (True, False)),  # a SYN: its receiver
        (8080, 40000, True, True, (False, False)),  # a SYN+ACK: its sender
        (40000, 8080, False, False, (True, True)),  # nothing: the destination, guessed
        (8080, 40000, False, True, (True, True)),  # a bare ACK tells nothing either
    ],
)
def test_roles_at_the_first_packet(
    src: int, dst: int, syn: bool, ack: bool, judged: tuple[bool, bool]
) -> None:
    assert roles(src, dst, syn, ack, BROKER_PORTS) == judged


def test_judge_decrypted() -> None:
    assert judge_decrypted(True, True) is E.CONNECT
    assert judge_decrypted(True, False) is E.CLIENT_OTHER
    assert judge_decrypted(False, False) is E.OVER_LIMIT  # MAX_HELD, the client silent


@pytest.mark.parametrize(
    ("port", "guessed", "event"),
    [
        (6650, False, E.BROKER_PORT),
        (16650, False, E.BROKER_PORT),  # a `--port`
        (6651, False, E.TLS_PORT),
        (6651, True, E.TLS_PORT),
        (8080, False, E.OTHER_PORT),
        (8080, True, E.OTHER_PORT),
        (6650, True, E.OTHER_PORT),  # roles unknown: the CONNECT must tell
    ],
)
def test_on_open(port: int, guessed: bool, event: Trigger) -> None:
    assert on_open(port, guessed, BROKER_PORTS, TLS_PORTS) is event


def test_on_open_with_other_ports() -> None:
    assert on_open(6650, False, {7000}, set()) is E.OTHER_PORT
    assert on_open(7000, False, {7000}, set()) is E.BROKER_PORT
    assert on_open(6651, False, {6650, 6651}, set()) is E.BROKER_PORT  # no TLS ports


def test_judge_each_side_once() -> None:
    assert judge(C2B, True, set()) is E.CONNECT
    assert judge(B2C, True, set()) is E.CONNECT_FROM_BROKER
    assert judge(C2B, False, set()) is E.NOT_CONNECT
    assert judge(B2C, False, set()) is E.NOT_CONNECT
    assert judge(B2C, False, {C2B}) is E.NEITHER_CONNECT
    assert judge(C2B, False, {B2C}) is E.NEITHER_CONNECT
    assert judge(B2C, True, {C2B}) is E.CONNECT_FROM_BROKER  # the other side may still
    assert judge(C2B, True, {C2B}) is None  # judged already: a later CONNECT changes nothing
    assert judge(C2B, False, {C2B}) is None


def walk(*events: Trigger) -> Mode:
    mode = M.NEW
    for event in events:
        mode = transition(mode, event)
    return mode


@pytest.mark.parametrize(
    ("events", "final"),
    [
        # CONNECT on port 8080 from the SYN's sender, then both FIN.
        ((E.OTHER_PORT, E.CONNECT, E.CLOSED), M.PULSAR),
        # The first packet seen goes broker->client and carries CONNECT: roles swap.
        ((E.OTHER_PORT, E.CONNECT_FROM_BROKER, E.CLOSED), M.PULSAR),
        # An HTTP exchange on port 8080: request then response, neither a CONNECT.
        ((E.OTHER_PORT, E.NOT_CONNECT, E.NEITHER_CONNECT, E.CLOSED), M.IGNORED),
        # A server that greets first (e.g. SMTP), then the client answers CONNECT.
        ((E.OTHER_PORT, E.NOT_CONNECT, E.CONNECT, E.CLOSED), M.PULSAR),
        ((E.OTHER_PORT, E.CLOSED), M.IGNORED),  # no complete frame before the end
        ((E.OTHER_PORT, E.OVER_LIMIT, E.CLOSED), M.IGNORED),
        ((E.OTHER_PORT, E.CLIENT_HELLO, E.CLOSED), M.TLS_PENDING),  # no key log
        ((E.OTHER_PORT, E.CLIENT_HELLO, E.CONNECT, E.CLOSED), M.TLS),  # decrypted CONNECT
        ((E.OTHER_PORT, E.CLIENT_HELLO, E.CLIENT_OTHER, E.CLOSED), M.TLS_OTHER),  # HTTPS
        ((E.BROKER_PORT, E.CLIENT_HELLO, E.CLOSED), M.TLS),  # TLS on 6650
        ((E.TLS_PORT, E.CLOSED), M.TLS),
        ((E.BROKER_PORT, E.CLOSED), M.PULSAR),
    ],
)
def test_connection_stories(events: tuple[Trigger, ...], final: Mode) -> None:
    assert walk(*events) is final
