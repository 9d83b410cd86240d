"""The auth rules on crafted captures, each with near misses that must not fire.

auth.refresh_unsupported: connections of one client whose CONNECT carries a credential and
no supports_auth_refresh, ended by the broker (its FIN first) with no AUTH_CHALLENGE: two of
similar lifetimes, or one at its JWT's expiry. Near misses: refresh offered, one connection
with nothing to compare, the client closing first, lifetimes of different sizes, a broker
that challenged. auth.challenge_unanswered: an AUTH_CHALLENGE never answered before the
broker closed, or answered after auth_wait; near misses: answered in time, the client
leaving at once, a capture ending sooner than auth_wait. Expected values come from the
scenes' own times and packets, never from the dissector's output.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from dissector.diagnose.auth import expiry_us
from dissector.findings import FindingCode as F
from dissector.findings import Thresholds
from tests.support.crafted import B2C, C2B, T0_US, Conn, Msg, Seg, Session, msg
from tests.support.scenes import Scene, findings, ping, pong, us

SECRET = b"opaque-credential-do-not-show"
VERSION = "rs-client-6.3"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def jwt(exp_s: float) -> bytes:
    """A JWT-shaped token whose exp claim is `exp_s` seconds into the scene (the signature
    is a made-up secret: nothing checks it here)."""

    def part(obj: Any) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    exp = (T0_US + round(exp_s * 1e6)) // 1_000_000
    return f"{part({'alg': 'HS256'})}.{part({'sub': 'app', 'exp': exp})}.c2VjcmV0LXNpZw".encode()


def hello(token: bytes = SECRET, *, refresh: bool = False) -> Msg:
    flags = {"supports_broker_entry_metadata": True, "supports_auth_refresh": refresh}
    return msg(
        C2B,
        "CONNECT",
        client_version=VERSION,
        protocol_version=21,
        auth_method_name="token",
        auth_data=token,
        feature_flags=flags,
    )


def open_with(s: Scene, conn: Conn, t: float, m: Msg) -> Msg:
    """Open `conn` at `t` (TCP handshake) with CONNECT `m`, answered CONNECTED."""
    session = s.sessions[conn] = Session(conn)
    s._timed(session.handshake(), t)
    s.at(t, m, conn)
    s.at(t, msg(B2C, "CONNECTED", server_version="broker-4.0", protocol_version=21), conn)
    return m


def close_by(s: Scene, t: float, conn: Conn, first: Any = B2C) -> int:
    """End `conn` at `t`, `first`'s FIN first, then the other's, then the last ACK; the
    first FIN's key for `packet_of_fin`."""
    session = s.sessions[conn]
    segs = []
    for d in (first, C2B if first is B2C else B2C):
        seq = session.seq_at(d, session.sent[d])
        segs.append(Seg(conn, d, seq, session.ack_for(d), "FA", b"", session.sent[d]))
        session.fin[d] = 1
    segs.append(session.ack(first))
    (fin, *_) = s._timed(segs, t)
    return id(fin)


def packet_of_fin(s: Scene, key: int) -> int:
    """The packet number of the FIN `close_by` returned the key of."""
    return next(n for n, seg in enumerate(s._ordered(), 1) if id(seg) == key)


def _us(when: datetime) -> int:
    return (when - EPOCH) // timedelta(microseconds=1)


def _conns(n: int) -> list[Conn]:
    return [Conn(client_ip="10.0.0.5", client_port=41000 + i) for i in range(n)]


def _steady(tmp: Path, lifetimes: list[float], **kw: Any) -> tuple[Scene, Path, list[Any]]:
    """Connections opened 100 s apart, each ended by the broker after its lifetime."""
    s = Scene()
    marks = []
    for i, (conn, life) in enumerate(zip(_conns(len(lifetimes)), lifetimes, strict=True)):
        start = i * 100.0
        connect = open_with(s, conn, start, hello(**kw))
        marks.append((connect, close_by(s, start + life, conn)))
    return s, s.write(tmp / "steady.pcap"), marks


