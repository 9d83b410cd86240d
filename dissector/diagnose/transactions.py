"""Transaction rules: the coordinator not found, a transaction in the wrong state, one left
open past its timeout.

Input (from the engine): the handshake facts (`Handshake`: the client's protocol version),
the completion facts of transaction requests (`Pair` by request_id: TC_CLIENT_CONNECT_REQUEST,
NEW_TXN, ADD_PARTITION_TO_TXN, ADD_SUBSCRIPTION_TO_TXN, END_TXN, END_TXN_ON_PARTITION,
END_TXN_ON_SUBSCRIPTION, answered, failed or never answered; their answers' `error`
(ServerError) is the fact's error_code, as facts.pairs reads it), each connection's end, then
`finish`.
Output: per connection when it ends, `txn.coordinator_not_found` and `txn.invalid_status`;
at the capture's end, `txn.timeout` per connection that opened the transactions.
Rules:
- coordinator_not_found: a transaction request answered TransactionCoordinatorNotFound; the
  row says whether the connection sent TC_CLIENT_CONNECT_REQUEST before it (a client on
  protocol 19 or later should: the broker then finds the coordinator) and whether the
  latest was refused, when the connection was captured whole (else: unknown).
- invalid_status: a transaction request answered InvalidTxnStatus or TransactionNotFound;
  the row names the request and the transaction (most and least bits).
- timeout: a transaction opened (NEW_TXN answered with its txnid) is due by the
  NEW_TXN_RESPONSE's time plus the NEW_TXN's txn_ttl_millis (txn_timeout when it names
  none). An END_TXN for it sent after that is a timeout (its answer, InvalidTxnStatus as a
  rule, part of the evidence); one sent before it settles the transaction (whatever its
  answer says, the rule above tells). A transaction no END_TXN named is a timeout when the
  capture went on past its due time and the connection that opened it lost no bytes (an
  END_TXN may be on any connection: transactions are keyed by their txnid alone).
- Bounds: open transactions up to MAX_KEYS (`bounded`: the oldest forgotten); per connection,
  the transactions named in a row up to MAX_NAMED (the count says all).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from dissector.diagnose.state import ConnState, Context, Evidence, bounded, finding
from dissector.events import Frame, Handshake, Outcome, Pair
from dissector.findings import FindingCode
from dissector.pulsar.wire import COMMAND_NAMES, COMMAND_TYPES, SINGULAR_FIELDS

T = COMMAND_TYPES
_TC_CONNECT, _NEW_TXN, _END_TXN = T["TC_CLIENT_CONNECT_REQUEST"], T["NEW_TXN"], T["END_TXN"]
_CONNECT = T["CONNECT"]
#: The transaction requests (client or broker to the coordinator, coordinator to a topic).
REQUESTS = frozenset(
    T[n]
    for n in (
        "TC_CLIENT_CONNECT_REQUEST",
        "NEW_TXN",
        "ADD_PARTITION_TO_TXN",
        "ADD_SUBSCRIPTION_TO_TXN",
        "END_TXN",
        "END_TXN_ON_PARTITION",
        "END_TXN_ON_SUBSCRIPTION",
    )
)
NOT_FOUND = "TransactionCoordinatorNotFound"
INVALID = frozenset({"InvalidTxnStatus", "TransactionNotFound"})
#: The protocol version from which clients connect to the coordinator first (TC_CLIENT_CONNECT).
TC_CONNECT_PROTOCOL = 19
#: Transactions named in one row's summary.
MAX_NAMED = 3
_NO_FIELDS: frozenset[str] = frozenset()


def is_txn_pair(pair: Pair) -> bool:
    """Whether a request_id completion fact is a transaction request's."""
    request = pair.request
    return request is not None and request.command_type in REQUESTS


def txnid(*frames: Frame | None) -> tuple[int, int] | None:
    """(most bits, least bits) the first of `frames` naming a transaction says; None: none."""
    for frame in frames:
        if frame is None or frame.body is None:
            continue
        fields = SINGULAR_FIELDS.get(frame.command_type, _NO_FIELDS)
        if "txnid_least_bits" in fields:
            body: Any = frame.body
            return body.txnid_most_bits, body.txnid_least_bits
    return None


def _name_of(ctype: int) -> str:
    return COMMAND_NAMES.get(ctype, str(ctype))


def _name(frame: Frame) -> str:
    return _name_of(frame.command_type)


def _txn(ident: tuple[int, int] | None) -> str:
    return "txn ?" if ident is None else f"txn ({ident[0]}, {ident[1]})"


