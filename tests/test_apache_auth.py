"""Token authentication on Apache Pulsar's own broker: refresh, no refresh, refused roles.

Truth: the clients' own records. SecureClient.java (the official Java client) records every
token its supplier made (text and expiry), every message sent and received, and each
refused attempt with the exception the client raised; RawClient (ours, in Python) records
every frame it sent and received and when it read the broker's end of the stream. The
broker's log line is the broker's own account. Nothing expected is taken from our output.
Scenarios: tokens living LIFETIME seconds (the broker checks every second, challenges with
AUTH_CHALLENGE, the client answers AUTH_RESPONSE with a fresh token, messages keep
flowing); a client without supports_auth_refresh whose token expires (the broker closes the
connection: Apache 4.0 sends no AUTH_CHALLENGE then); roles without permission (ERROR
AuthorizationError paired to the refused request).
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest

import dissector
from dissector.findings import FindingCode as F
from tests.support.apache.raw import RawClient
from tests.support.apache.secure import SecureBroker, captured
from tests.support.cli import cli
from tests.support.peers import LOOPBACK

pytestmark = [pytest.mark.apache, pytest.mark.capture, pytest.mark.tools]

LIFETIME = 2  # seconds a token lives: the broker challenges it within about a second after
ROLE = "app"  # produce and consume on public/default
READER = "reader"  # consume only
NOBODY = "nobody"  # no permission at all
Run = tuple[Path, dict[str, Any], dissector.Capture]


def _topic(prefix: str) -> str:
    return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:8]}"


def _rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = frame.astype(object).where(frame.notna(), None).to_dict("records")
    return rows


@pytest.fixture(scope="module")
def broker(apache_secure_broker: SecureBroker) -> SecureBroker:
    """The secured broker with the roles' permissions granted (admin API, as superuser)."""
    apache_secure_broker.grant(ROLE, ["produce", "consume"])
    apache_secure_broker.grant(READER, ["consume"])
    return apache_secure_broker


@pytest.fixture(scope="module")
def refresh(broker: SecureBroker, tmp_path_factory: pytest.TempPathFactory) -> Run:
    cap = tmp_path_factory.mktemp("auth") / "refresh.pcap"
    topic = _topic("refresh")
    record = captured(
        cap, broker.port, lambda: broker.run_client("refresh", topic, role=ROLE, lifetime=LIFETIME)
    )
    return cap, record, dissector.read_capture(cap, ports=[broker.port], fields=True)


def test_tokens_were_refreshed_and_messages_kept_flowing(refresh: Run) -> None:
    _, record, capture = refresh
    tokens = record["tokens"]
    assert len(tokens) >= 3  # the first, then one per refresh the client waited for
    assert all(t["exp"] is not None for t in tokens)
    assert [t["exp"] for t in tokens] == sorted({t["exp"] for t in tokens})
    # one message after each new token: the connection stayed usable through every refresh
    assert [e["token_n"] for e in record["sent"]][1:] == list(
        range(record["sent"][0]["token_n"] + 1, record["sent"][0]["token_n"] + len(record["sent"]))
    )
    assert Counter(e["sha256"] for e in record["sent"]) == Counter(
        e["sha256"] for e in record["received"]
    )
    messages = capture.messages
    for kind, entries in (("produced", record["sent"]), ("delivered", record["received"])):
        ours = messages[messages.kind == kind]
        assert Counter(ours.payload_sha256) == Counter(e["sha256"] for e in entries), kind
    assert len(capture.conversations) == 1
    assert not [c for c in capture.findings.code if c.startswith("auth.")]  # all answered


def _wire_tokens(cap: Path, port: int) -> list[str]:
    """The tokens in CONNECT and AUTH_RESPONSE, in order, as `-V --show-secrets` prints them
    (the one output that shows them: asked for)."""
    done = cli(
        "read",
        str(cap),
        "--port",
        str(port),
        "-V",
        "--show-secrets",
        "-Y",
        "command IN ('CONNECT', 'AUTH_RESPONSE')",
    )
    assert done.returncode == 0, done.stderr
    return [
        bytes.fromhex(h).decode()
        for h in re.findall(r"^\s+auth_data: ([0-9a-f]+)$", done.stdout, re.M)
    ]


def test_each_challenge_is_paired_with_the_fresh_token(refresh: Run, broker: SecureBroker) -> None:
    cap, record, capture = refresh
    tokens = [t["token"] for t in record["tokens"]]
    assert _wire_tokens(cap, broker.port) == tokens  # CONNECT's, then one per AUTH_RESPONSE
    pairs = capture.timeline[capture.timeline.request_command == "AUTH_CHALLENGE"]
    assert len(pairs) == len(tokens) - 1
    assert set(pairs.response_command) == {"AUTH_RESPONSE"}
    assert set(pairs.outcome) == {"success"} and set(pairs.request_direction) == {
        "broker_to_client"
    }
    # the broker challenged each token once it had expired (exp: the client's own claim)
    for challenge_ts, expired in zip(pairs.request_ts, record["tokens"], strict=False):
        assert challenge_ts.timestamp() >= expired["exp"], (challenge_ts, expired)


