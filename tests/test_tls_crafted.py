"""TLS conversations made of real TLS bytes (OpenSSL through Python's `ssl`, in memory).

Each test builds a genuine TLS 1.3 or 1.2 session carrying real Pulsar frames
(fuzz/memory_tls.py), puts it in a crafted capture, and reads it back. Expected
values come from elsewhere than the dissector: the frames the client and broker wrote, what
`ssl` reports (version, cipher), the certificate the test made, hand-known IANA names.
Cases: decryption (TLS 1.3 AES-256-GCM, TLS 1.2 AES-GCM, ChaCha20-Poly1305, AES-CBC with and
without encrypt-then-MAC), no key log, wrong key, key of another session, a key that arrives
late, a corrupted record, a truncated record, a TCP gap inside a record.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from dissector.capture import open_capture
from dissector.events import Direction, Frame
from dissector.frontends.cli import main
from dissector.read import Capture, ReaderOptions, read_capture
from dissector.read.driver import make_pipeline
from dissector.read.plan import EVENTS, plan_read
from dissector.tls.keylog import KeyLog
from fuzz.memory_tls import (
    ISSUER,
    OP_NO_ENCRYPT_THEN_MAC,
    SNI,
    SUBJECT,
    TlsRun,
    run_tls,
)
from tests.support.crafted import Conn, Msg, Session, baseline_msgs, chunks, write_pcap

C2B, B2C = Direction.CLIENT_TO_BROKER, Direction.BROKER_TO_CLIENT
MSGS = baseline_msgs()
SEGMENT = 1400
#: The event API's plan: every stage the options leave on (what a live reader feeds).
EVENTS_PLAN = plan_read(ReaderOptions(), front=EVENTS)


def capture(
    tmp: Path, run: TlsRun, *, name: str = "tls.pcap", port: int = 6651, edit: Any = None
) -> Path:
    """The run's TLS bytes as one TCP connection (segments of at most SEGMENT bytes);
    edit(session, index, direction, data) may send a flight itself (return True)."""
    s = Session(Conn(broker_port=port))
    s.handshake()
    for i, (direction, data) in enumerate(run.wire):
        if edit is not None and edit(s, i, direction, data):
            continue
        s.send_pieces(direction, chunks(data, SEGMENT))
    s.close()
    return write_pcap(tmp / name, s.segs).path


def expected_frames(msgs: Sequence[Msg]) -> list[tuple[str, str, int]]:
    """(direction, command, offset in its decrypted stream) of every frame sent."""
    at = {C2B: 0, B2C: 0}
    out = []
    for m in msgs:
        out.append((str(m.direction), m.name, at[m.direction]))
        at[m.direction] += len(m.data)
    return sorted(out, key=lambda f: (f[0], f[2]))


def got_frames(cap: Capture) -> list[tuple[str, str, int]]:
    rows = cap.arrow["frames"].select(["direction", "command", "stream_offset"]).to_pylist()
    return sorted(
        ((r["direction"], r["command"], r["stream_offset"]) for r in rows),
        key=lambda f: (f[0], f[2]),
    )


def codes(cap: Capture) -> list[str]:
    return [a["code"] for a in cap.arrow["anomalies"].to_pylist()]


def conversation(cap: Capture) -> dict[str, Any]:
    (conv,) = cap.arrow["conversations"].to_pylist()
    return dict(conv)


def exchange() -> list[tuple[Direction, bytes]]:
    return [(m.direction, m.data) for m in MSGS]


def accounted(conv: dict[str, Any]) -> None:
    for d in ("c2b", "b2c"):
        parts = conv[f"frame_bytes_{d}"] + conv[f"skipped_bytes_{d}"] + conv[f"gap_bytes_{d}"]
        assert parts == conv[f"stream_bytes_{d}"], (d, conv)


# IANA names of the suites below (RFC 8446 B.4, RFC 5289, RFC 7905, RFC 4492).
CASES: dict[str, tuple[dict[str, Any], str, str]] = {
    "tls13-aes256gcm": ({}, "TLS 1.3", "TLS_AES_256_GCM_SHA384"),
    "tls12-aes128gcm": (
        {"tls12": True, "ciphers": "ECDHE-RSA-AES128-GCM-SHA256"},
        "TLS 1.2",
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    ),
    "tls12-aes256gcm": (
        {"tls12": True, "ciphers": "ECDHE-RSA-AES256-GCM-SHA384"},
        "TLS 1.2",
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    ),
    "tls12-chacha20": (
        {"tls12": True, "ciphers": "ECDHE-RSA-CHACHA20-POLY1305"},
        "TLS 1.2",
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    ),
    "tls12-cbc-etm": (
        {"tls12": True, "ciphers": "ECDHE-RSA-AES128-SHA"},
        "TLS 1.2",
        "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    ),
    "tls12-cbc-mte": (
        {"tls12": True, "ciphers": "ECDHE-RSA-AES256-SHA384", "options": OP_NO_ENCRYPT_THEN_MAC},
        "TLS 1.2",
        "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_decrypted_frames_equal_the_frames_sent(tmp_path: Path, case: str) -> None:
    settings, version, cipher = CASES[case]
    run = run_tls(tmp_path, exchange(), alpn=["pulsar"], **settings)
    assert run.version == version.replace(" ", "v")  # what ssl negotiated
    cap = read_capture(capture(tmp_path, run), tls_keylog=[run.keylog])
    assert got_frames(cap) == expected_frames(MSGS)
    sent = sorted(hashlib.sha256(m.payload).hexdigest() for m in MSGS if m.payload)
    assert sorted(cap.arrow["messages"].column("payload_sha256").to_pylist()) == sent
    assert codes(cap) == []
    conv = conversation(cap)
    assert (conv["tls_version"], conv["tls_cipher"], conv["tls_sni"]) == (version, cipher, SNI)
    assert conv["tls_decrypted"] is True and conv["encrypted"] is True
    assert conv["client_version"] == "crafted-client"  # the decrypted CONNECT
    assert conv["tls_alpn"] == "pulsar"
    if version == "TLS 1.2":  # the certificate is in clear
        assert (conv["tls_cert_subject"], conv["tls_cert_issuer"]) == (SUBJECT, ISSUER)
        assert conv["tls_cert_not_after"] == run.not_after
    else:  # decrypted: the same certificate
        assert conv["tls_cert_subject"] == SUBJECT
    accounted(conv)


@pytest.mark.parametrize("tls12", [False, True], ids=["tls13", "tls12"])
def test_without_key_log_metadata_is_what_ssl_reports_and_no_frames(
    tmp_path: Path, tls12: bool
) -> None:
    run = run_tls(tmp_path, exchange(), tls12=tls12)
    cap = read_capture(capture(tmp_path, run))
    assert cap.arrow["frames"].num_rows == 0
    assert codes(cap) == ["pulsar.encrypted"]
    conv = conversation(cap)
    assert conv["tls_version"] == run.version.replace("v", " ")
    if tls12:
        assert run.cipher == "ECDHE-RSA-AES256-GCM-SHA384" and run.cipher_id == 0xC030
        assert conv["tls_cipher"] == "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"
        assert conv["tls_cert_subject"] == SUBJECT
    else:
        assert conv["tls_cipher"] == run.cipher  # ssl gives TLS 1.3 suites their IANA name
        assert conv["tls_cert_subject"] is None  # encrypted in TLS 1.3
    assert conv["tls_sni"] == SNI and conv["tls_decrypted"] is False
    assert conv["frames_c2b"] == conv["frames_b2c"] == 0


def _corrupt(keylog: Path, out: Path) -> Path:
    """The key log with every secret's last byte changed."""

    def flip(m: re.Match[str]) -> str:
        return m.group(1) + format(int(m.group(2), 16) ^ 1, "02x")

    text = re.sub(r"^(\S+ \S+ \S*)(\S\S)$", flip, keylog.read_text(), flags=re.M)
    out.write_text(text)
    return out