@dataclass(slots=True)
class TxnConn:
    """One connection's transaction requests."""

    protocol: int | None = None  # the CONNECT's protocol_version
    tc_connect: bool = False  # a TC_CLIENT_CONNECT_REQUEST sent so far
    tc_refused: str | None = None  # the latest one's error, when refused (None: accepted)
    #: a refusal that came after a refused TC_CLIENT_CONNECT_REQUEST: that one's error
    not_found_after: str | None = None
    not_found: Evidence = field(default_factory=Evidence)
    not_found_names: Counter[str] = field(default_factory=Counter)
    not_found_unconnected: int = 0  # of them, sent with no TC_CLIENT_CONNECT_REQUEST before
    invalid: Evidence = field(default_factory=Evidence)
    invalid_codes: Counter[str] = field(default_factory=Counter)
    invalid_named: list[str] = field(default_factory=list)  # "END_TXN txn (1, 5)", the first


class OpenTxn(NamedTuple):
    """A transaction the capture saw opened, waiting for its END_TXN."""

    conn: ConnState
    request: Frame  # NEW_TXN
    response: Frame  # its NEW_TXN_RESPONSE
    ttl: int  # µs
    due: int  # µs: the response's time plus ttl
    ident: tuple[int, int]


class Late(NamedTuple):
    """A transaction not ended by its due time."""

    opened: OpenTxn
    end: Frame | None  # its END_TXN, sent late; None: none before the capture ended
    answer: Frame | None
    error: str | None
    open_for: int  # µs from NEW_TXN_RESPONSE to the END_TXN or the capture's end


