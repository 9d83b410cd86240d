"""Pulsar over TLS with real peers: the official client, a TLS terminator, a broker
(pulsar-lite, or Apache's own behind the terminator on its plaintext port: the `peer`
fixture, every test against each).

The client connects to ``pulsar+ssl://localhost:PORT`` trusting a CA generated here; the
terminator (Python's ``ssl``, writing an NSS key log) forwards plaintext to the broker; the
client produces and consumes batched LZ4 and ZLIB messages; tcpdump captures the TLS leg
on ``lo`` (tests/support/tls_capture.py).  Expected values come from elsewhere than the
dissector: the client's own record (payload hashes), what the terminator's ``ssl`` objects
reported (version, cipher, SNI) and forwarded (the plaintext), the certificate as it was
built, and tshark decrypting the same capture with the same key log.  One recording per
TLS version and peer, shared by the module.
"""

from __future__ import annotations

import base64
import json
import ssl
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from dissector.read import Capture, read_capture
from tests.support.cli import cli
from tests.support.live import Live, require_capture
from tests.support.peers import free_port
from tests.support.recorded import PEERS, Peer, peer_of
from tests.support.samples import identity, rows
from tests.support.tls_capture import (
    TlsRecording,
    parse_keylog,
    record_tls,
    tshark_shown,
    tshark_tls_streams,
)
from tests.support.tls_pki import ORGANIZATION

# Every test reads the recordings (pulsar-lite, pulsar-client, tcpdump), some through the
# `recording` fixture's getfixturevalue, which the automatic marking cannot follow.
pytestmark = [pytest.mark.peers, pytest.mark.capture, pytest.mark.tools]

# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module", params=PEERS)
def peer(request: pytest.FixtureRequest) -> Peer:
    """The broker behind the terminator: a pulsar-lite per recording, or the session's
    Apache broker (its plaintext port)."""
    return peer_of(request)


@pytest.fixture(scope="module")
def tls13(tmp_path_factory: pytest.TempPathFactory, peer: Peer) -> TlsRecording:
    return record_tls(tmp_path_factory.mktemp("tls13"), broker=peer.broker)


@pytest.fixture(scope="module")
def tls12(tmp_path_factory: pytest.TempPathFactory, peer: Peer) -> TlsRecording:
    return record_tls(
        tmp_path_factory.mktemp("tls12"), maximum_version=ssl.TLSVersion.TLSv1_2, broker=peer.broker
    )


#: TLS 1.2 suites forced at the terminator (OpenSSL name -> IANA name, RFC 7905 / RFC 5289);
#: the CBC one also negotiates encrypt_then_mac (RFC 7366) when the client offers it.
FORCED_SUITES = {
    "ECDHE-RSA-CHACHA20-POLY1305": "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    "ECDHE-RSA-AES128-SHA256": "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
}


@pytest.fixture(scope="module", params=sorted(FORCED_SUITES))
def tls12_suite(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, peer: Peer
) -> TlsRecording:
    return record_tls(
        tmp_path_factory.mktemp("tls12-suite"),
        maximum_version=ssl.TLSVersion.TLSv1_2,
        ciphers=request.param,
        broker=peer.broker,
    )


@pytest.fixture(params=["tls13", "tls12"])
def recording(request: pytest.FixtureRequest, peer: Peer) -> TlsRecording:
    rec: TlsRecording = request.getfixturevalue(request.param)
    return rec


def version_name(rec: TlsRecording) -> str:
    """The version the terminator was set to speak, as ``ssl`` names it."""
    return "TLSv1.2" if rec.maximum_version == ssl.TLSVersion.TLSv1_2 else "TLSv1.3"


_read: dict[tuple[Path, Path | None], Capture] = {}


def tables(rec: TlsRecording, keylog: Path | None) -> Capture:
    """The dissector's tables of ``rec``'s capture (TLS on the terminator's port) read
    with ``keylog``; once per pair (the module's tests share them)."""
    key = (rec.capture, keylog)
    if key not in _read:
        kw: dict[str, Any] = {} if keylog is None else {"tls_keylog": [keylog]}
        _read[key] = read_capture(rec.capture, ports=[rec.port], tls_ports=[rec.port], **kw)
    return _read[key]