def _outputs(cap: Path, port: int, folder: Path) -> dict[str, str]:
    """Every output the product makes of the capture, as text."""
    texts: dict[str, str] = {}
    for fmt in ("jsonl", "csv", "parquet"):
        out = folder / fmt
        done = cli(
            "read", str(cap), "--port", str(port), "--fields", "-o", f"{out}/", "--format", fmt
        )
        assert done.returncode == 0, done.stderr
        for path in sorted(out.iterdir()):
            if fmt == "parquet":
                table = pq.read_table(path).to_pandas()
                texts[str(path)] = table.to_json(orient="records", date_format="iso")
            else:
                texts[str(path)] = path.read_text(encoding="utf-8")
    for name, args in {
        "text -V -x": ("read", str(cap), "--port", str(port), "-V", "-x"),
        "summary": ("summary", str(cap), "--port", str(port)),
        "summary json": ("summary", str(cap), "--port", str(port), "--format", "json"),
        "diagnose json": ("diagnose", str(cap), "--port", str(port), "--format", "json"),
    }.items():
        done = cli(*args)
        assert done.returncode == 0, done.stderr
        texts[name] = done.stdout
    report = folder / "report.html"
    done = cli("report", str(cap), "--port", str(port), "-o", str(report))
    assert done.returncode == 0, done.stderr
    texts["report"] = report.read_text(encoding="utf-8")
    return texts


def test_auth_data_is_redacted_in_every_output(
    refresh: Run, broker: SecureBroker, tmp_path: Path
) -> None:
    cap, record, capture = refresh
    secrets = [t["token"] for t in record["tokens"]]
    signatures = [t.rsplit(".", 1)[1] for t in secrets]
    texts = _outputs(cap, broker.port, tmp_path)
    assert any("frames" in name for name in texts)
    for name, text in texts.items():
        lowered = text.lower()
        for token, signature in zip(secrets, signatures, strict=True):
            assert signature not in text and token.encode().hex() not in lowered, name
    # what stands in their place: the placeholder with each token's length, in order
    frames = capture.frames
    auth = frames[frames.command.isin(["CONNECT", "AUTH_RESPONSE"])]
    shown = [re.findall(r"<redacted>\((\d+) bytes\)", f) for f in auth.fields]
    assert [int(n) for found in shown for n in found] == [len(t) for t in secrets]


# --------------------------------------------------------------------------- no refresh


@pytest.fixture(scope="module")
def no_refresh(broker: SecureBroker, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """A raw client: CONNECT with a token living LIFETIME s and no supports_auth_refresh, then
    it reads until the broker ends the stream (bounded by RawClient.READ_TIMEOUT)."""
    cap = tmp_path_factory.mktemp("auth") / "no_refresh.pcap"
    token = broker.token(ROLE, LIFETIME)

    def run() -> dict[str, Any]:
        with RawClient(LOOPBACK, broker.port) as client:
            # feature flags without supports_auth_refresh
            client.connect(
                "raw-no-refresh", token, feature_flags={"supports_broker_entry_metadata": True}
            )
            assert client.receive() is None  # nothing more: the broker's end of the stream
        return {**client.record, "exp": json.loads(_claims(token))["exp"]}

    record = captured(cap, broker.port, run)
    return cap, record, dissector.read_capture(cap, ports=[broker.port])


def _claims(token: str) -> str:
    part = token.split(".")[1]
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)).decode()


def test_without_refresh_support_the_broker_closes_at_expiry(
    no_refresh: Run, broker: SecureBroker
) -> None:
    _, record, capture = no_refresh
    commands = [(f["direction"], f["command"]) for f in record["frames"]]
    assert commands == [("sent", "CONNECT"), ("received", "CONNECTED")]  # no AUTH_CHALLENGE
    assert record["eof_ms"] is not None and record["eof_ms"] <= record["closed_ms"]
    assert record["eof_ms"] >= record["exp"] * 1000  # not before the token expired
    port = record["local_port"]
    assert re.search(
        rf"\[/127\.0\.0\.1:{port}\] Closing connection because client doesn't support auth "
        "credentials refresh",
        broker.log_text(),
    )
    frames = capture.frames
    assert [
        ("sent" if d == "client_to_broker" else "received", c)
        for d, c in zip(frames.direction, frames.command, strict=True)
    ] == commands
    (conv,) = _rows(capture.conversations)
    assert conv["client_port"] == port and conv["ended"] == "fin"
    assert "supports_auth_refresh" not in list(conv["feature_flags"])
    assert conv["end_ts"].timestamp() * 1000 >= record["exp"] * 1000
    assert _rows(capture.anomalies) == []


