"""Text and JSON views of messages: compact, complete, and secrets redacted."""

from __future__ import annotations

import json

from dissector import command
from dissector.frontends.text import message_text
from dissector.pulsar.field_values import message_dict

SECRET = b"s3cr3t-token-value"


def connect():
    return command(
        "CONNECT",
        client_version="test-client",
        protocol_version=20,
        auth_method_name="token",
        auth_data=SECRET,
        original_auth_data="proxied-secret",
    ).connect


def auth_response():
    return command(
        "AUTH_RESPONSE", response={"auth_method_name": "token", "auth_data": SECRET}
    ).authResponse


def test_connect_secrets_are_redacted_in_text_and_json() -> None:
    text = message_text(connect())
    assert "s3cr3t" not in text and "proxied-secret" not in text
    assert "auth_data=<redacted>(18 bytes)" in text
    assert "original_auth_data=<redacted>(14 bytes)" in text
    assert "client_version=test-client" in text and "protocol_version=20" in text
    data = json.dumps(message_dict(connect()))
    assert "s3cr3t" not in data and "73336372337" not in data  # nor as hex
    assert message_dict(connect())["auth_data"] == "<redacted>(18 bytes)"


def test_nested_auth_data_is_redacted() -> None:
    assert "s3cr3t" not in message_text(auth_response())
    assert message_dict(auth_response())["response"]["auth_data"] == "<redacted>(18 bytes)"


def test_show_secrets_reveals_them() -> None:
    assert SECRET.hex() in message_text(connect(), show_secrets=True)
    assert message_dict(connect(), show_secrets=True)["auth_data"] == SECRET.hex()
    assert "proxied-secret" in message_text(connect(), show_secrets=True)


def test_enums_by_name_and_long_lists_shortened() -> None:
    ids = [{"ledgerId": 1, "entryId": i} for i in range(20)]
    ack = command("ACK", consumer_id=3, ack_type=1, message_id=ids).ack
    text = message_text(ack)
    assert "ack_type=Cumulative" in text
    assert text.endswith("...+12]")
    assert len(message_dict(ack)["message_id"]) == 20