def tls_conversations(cap: Capture, rec: TlsRecording) -> pd.DataFrame:
    convs = cap.conversations
    return convs[convs["broker_port"] == rec.port]


def secrets_of(rec: TlsRecording) -> list[bytes]:
    """Every secret of the key log (not the client randoms, which are sent in clear)."""
    return [
        bytes.fromhex(secret)
        for entries in parse_keylog(rec.keylog).values()
        for _, secret in entries
    ]


# --------------------------------------------------------------------------- the harness

KEYLOG_LABELS = {
    "TLSv1.3": {
        "CLIENT_HANDSHAKE_TRAFFIC_SECRET",
        "SERVER_HANDSHAKE_TRAFFIC_SECRET",
        "CLIENT_TRAFFIC_SECRET_0",
        "SERVER_TRAFFIC_SECRET_0",
        "EXPORTER_SECRET",
    },
    "TLSv1.2": {"CLIENT_RANDOM"},
}


def test_tshark_decrypts_what_the_terminator_forwarded(recording: TlsRecording) -> None:
    """The capture and key log are sound, independently of the dissector."""
    rec = recording
    version = version_name(rec)
    assert {s.version for s in rec.sessions} == {version}
    assert {s.sni for s in rec.sessions} == {"localhost"}
    assert set(parse_keylog(rec.keylog)) == KEYLOG_LABELS[version]
    decrypted = tshark_tls_streams(rec.capture, rec.keylog, rec.port)
    assert len(decrypted) == len(rec.connections) == len(rec.manifest["runs"]) == 2
    for (c2b, b2c), conn in zip(decrypted.values(), rec.connections, strict=True):
        assert c2b == conn.client_to_broker and len(c2b) > 0
        assert b2c == conn.broker_to_client and len(b2c) > 0
    # Without the key log tshark sees no plaintext at all.
    blind = tshark_tls_streams(rec.capture, None, rec.port)
    assert all(c2b == b2c == b"" for c2b, b2c in blind.values())


# --------------------------------------------------------------------------- with the key log


def check_messages(msgs: pd.DataFrame, manifest: dict[str, Any]) -> None:
    """The decrypted SEND and MESSAGE payloads (a messages table) are what the client
    sent and received."""
    produced = msgs[msgs["kind"] == "produced"]
    assert produced["complete"].all()
    expected = [
        identity(s["sha256"], s["size"], s["key"], s["properties"]) for s in manifest["sent"]
    ]
    assert len(expected) == 24
    assert Counter(rows(produced)) == Counter(expected)
    assert set(produced["compression"]) == {"LZ4", "ZLIB"}
    assert (produced["batch_size"] > 1).any()  # batches really were sent
    delivered = msgs[msgs["kind"] == "delivered"]
    assert delivered["complete"].all()
    got = Counter(rows(delivered))
    wanted = Counter(
        identity(r["sha256"], r["size"], r["key"], r["properties"]) for r in manifest["received"]
    )
    assert wanted and not wanted - got
    assert set(got) <= set(expected)


def check_decrypted_streams(cap: Capture, rec: TlsRecording) -> None:
    """Each direction's frames tile exactly the plaintext the terminator forwarded."""
    convs = tls_conversations(cap, rec)
    assert len(convs) == len(rec.connections)
    assert convs["tls_decrypted"].all()
    frames = cap.frames
    for conn in rec.connections:
        (conv,) = convs[convs["client_port"] == conn.client_port].itertuples()
        mine = frames[frames["conn_id"] == conv.conn_id]
        for direction, plain in (
            ("client_to_broker", conn.client_to_broker),
            ("broker_to_client", conn.broker_to_client),
        ):
            side = mine[mine["direction"] == direction].sort_values("stream_offset")
            sizes = side["frame_size"].tolist()
            assert sum(sizes) == len(plain)
            assert side["stream_offset"].tolist() == [sum(sizes[:n]) for n in range(len(sizes))]
            if direction == "client_to_broker":
                assert side["command"].iloc[0] == "CONNECT"
    commands = set(frames[frames["conn_id"].isin(convs["conn_id"])]["command"])
    assert {"CONNECT", "CONNECTED", "LOOKUP", "SEND", "MESSAGE", "ACK"} <= commands
    assert not cap.anomalies["code"].isin(["tls.no_key"]).any()