# ----------------------------------------------------------------- refresh unsupported


def test_two_connections_ended_at_one_period_are_a_finding(tmp_path: Path) -> None:
    s, path, marks = _steady(tmp_path, [30.0, 30.6])
    (row,) = findings(path)
    assert row["code"] == F.AUTH_REFRESH_UNSUPPORTED
    assert row["count"] == 2 and row["unit"] == "s"
    assert 30.0 <= row["value"] <= 30.6
    assert row["entity"] == "client 10.0.0.5"
    expected = []
    for connect, fin in marks:
        expected += [s.packet(connect), packet_of_fin(s, fin)]
    assert list(row["evidence"]) == expected
    assert VERSION in row["summary"] and "supports_auth_refresh" in row["summary"]
    assert "'token'" in row["summary"] and "AUTH_CHALLENGE" in row["summary"]
    assert SECRET.decode() not in row["summary"]
    assert _us(row["first_ts"]) == us(0.0) and _us(row["last_ts"]) == us(130.6)


def test_refresh_offered_is_no_finding(tmp_path: Path) -> None:
    _, path, _ = _steady(tmp_path, [30.0, 30.6], refresh=True)
    assert findings(path) == []


def test_one_connection_with_nothing_to_compare_is_no_finding(tmp_path: Path) -> None:
    _, path, _ = _steady(tmp_path, [30.0])
    assert findings(path) == []


def test_lifetimes_of_different_sizes_are_no_period(tmp_path: Path) -> None:
    _, path, _ = _steady(tmp_path, [5.0, 30.0])
    assert findings(path) == []


def test_a_client_that_closes_its_own_connections_is_no_finding(tmp_path: Path) -> None:
    s = Scene()
    for i, conn in enumerate(_conns(3)):
        open_with(s, conn, i * 100.0, hello())
        close_by(s, i * 100.0 + 30.0, conn, first=C2B)
    assert findings(s.write(tmp_path / "c.pcap")) == []


def test_a_broker_that_challenged_is_not_this(tmp_path: Path) -> None:
    s = Scene()
    for i, conn in enumerate(_conns(2)):
        open_with(s, conn, i * 100.0, hello(refresh=True))
        challenge = msg(B2C, "AUTH_CHALLENGE", challenge={"auth_method_name": "token"})
        s.at(i * 100.0 + 29.0, challenge, conn)
        answer = msg(C2B, "AUTH_RESPONSE", response={"auth_method_name": "token"})
        s.at(i * 100.0 + 29.1, answer, conn)
        close_by(s, i * 100.0 + 30.0, conn)
    assert findings(s.write(tmp_path / "c.pcap")) == []


def test_a_broker_ending_connections_whose_pings_go_unanswered_is_not_this(
    tmp_path: Path,
) -> None:
    s = Scene()
    for i, conn in enumerate(_conns(2)):
        open_with(s, conn, i * 100.0, hello())
        s.at(i * 100.0 + 1.0, ping(B2C), conn)  # never answered: the broker ends it
        close_by(s, i * 100.0 + 31.0, conn)
    assert [r["code"] for r in findings(s.write(tmp_path / "c.pcap"))] == [
        F.KEEPALIVE_UNANSWERED,
        F.KEEPALIVE_UNANSWERED,
    ]


def test_one_connection_ended_at_its_tokens_expiry(tmp_path: Path) -> None:
    s = Scene()
    (conn,) = _conns(1)
    token = jwt(20.0)
    connect = open_with(s, conn, 0.0, hello(token))
    fin = close_by(s, 20.5, conn)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert row["code"] == F.AUTH_REFRESH_UNSUPPORTED and row["count"] == 1
    assert abs(row["value"] - 20.5) < 1e-6
    assert list(row["evidence"]) == [s.packet(connect), packet_of_fin(s, fin)]
    assert "expiry" in row["summary"]
    signature = token.rsplit(b".", 1)[1].decode()
    assert signature not in row["summary"] and token.decode() not in row["summary"]