def _ms(when: Any) -> int:
    """A table's time as whole ms since the epoch (as the raw client notes its times)."""
    return int(when.value // 1_000_000)


def test_without_refresh_support_the_closes_are_a_finding(no_refresh: Run) -> None:
    _, record, capture = no_refresh
    (row,) = _rows(capture.findings)
    assert row["code"] == F.AUTH_REFRESH_UNSUPPORTED and row["count"] == 1
    assert row["entity"] == f"client {LOOPBACK}"
    assert "raw-no-refresh" in row["summary"] and "at its token's expiry" in row["summary"]
    # the evidence ends with the broker's FIN: after the token's exp, no later than the raw
    # client read the end of the stream; it begins with the CONNECT it sent
    assert record["exp"] * 1000 <= _ms(row["last_ts"]) <= record["eof_ms"]
    connect_ms = record["frames"][0]["ms"]
    assert _ms(row["first_ts"]) <= connect_ms
    lifetime = (row["last_ts"] - row["first_ts"]).total_seconds()
    assert abs(row["value"] - lifetime) <= 0.0005  # value: seconds to the ms
    assert len(row["evidence"]) == 2


@pytest.fixture(scope="module")
def unanswered(broker: SecureBroker, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """A raw client offering supports_auth_refresh, with a token living LIFETIME s, that
    reads the broker's AUTH_CHALLENGE and never answers it, then reads until the broker ends
    the stream."""
    cap = tmp_path_factory.mktemp("auth") / "unanswered.pcap"
    token = broker.token(ROLE, LIFETIME)

    def run() -> dict[str, Any]:
        with RawClient(LOOPBACK, broker.port) as client:
            client.connect("raw-silent", token, feature_flags={"supports_auth_refresh": True})
            client.expect("AUTH_CHALLENGE")
            assert client.receive() is None  # the broker's end of the stream
        return client.record

    record = captured(cap, broker.port, run)
    return cap, record, dissector.read_capture(cap, ports=[broker.port])


def test_a_challenge_left_unanswered_is_a_finding(unanswered: Run) -> None:
    _, record, capture = unanswered
    commands = [(f["direction"], f["command"]) for f in record["frames"]]
    assert commands == [
        ("sent", "CONNECT"),
        ("received", "CONNECTED"),
        ("received", "AUTH_CHALLENGE"),
    ]
    (row,) = _rows(capture.findings)
    assert row["code"] == F.AUTH_CHALLENGE_UNANSWERED and row["count"] == 1
    assert "the broker ended the connection" in row["summary"]
    challenge_ms = record["frames"][2]["ms"]
    assert _ms(row["first_ts"]) <= challenge_ms  # the challenge, seen before the client read it
    assert challenge_ms <= _ms(row["last_ts"]) <= record["eof_ms"]  # then the broker's FIN
    assert len(row["evidence"]) == 2


# --------------------------------------------------------------------------- refused roles


@pytest.fixture(scope="module")
def refused(broker: SecureBroker, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """Role READER (consume only) and role NOBODY, each trying a producer then a consumer."""
    runs: dict[str, Run] = {}
    for role in (READER, NOBODY):
        cap = tmp_path_factory.mktemp("auth") / f"refused-{role}.pcap"
        topic = _topic(f"refused-{role}")
        record = captured(cap, broker.port, partial(broker.run_client, "denied", topic, role=role))
        runs[role] = cap, record, dissector.read_capture(cap, ports=[broker.port])
    return runs


def _error_msg(message: str) -> str:
    """The broker's text inside the Java client's exception message (a JSON object)."""
    return str(json.loads(message)["errorMsg"])


@pytest.mark.parametrize("role", [READER, NOBODY])
def test_authorization_error_is_paired_to_the_refused_request(
    refused: dict[str, Run], role: str
) -> None:
    _, record, capture = refused[role]
    failed = [a for a in record["attempts"] if not a["ok"]]
    assert failed, record["attempts"]
    assert all(a["exception"].endswith("AuthorizationException") for a in failed)
    timeline = capture.timeline
    errors = _rows(timeline[timeline.outcome == "error"])
    assert [e["error_code"] for e in errors] == ["AuthorizationError"] * len(failed)
    assert [e["error_message"] for e in errors] == [_error_msg(a["message"]) for a in failed]
    assert all(e["response_packet"] is not None and e["request_id"] is not None for e in errors)
    succeeded = {a["what"] for a in record["attempts"] if a["ok"]}
    requests = set(timeline[timeline.outcome == "success"].request_command)
    assert ("SUBSCRIBE" in requests) == ("consumer" in succeeded)
    assert ("PRODUCER" in requests) == ("producer" in succeeded)