def test_tls13_with_key_log_gives_the_clients_messages(tls13: TlsRecording) -> None:
    cap = tables(tls13, tls13.keylog)
    check_messages(cap.messages, tls13.manifest)
    check_decrypted_streams(cap, tls13)
    assert set(tls_conversations(cap, tls13)["tls_version"]) == {"TLS 1.3"}


def test_tls12_with_key_log_gives_the_clients_messages(tls12: TlsRecording) -> None:
    cap = tables(tls12, tls12.keylog)
    check_messages(cap.messages, tls12.manifest)
    check_decrypted_streams(cap, tls12)
    convs = tls_conversations(cap, tls12)
    assert set(convs["tls_version"]) == {"TLS 1.2"}
    check_certificate(convs, tls12)


def test_tls12_other_suites_with_key_log_give_the_clients_messages(
    tls12_suite: TlsRecording,
) -> None:
    """ChaCha20-Poly1305 and AES-CBC (HMAC-SHA256), forced at the terminator."""
    rec = tls12_suite
    (openssl_name,) = {s.cipher for s in rec.sessions}
    assert openssl_name in FORCED_SUITES
    cap = tables(rec, rec.keylog)
    check_messages(cap.messages, rec.manifest)
    check_decrypted_streams(cap, rec)
    convs = tls_conversations(cap, rec)
    assert set(convs["tls_cipher"]) == {FORCED_SUITES[openssl_name]} == tshark_suites(rec)


# --------------------------------------------------------------------------- without it


def check_handshake_only(cap: Capture, rec: TlsRecording, anomaly: str) -> pd.DataFrame:
    """Version, SNI and ALPN as the terminator's ``ssl`` objects saw them, no frame, and
    an ``anomaly`` row on every TLS conversation."""
    convs = tls_conversations(cap, rec)
    assert len(convs) == len(rec.connections) == 2
    by_port = {c.client_port: c.tls for c in rec.connections}
    for conv in convs.itertuples():
        session = by_port[conv.client_port]
        assert session is not None and session.version is not None
        assert conv.tls_version == session.version.replace("TLSv", "TLS ")  # "TLS 1.3"
        assert conv.tls_sni == session.sni == "localhost"
        assert pd.isna(conv.tls_alpn) and session.alpn is None  # the client offers none
        assert conv.encrypted and not conv.tls_decrypted
    ids = set(convs["conn_id"])
    assert not cap.frames["conn_id"].isin(ids).any()
    assert not cap.messages["conn_id"].isin(ids).any()
    found = cap.anomalies[cap.anomalies["code"] == anomaly]
    assert set(found["conn_id"]) == ids
    return convs


@pytest.mark.parametrize("keylog", ["none", "another_session"])
def test_tls13_without_its_keys_shows_version_cipher_and_sni(
    tls13: TlsRecording, tls12: TlsRecording, keylog: str
) -> None:
    """No key log: reported as encrypted; a key log without these sessions (the TLS 1.2
    recording's): tls.no_key.  Either way the handshake is described, nothing decoded."""
    if keylog == "none":
        cap, anomaly = tables(tls13, None), "pulsar.encrypted"
    else:
        cap, anomaly = tables(tls13, tls12.keylog), "tls.no_key"
    convs = check_handshake_only(cap, tls13, anomaly)
    by_port = {c.client_port: c.tls for c in tls13.connections}
    for conv in convs.itertuples():
        session = by_port[conv.client_port]
        assert session is not None
        assert conv.tls_cipher == session.cipher  # TLS 1.3: OpenSSL's name is IANA's
    # TLS 1.3 encrypts the certificate: nothing is made up without the key.
    assert convs["tls_cert_subject"].isna().all()


def test_tls12_without_key_log_shows_the_certificate(tls12: TlsRecording) -> None:
    cap = tables(tls12, None)
    convs = check_handshake_only(cap, tls12, "pulsar.encrypted")
    check_certificate(convs, tls12)