@pytest.mark.parametrize("tls12", [False, True], ids=["tls13", "tls12"])
def test_wrong_key_gives_decrypt_failed_and_gaps_never_frames(tmp_path: Path, tls12: bool) -> None:
    run = run_tls(tmp_path, exchange(), tls12=tls12)
    wrong = _corrupt(run.keylog, tmp_path / "wrong.log")
    cap = read_capture(capture(tmp_path, run), tls_keylog=[wrong])
    assert cap.arrow["frames"].num_rows == 0
    found = codes(cap)
    assert "tls.decrypt_failed" in found and "pulsar.encrypted" in found
    assert set(found) <= {"tls.decrypt_failed", "pulsar.encrypted"}
    conv = conversation(cap)
    assert conv["tls_decrypted"] is False
    assert conv["gap_bytes_c2b"] > 0 and conv["frame_bytes_c2b"] == 0
    accounted(conv)


def test_key_of_another_session_is_no_key(tmp_path: Path) -> None:
    run = run_tls(tmp_path, exchange())
    other = run_tls(tmp_path, exchange(), keylog_name="other.log")
    cap = read_capture(capture(tmp_path, run), tls_keylog=[other.keylog])
    assert cap.arrow["frames"].num_rows == 0
    assert codes(cap) == ["tls.no_key", "pulsar.encrypted"]
    accounted(conversation(cap))
    # Both key logs given: the right one is found among them.
    cap = read_capture(capture(tmp_path, run), tls_keylog=[other.keylog, run.keylog])
    assert got_frames(cap) == expected_frames(MSGS)