def test_one_connection_ended_long_before_its_tokens_expiry_is_no_finding(
    tmp_path: Path,
) -> None:
    s = Scene()
    (conn,) = _conns(1)
    open_with(s, conn, 0.0, hello(jwt(60.0)))
    close_by(s, 20.5, conn)
    assert findings(s.write(tmp_path / "c.pcap")) == []


# ----------------------------------------------------------------- challenge unanswered


def _challenged(tmp: Path, *, answer_at: float | None, end: float, by: Any = B2C) -> Any:
    s = Scene()
    conn = Conn()
    open_with(s, conn, 0.0, hello(refresh=True))
    challenge = msg(B2C, "AUTH_CHALLENGE", challenge={"auth_method_name": "token"})
    s.at(10.0, challenge, conn)
    answer = None
    if answer_at is not None:
        answer = msg(C2B, "AUTH_RESPONSE", response={"auth_method_name": "token"})
        s.at(answer_at, answer, conn)
    fin = None
    if by is not None:
        fin = close_by(s, end, conn, first=by)
    else:
        s.at(end, ping(), conn).at(end, pong(), conn)  # the capture ends with it open
    path = s.write(tmp / "c.pcap")
    return s, path, challenge, answer, fin


def test_a_challenge_never_answered_before_the_broker_closed(tmp_path: Path) -> None:
    s, path, challenge, _, fin = _challenged(tmp_path, answer_at=None, end=71.0)
    (row,) = findings(path)
    assert row["code"] == F.AUTH_CHALLENGE_UNANSWERED and row["count"] == 1
    assert list(row["evidence"]) == [s.packet(challenge), packet_of_fin(s, fin)]
    assert abs(row["value"] - 61.0) < 1e-6  # challenge at 10 s, the broker's FIN at 71 s
    assert "the broker ended the connection" in row["summary"]


def test_a_challenge_answered_after_auth_wait(tmp_path: Path) -> None:
    s, path, challenge, answer, _ = _challenged(tmp_path, answer_at=75.0, end=80.0, by=C2B)
    (row,) = findings(path)
    assert row["code"] == F.AUTH_CHALLENGE_UNANSWERED and row["count"] == 1
    assert list(row["evidence"]) == [s.packet(challenge), s.packet(answer)]
    assert abs(row["value"] - 65.0) < 1e-6


def test_a_challenge_answered_in_time_is_no_finding(tmp_path: Path) -> None:
    _, path, *_ = _challenged(tmp_path, answer_at=10.5, end=80.0)
    assert findings(path) == []


def test_a_client_leaving_at_once_did_not_ignore_the_challenge(tmp_path: Path) -> None:
    _, path, *_ = _challenged(tmp_path, answer_at=None, end=10.2, by=C2B)
    assert findings(path) == []


def test_a_capture_ending_sooner_than_auth_wait_cannot_tell(tmp_path: Path) -> None:
    _, path, *_ = _challenged(tmp_path, answer_at=None, end=40.0, by=None)
    assert findings(path) == []
    (row,) = findings(path, Thresholds(auth_wait=20.0))  # 30 s unanswered is past 20 s
    assert row["code"] == F.AUTH_CHALLENGE_UNANSWERED and abs(row["value"] - 30.0) < 1e-6


def test_a_credential_is_read_for_its_expiry_only_when_it_is_a_jwt_with_one() -> None:
    assert expiry_us(jwt(20.0)) == (T0_US + 20_000_000) // 1_000_000 * 1_000_000
    b64 = base64.urlsafe_b64encode
    for data in (
        SECRET,
        b"a.b.c",
        b"x." + b64(b"[" * 5000) + b".y",  # nested too deep for JSON
        b"x." + b64(b'{"exp": "soon"}') + b".y",
        b"x." + b64(b'{"exp": true}') + b".y",
        b"x." + b64(b'{"exp": 1e400}') + b".y",
        b"x." + b64(b"\xff\xfe") + b".y",
    ):
        assert expiry_us(data) is None, data