def check_certificate(convs: pd.DataFrame, rec: TlsRecording) -> None:
    """Certificate fields as built (RFC 4514: most specific first); the suite as tshark
    names the ServerHello's."""
    pki = rec.pki
    assert set(convs["tls_cert_subject"]) == {f"CN={pki.host},O={ORGANIZATION},C=CH"}
    assert set(convs["tls_cert_issuer"]) == {f"CN=pulsar-dissector test CA,O={ORGANIZATION},C=CH"}
    for value in convs["tls_cert_not_after"]:
        stamp = pd.Timestamp(value)
        stamp = stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp
        assert stamp.to_pydatetime() == pki.not_after
    # e.g. TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384
    assert set(convs["tls_cipher"]) == tshark_suites(rec)


def tshark_suites(rec: TlsRecording) -> set[str]:
    """The cipher suite of each ServerHello, as tshark names it (one per connection)."""
    shown = tshark_shown(
        rec.capture, rec.port, "tls.handshake.type == 2", "tls.handshake.ciphersuite"
    )
    assert len(shown) == len(rec.connections)
    return {text.removeprefix("Cipher Suite: ").split(" (")[0] for text in shown}


# --------------------------------------------------------------------------- the command


def test_cli_with_key_log_prints_frames_and_never_a_secret(
    tls13: TlsRecording, tmp_path: Path
) -> None:
    rec = tls13
    ports = ["--port", str(rec.port), "--tls-port", str(rec.port)]
    args = ["read", str(rec.capture), "--tls-keylog", str(rec.keylog), *ports]
    shown = cli(*args)
    assert shown.returncode == 0, shown.stderr
    for command in ("CONNECT", "SEND", "MESSAGE"):
        assert any(command in line.split() for line in shown.stdout.splitlines()), command
    out_dir = tmp_path / "tables"
    written = cli(*args, "--format", "jsonl", "-o", str(out_dir))
    assert written.returncode == 0, written.stderr
    files = [p for p in out_dir.rglob("*") if p.is_file()]
    frames_file = next(p for p in files if p.name.startswith("frames"))
    commands = Counter(json.loads(line)["command"] for line in frames_file.read_text().splitlines())
    assert commands["SEND"] > 0 and commands["MESSAGE"] > 0
    secrets = secrets_of(rec)
    assert len(secrets) == 5 * len(rec.connections)
    texts = [shown.stdout, shown.stderr, written.stdout, written.stderr]
    blobs = [p.read_bytes() for p in files]
    for secret in secrets:
        forms = {secret.hex(), secret.hex().upper(), base64.b64encode(secret).decode()}
        for text in texts:
            assert not any(form in text for form in forms)
        for blob in blobs:
            assert secret not in blob
            assert not any(form.encode() in blob for form in forms)


# --------------------------------------------------------------------------- live


def test_live_decrypts_with_keys_written_during_the_run(tmp_path: Path, peer: Peer) -> None:
    """``live --tls-keylog`` on the terminator's key log: empty when the sniffer starts,
    each session's keys are written during the run (at its handshake)."""
    require_capture()
    out = tmp_path / "live"
    out.mkdir()
    keylog = out / "keylog.txt"
    keylog.write_bytes(b"")
    port = free_port()
    ports = ("--port", str(port), "--tls-port", str(port))
    live = Live("-i", "lo", *ports, "--tls-keylog", str(keylog), "--format", "jsonl")
    try:
        rec = record_tls(out, port=port, broker=peer.broker)
        ours = {c.client_port for c in rec.connections}  # the terminator's own record

        def ended() -> set[int]:
            rows = (json.loads(line) for _, line in live.lines)
            return {r["client_port"] for r in rows if r["table"] == "conversations"}

        live.wait_until(lambda: ours <= ended(), "a conversation row of each connection")
    finally:
        rc = live.stop()
    assert rc == 0, live.stderr
    rows = live.rows()
    # only the terminator's connections: another program's traffic on lo may use the port
    convs = [r for r in rows if r["table"] == "conversations" and r["client_port"] in ours]
    assert len(convs) == len(rec.connections) == len(rec.manifest["runs"])
    assert all(c["tls_decrypted"] for c in convs)
    conns = {c["conn_id"] for c in convs}
    msgs = pd.DataFrame([r for r in rows if r["table"] == "messages" and r["conn_id"] in conns])
    check_messages(msgs, rec.manifest)
    printed = live.stderr + "".join(line for _, line in live.lines)
    assert not any(secret.hex() in printed for secret in secrets_of(rec))