def test_key_that_arrives_late_is_picked_up(tmp_path: Path) -> None:
    run = run_tls(tmp_path, exchange())
    keylog = KeyLog()
    pipe = make_pipeline(ReaderOptions(), EVENTS_PLAN, keylog=keylog)
    frames: list[Frame] = []
    with open_capture(capture(tmp_path, run)) as packets:
        for i, pkt in enumerate(packets):
            if i == 12:  # mid-session, after the handshake: the secrets are written now
                keylog.feed(run.keylog.read_text())
            frames += [e for e in pipe.feed(pkt) if isinstance(e, Frame)]
    frames += [e for e in pipe.close() if isinstance(e, Frame)]
    got = sorted((str(f.direction), f.command_name, f.stream_offset) for f in frames)
    assert got == sorted(expected_frames(MSGS))


def test_retry_tls_decrypts_waiting_records_without_a_new_packet(tmp_path: Path) -> None:
    # Live: the key log is polled and grew; the pipeline retries at once (Pipeline.retry_tls).
    run = run_tls(tmp_path, exchange())
    keylog = KeyLog()
    pipe = make_pipeline(ReaderOptions(), EVENTS_PLAN, keylog=keylog)
    with open_capture(capture(tmp_path, run)) as packets:
        events = [e for pkt in list(packets)[:-3] for e in pipe.feed(pkt)]  # FINs not yet
    assert not any(isinstance(e, Frame) for e in events)
    keylog.feed(run.keylog.read_text())
    frames = [e for e in pipe.retry_tls() if isinstance(e, Frame)]
    got = sorted((str(f.direction), f.command_name, f.stream_offset) for f in frames)
    assert got == sorted(expected_frames(MSGS))


def _app_flights(run: TlsRun, direction: Direction) -> list[int]:
    """Indexes of the flights of `direction` that carry one Pulsar frame each (the ones
    written after the handshake), in order."""
    firsts = [i for i, (d, _) in enumerate(run.wire) if d is direction]
    count = sum(1 for m in MSGS if m.direction is direction)
    start = len(firsts) - count - 1  # the last flight is close_notify
    return firsts[start : start + count]


def test_corrupted_record_is_one_failure_and_the_next_records_decrypt(tmp_path: Path) -> None:
    run = run_tls(tmp_path, exchange())
    bad = _app_flights(run, C2B)[2]  # the SEND

    def edit(s: Session, i: int, direction: Direction, data: bytes) -> bool:
        if i != bad:
            return False
        s.send(direction, data[:20] + bytes([data[20] ^ 0xFF]) + data[21:])
        return True

    cap = read_capture(capture(tmp_path, run, edit=edit), tls_keylog=[run.keylog])
    assert codes(cap) == ["tls.decrypt_failed"]
    expected = [f for f in expected_frames(MSGS) if f != (str(C2B), "SEND", _offset_of("SEND"))]
    assert got_frames(cap) == expected
    conv = conversation(cap)
    assert conv["gap_bytes_c2b"] == len(MSGS[4].data)  # the SEND's plaintext size
    accounted(conv)


def _offset_of(name: str) -> int:
    at = 0
    for m in MSGS:
        if m.name == name:
            return at
        if m.direction is C2B:
            at += len(m.data)
    raise KeyError(name)