class Transactions:
    """The transaction rules' state for one capture (see the module docstring)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.conns: dict[int, TxnConn] = {}
        self.open: dict[tuple[int, int], OpenTxn] = {}
        self.late: dict[int, list[Late]] = {}  # conn_id of the NEW_TXN -> its late ones

    def _state(self, conn: ConnState) -> TxnConn:
        state = self.conns.get(conn.conn_id)
        if state is None:
            state = self.conns[conn.conn_id] = TxnConn()
        return state

    def on_handshake(self, conn: ConnState, fact: Handshake) -> None:
        if fact.frame.command_type == _CONNECT:
            self._state(conn).protocol = fact.info.client_protocol

    def on_pair(self, conn: ConnState, pair: Pair) -> None:
        request = pair.request
        assert request is not None
        ctype = request.command_type
        state = self._state(conn)
        code = pair.error_code
        if code == NOT_FOUND:
            state.not_found.add(request)
            if pair.response is not None:
                state.not_found.add(pair.response)
            state.not_found_names[_name(request)] += 1
            state.not_found_unconnected += ctype != _TC_CONNECT and not state.tc_connect
            if ctype != _TC_CONNECT and state.tc_refused:
                state.not_found_after = state.tc_refused
        elif code in INVALID:
            assert code is not None
            state.invalid.add(request)
            if pair.response is not None:
                state.invalid.add(pair.response)
            state.invalid_codes[code] += 1
            if len(state.invalid_named) < MAX_NAMED:
                ident = txnid(request, pair.response)
                state.invalid_named.append(f"{_name(request)} {_txn(ident)} ({code})")
        if ctype == _TC_CONNECT:
            state.tc_connect = True
            state.tc_refused = code if pair.outcome is Outcome.ERROR else None
        elif ctype == _NEW_TXN and pair.outcome is Outcome.SUCCESS:
            self._opened(conn, pair)
        elif ctype == _END_TXN:
            self._ended(pair)

    def _opened(self, conn: ConnState, pair: Pair) -> None:
        request, response = pair.request, pair.response
        assert request is not None and response is not None
        ident = txnid(response)
        if ident is None:
            return
        body: Any = request.body
        ms = body.txn_ttl_millis if body.HasField("txn_ttl_millis") else 0
        ttl = ms * 1000 if ms > 0 else self.ctx.us["txn_timeout"]
        opened = OpenTxn(conn, request, response, ttl, response.last_ts + ttl, ident)
        bounded(self.open, ident, lambda: opened)

    def _ended(self, pair: Pair) -> None:
        request = pair.request
        assert request is not None
        ident = txnid(request)
        opened = None if ident is None else self.open.pop(ident, None)
        if opened is None or request.last_ts <= opened.due:
            return  # not seen opened, or ended in time
        late = Late(
            opened,
            request,
            pair.response,
            pair.error_code,
            request.last_ts - opened.response.last_ts,
        )
        bounded(self.late, opened.conn.conn_id, list).append(late)

    def ended(self, conn: ConnState) -> None:
        """The connection ended: its refusals told."""
        state = self.conns.pop(conn.conn_id, None)
        if state is not None:
            self._tell(conn, state)

    def finish(self, conns: list[ConnState]) -> None:
        """The capture ended (`conns`: those still open): what is still open is judged."""
        for conn in conns:
            self.ended(conn)
        now = self.ctx.now
        for opened in self.open.values():
            if now > opened.due and opened.conn.intact:
                late = Late(opened, None, None, None, now - opened.response.last_ts)
                bounded(self.late, opened.conn.conn_id, list).append(late)
        for lates in self.late.values():
            self._timeout(lates)
        self.open.clear()
        self.late.clear()
        self.conns.clear()

    def _tell(self, conn: ConnState, state: TxnConn) -> None:
        ctx = self.ctx
        if state.not_found:
            n = sum(state.not_found_names.values())
            names = ", ".join(f"{k} x{v}" for k, v in state.not_found_names.items())
            if set(state.not_found_names) == {_name_of(_TC_CONNECT)}:
                before = "the coordinator was not found for TC_CLIENT_CONNECT_REQUEST itself"
            elif not conn.whole:
                before = "whether TC_CLIENT_CONNECT_REQUEST came before is unknown (the "
                before += "capture missed the connection's start)"
            elif state.not_found_unconnected == 0:
                before = "the connection had sent TC_CLIENT_CONNECT_REQUEST before"
                if state.not_found_after:
                    before += f", which was refused ({state.not_found_after})"
            else:
                protocol = state.protocol
                before = (
                    f"{state.not_found_unconnected} of them with no TC_CLIENT_CONNECT_REQUEST "
                    "before on the connection"
                )
                if protocol is not None and protocol >= TC_CONNECT_PROTOCOL:
                    before += f" (protocol {protocol}: the client should have sent it first)"
            ctx.emit(
                finding(
                    FindingCode.TXN_COORDINATOR_NOT_FOUND,
                    state.not_found,
                    conn=conn,
                    summary=f"{n} transaction request{'s' if n > 1 else ''} answered "
                    f"{NOT_FOUND} ({names}); {before}",
                    count=n,
                )
            )
        if state.invalid:
            n = sum(state.invalid_codes.values())
            codes = ", ".join(f"{k} x{v}" for k, v in state.invalid_codes.items())
            more = f" and {n - len(state.invalid_named)} more" if n > MAX_NAMED else ""
            ctx.emit(
                finding(
                    FindingCode.TXN_INVALID_STATUS,
                    state.invalid,
                    conn=conn,
                    summary=f"{n} transaction request{'s' if n > 1 else ''} refused ({codes}): "
                    + "; ".join(state.invalid_named)
                    + more,
                    count=n,
                )
            )

    def _timeout(self, lates: list[Late]) -> None:
        evidence = Evidence()
        told: list[str] = []
        for late in sorted(lates, key=lambda x: x.opened.response.last_ts):
            opened = late.opened
            evidence.add_at(opened.request.last_packet, opened.request.last_ts, 0)
            evidence.add(opened.response)
            if late.end is not None:
                evidence.add_at(late.end.last_packet, late.end.last_ts, 0)
            if late.answer is not None:
                evidence.add_at(late.answer.last_packet, late.answer.last_ts, 0)
            if len(told) < MAX_NAMED:
                told.append(_late(late))
        n = len(lates)
        more = f"; and {n - len(told)} more" if n > len(told) else ""
        longest = max(late.open_for for late in lates)
        self.ctx.emit(
            finding(
                FindingCode.TXN_TIMEOUT,
                evidence,
                conn=lates[0].opened.conn,
                summary=f"{n} transaction{'s' if n > 1 else ''} not ended within "
                f"{'its' if n == 1 else 'their'} timeout: " + "; ".join(told) + more,
                value=round(longest / 1e6, 3),
                unit="s",
                count=n,
            )
        )


def _late(late: Late) -> str:
    opened = late.opened
    head = f"{_txn(opened.ident)} (timeout {opened.ttl / 1e6:g} s)"
    if late.end is None:
        return f"{head} still open at the capture's end, {late.open_for / 1e6:.1f} s after NEW_TXN"
    answer = f", answered {late.error}" if late.error else ""
    if late.answer is None:
        answer = ", never answered"
    return f"{head} ended by END_TXN {late.open_for / 1e6:.1f} s after NEW_TXN{answer}"
