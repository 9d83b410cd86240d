"""connection.wrong_protocol from the server side: a Pulsar client answered with HTTP or TLS.

Input: crafted captures (tests/support/scenes.py): the client's CONNECT (plaintext Pulsar),
then the server's first bytes: an HTTP response (a proxy or ingress answering, as in
apache/pulsar#14544, where the client read "HTTP" as a frame size of 1213486164 - 4), or a
TLS record (an alert, a ServerHello) on the plain port 6650; near misses: a Pulsar
CONNECTED, an HTTP answer to a client that itself spoke HTTP, a server stream captured from
its middle.
Output: the findings.
Rule: expected values come from the bytes the scene sent (the status line it wrote, the
packet that carried it), never from our output; nothing of the answer beyond its status
line's start is told.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from dissector.findings import FindingCode as F
from dissector.read import read_capture
from tests.support.capture import Tcpdump, wait_closed
from tests.support.crafted import B2C, C2B, Conn, Seg, msg
from tests.support.recorded import QUIET
from tests.support.scenes import Scene, codes, findings

CONNECT = msg(C2B, "CONNECT", client_version="diag-client", protocol_version=21)
STATUS = "HTTP/1.1 400 Bad Request"
ANSWER = f"{STATUS}\r\nContent-Type: text/plain\r\nX-Secret: s3cr3t\r\n\r\nbad request".encode()
TLS_ALERT = bytes.fromhex("15030300020228")  # fatal handshake_failure
SERVER_HELLO = bytes.fromhex("160303002a020000260303") + bytes(32) + bytes.fromhex("00130100")


def _answered(answer: bytes, *, syn_ack: bool = True) -> tuple[Scene, Seg]:
    """The client's handshake and CONNECT at 0 s, the server's `answer` at 0.01 s, FIN at
    1 s; the segment carrying the answer. syn_ack=False: the capture missed the SYN-ACK
    (the server's stream is captured from its middle)."""
    s = Scene()
    conn = s.open(connect=False)
    session = s.sessions[conn]
    shake = session.handshake()
    s._timed([seg for seg in shake if syn_ack or seg.flags != "SA"], 0)
    s.at(0, CONNECT, conn)
    s.raw(0.01, answer, conn, B2C)
    (seg,) = [seg for seg in s.segs if seg.payload == answer]
    s.close(1, conn)
    return s, seg


def _packet(scene: Scene, seg: Seg) -> int:
    return next(n for n, s in enumerate(scene._ordered(), 1) if s is seg)


def test_an_http_answer_to_a_pulsar_client(tmp_path: Path) -> None:
    s, seg = _answered(ANSWER)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert row["code"] == F.CONNECTION_WRONG_PROTOCOL
    assert f"the broker side answers with HTTP ({STATUS!r})" in row["summary"], row["summary"]
    assert "Content-Type" not in row["summary"] and "s3cr3t" not in row["summary"]
    assert row["evidence"] == [_packet(s, seg)]


def test_the_anomaly_names_the_status_line_and_nothing_after_it(tmp_path: Path) -> None:
    """The framing's anomaly on the server's first bytes: their size ("HTTP" read as one)
    and the status line; no header, no body."""
    s, seg = _answered(ANSWER)
    table = read_capture(s.write(tmp_path / "c.pcap"), tables=["anomalies"]).arrow["anomalies"]
    (first, *_) = table.to_pylist()
    assert (first["code"], first["direction"], first["stream_offset"]) == (
        "pulsar.frame_too_large",
        "broker_to_client",
        0,
    )
    size = int.from_bytes(b"HTTP", "big")
    assert first["detail"].startswith(f"totalSize {size} > limit ")
    assert first["detail"].endswith(f"; an HTTP status line: {STATUS!r}")
    assert first["packet"] == _packet(s, seg)


def test_only_the_status_lines_start_is_told(tmp_path: Path) -> None:
    """Python's http.server echoes the request it could not parse in its reason phrase:
    the phrase is cut where it stops being words."""
    echo = b"HTTP/1.0 400 Bad request syntax ('\\x00\\x00\\x00\\x1f')\r\n\r\n"
    s, _ = _answered(echo)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert "('HTTP/1.0 400 Bad request syntax')" in row["summary"], row["summary"]


@pytest.mark.parametrize(
    ("record", "kind"), [(TLS_ALERT, "an alert"), (SERVER_HELLO, "a handshake")]
)
def test_a_tls_answer_on_the_plain_port(tmp_path: Path, record: bytes, kind: str) -> None:
    s, seg = _answered(record)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert row["code"] == F.CONNECTION_WRONG_PROTOCOL and row["broker_port"] == 6650
    assert f"answers with TLS ({kind} record) on a port that is not a TLS port" in row["summary"]
    assert row["evidence"] == [_packet(s, seg)]


def test_bytes_that_are_neither_http_nor_tls_are_not_named(tmp_path: Path) -> None:
    """The server's first byte is TLS's handshake type but no TLS version follows (0x16,
    then 0x00): some other protocol, or garbage; nothing says it is TLS."""
    s, _ = _answered(bytes.fromhex("1600000a") + bytes(16))
    assert codes(s.write(tmp_path / "c.pcap")) == []


def test_a_tls_answer_on_the_tls_port_is_the_clients_fault(tmp_path: Path) -> None:
    """The same CONNECT and TLS alert on the TLS port 6651: the client's plaintext is what
    is wrong there (one row, saying so)."""
    s = Scene()
    conn = s.open(Conn(broker_port=6651), connect=False)
    s._timed(s.sessions[conn].handshake(), 0)
    s.at(0, CONNECT, conn)
    s.raw(0.01, TLS_ALERT, conn, B2C).close(1, conn)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert "its client stream on a TLS port does not open with TLS" in row["summary"]


def test_a_pulsar_answer_is_no_finding(tmp_path: Path) -> None:
    connected = msg(B2C, "CONNECTED", server_version="diag-broker", protocol_version=21)
    s, _ = _answered(connected.data)
    assert codes(s.write(tmp_path / "c.pcap")) == []


def test_a_server_stream_captured_from_its_middle_is_not_judged(tmp_path: Path) -> None:
    """The SYN-ACK is not in the capture: the server's first captured bytes need not be its
    first bytes (the same HTTP answer, the same CONNECT before it)."""
    s, _ = _answered(ANSWER, syn_ack=False)
    assert codes(s.write(tmp_path / "c.pcap")) == []


def test_an_answer_to_a_client_that_said_nothing_is_not_judged(tmp_path: Path) -> None:
    """No CONNECT from the client (a TCP probe, or bytes the capture missed): nothing shows a
    Pulsar client was answered."""
    s = Scene()
    conn = s.open(Conn(), connect=False)
    s._timed(s.sessions[conn].handshake(), 0)
    s.raw(0.01, ANSWER, conn, B2C).close(1, conn)
    assert codes(s.write(tmp_path / "c.pcap")) == []


def test_http_answering_http_is_the_clients_fault(tmp_path: Path) -> None:
    """A client speaking HTTP to the broker port, answered with HTTP: the client's stream is
    the wrong protocol, and the finding says so (one row)."""
    s = Scene()
    conn = s.open(Conn(), connect=False)
    s._timed(s.sessions[conn].handshake(), 0)
    s.raw(0, b"GET /admin/v2/clusters HTTP/1.1\r\nHost: broker\r\n\r\n", conn)
    s.raw(0.01, ANSWER, conn, B2C).close(1, conn)
    (row,) = findings(s.write(tmp_path / "c.pcap"))
    assert "its client stream opens with 'GET '" in row["summary"]


# ------------------------------------------------------------------------------ a real peer


class _Recorded(BaseHTTPRequestHandler):
    """http.server's own answer to what it cannot parse (a Pulsar CONNECT: 400), each status
    line it wrote recorded once its bytes went out (`said`). It answers a request line it
    cannot read with a status line, as front ends do (nginx: "HTTP/1.1 400 Bad Request"),
    not as HTTP/0.9 (a body without one, http.server's default for such a line)."""

    said: ClassVar[list[str]] = []
    default_request_version = "HTTP/1.1"

    def flush_headers(self) -> None:
        buffered = b"".join(getattr(self, "_headers_buffer", []))
        super().flush_headers()  # raises when the client is gone: nothing was written
        if buffered:
            self.said.append(buffered.split(b"\r\n", 1)[0].decode("latin-1"))

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the record is `said`."""


@pytest.mark.peers
@pytest.mark.capture
@pytest.mark.tools
def test_the_python_client_pointed_at_an_http_server(tmp_path: Path) -> None:
    """The official Python client (pulsar-client) given pulsar://127.0.0.1:PORT where a
    web server listens (python's http.server): each connection is its CONNECT, answered
    "HTTP/1.0 400 Bad request syntax (...)" by the server; the client gives up at its
    operation timeout. Each connection the server answered is one finding naming the status
    line it wrote (its start: the reason phrase's words, not the request it echoes)."""
    import pulsar

    _Recorded.said = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorded)
    port = server.server_address[1]
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    path = tmp_path / "http.pcap"
    try:
        with Tcpdump(path, f"tcp port {port}"):  # returns once tcpdump is listening
            client = pulsar.Client(
                f"pulsar://127.0.0.1:{port}", operation_timeout_seconds=2, logger=QUIET
            )
            try:
                with pytest.raises(pulsar.PulsarException):
                    client.create_producer("persistent://public/default/wrong-server")
            finally:
                client.close()
            assert wait_closed(path, (port,), timeout=30.0), "a connection did not end"
    finally:
        server.shutdown()
        server.server_close()
    said = list(_Recorded.said)
    assert said and all(line.startswith("HTTP/1.0 400 ") for line in said), said
    rows = findings(path)
    assert [r["code"] for r in rows] == [F.CONNECTION_WRONG_PROTOCOL] * len(said), rows
    for row, line in zip(rows, said, strict=True):
        start = line.split(" (", 1)[0]  # the reason phrase's words, not the echo after them
        assert f"the broker side answers with HTTP ({start!r})" in row["summary"], row