@pytest.mark.parametrize("tls12", [False, True], ids=["tls13", "tls12"])
def test_tcp_gap_inside_a_record_loses_that_record_only(tmp_path: Path, tls12: bool) -> None:
    run = run_tls(tmp_path, exchange(), tls12=tls12)
    cut = _app_flights(run, C2B)[2]  # the SEND's record loses 30 bytes after its header

    def edit(s: Session, i: int, direction: Direction, data: bytes) -> bool:
        if i != cut:
            return False
        start = s.sent[direction]
        s.send(direction, data[:10])
        s.send(direction, data[40:], at=start + 40)
        return True

    cap = read_capture(capture(tmp_path, run, edit=edit), tls_keylog=[run.keylog])
    found = [(a["code"], a["length"]) for a in cap.arrow["anomalies"].to_pylist()]
    # Its header was seen: the record is known lost whole, the next one is where it ends,
    # and the decrypted stream's gap is the lost record's plaintext size.
    assert found == [("tcp.gap", 30)]
    expected = [f for f in expected_frames(MSGS) if f != (str(C2B), "SEND", _offset_of("SEND"))]
    assert got_frames(cap) == expected  # every other frame, before and after the gap
    conv = conversation(cap)
    assert conv["gap_bytes_c2b"] == len(MSGS[4].data)
    accounted(conv)


def test_tcp_gap_over_a_record_header_resyncs_on_the_next_record(tmp_path: Path) -> None:
    run = run_tls(tmp_path, exchange())
    cut = _app_flights(run, C2B)[2]  # the SEND's record loses its first 30 bytes
    tail = len(run.wire[cut][1]) - 30

    def edit(s: Session, i: int, direction: Direction, data: bytes) -> bool:
        if i != cut:
            return False
        s.send(direction, data[30:], at=s.sent[direction] + 30)
        return True

    cap = read_capture(capture(tmp_path, run, edit=edit), tls_keylog=[run.keylog])
    found = [(a["code"], a["length"]) for a in cap.arrow["anomalies"].to_pylist()]
    # The rest of the record is skipped; the next record is found by scanning and opened
    # at the next sequence number (tried among the next few).
    assert found[:2] == [("tcp.gap", 30), ("tls.skipped_bytes", tail)]
    assert {c for c, _ in found} <= {"tcp.gap", "tls.skipped_bytes", "pulsar.truncated_frame"}
    expected = [f[:2] for f in expected_frames(MSGS) if f[1] != "SEND"]
    assert [f[:2] for f in got_frames(cap)] == expected  # after the gap: estimated offsets
    accounted(conversation(cap))


def test_truncated_record_at_the_end(tmp_path: Path) -> None:
    run = run_tls(tmp_path, exchange()[:-1])  # ends with PING from the broker
    last = _app_flights(run, B2C)[-1]

    def edit(s: Session, i: int, direction: Direction, data: bytes) -> bool:
        if i < last:
            return False
        if i == last:
            s.send(direction, data[:-5])
        return True  # nothing after it (no close_notify)

    cap = read_capture(capture(tmp_path, run, edit=edit), tls_keylog=[run.keylog])
    assert codes(cap) == ["tls.truncated_record"]
    assert got_frames(cap) == [f for f in expected_frames(MSGS[:-1]) if f[1] != "PING"]
    accounted(conversation(cap))


def test_cli_reads_with_key_log_and_never_prints_secrets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = run_tls(tmp_path, exchange())
    path = capture(tmp_path, run)
    assert main(["read", str(path), "--tls-keylog", str(run.keylog)]) == 0
    out = capsys.readouterr().out
    assert out.count("SEND ") == 1 and "CONNECT client_version=crafted-client" in out
    secrets = [line.split()[2] for line in run.keylog.read_text().splitlines() if " " in line]
    assert secrets and not any(secret in out for secret in secrets)
    missing = tmp_path / "missing.log"
    assert main(["read", str(path), "--tls-keylog", str(missing)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"pulsar-dissect: {missing}: cannot read the TLS key log: no such file or directory"
    ]


def test_tls_off_the_broker_ports_is_framed_only_when_it_opens_with_connect(
    tmp_path: Path,
) -> None:
    # Port 16650 is no broker port: the ClientHello makes it TLS; decrypted, it is Pulsar
    # when the client's first frame is CONNECT, and another protocol (HTTP here) is not
    # framed at all (no frame, no skipped-bytes noise).
    pulsar = run_tls(tmp_path, exchange())
    cap = read_capture(capture(tmp_path, pulsar, port=16650), tls_keylog=[pulsar.keylog])
    assert got_frames(cap) == expected_frames(MSGS)
    http = [(C2B, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"), (B2C, b"HTTP/1.1 200 OK\r\n\r\n")]
    other = run_tls(tmp_path, http, keylog_name="http.log")
    cap = read_capture(capture(tmp_path, other, port=16650), tls_keylog=[other.keylog])
    assert cap.arrow["frames"].num_rows == 0 and codes(cap) == []
    conv = conversation(cap)
    assert conv["tls_decrypted"] is True and conv["frames_c2b"] == 0
