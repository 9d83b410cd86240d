"""The wire schema: bindings fresh, and the tables derived from it cover every command."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from dissector.pulsar.wire import (
    BODY_FIELDS,
    COMMAND_NAMES,
    COMMAND_TYPES,
    PAYLOAD_TYPES,
    BaseCommand,
)

ROOT = Path(__file__).resolve().parents[2]


def _gen_proto():  # scripts/ is not a package: load the generator by path
    spec = importlib.util.spec_from_file_location("gen_proto", ROOT / "scripts" / "gen_proto.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_bindings_are_fresh() -> None:
    assert _gen_proto().stale_files() == []


def test_stale_bindings_are_detected(tmp_path, monkeypatch) -> None:
    gen = _gen_proto()
    for name in gen.GENERATED:
        (tmp_path / name).write_text((gen.OUT / name).read_text() + "\n# edited by hand\n")
    monkeypatch.setattr(gen, "OUT", tmp_path)
    assert sorted(gen.stale_files()) == sorted(gen.GENERATED)


def test_every_command_type_has_its_sub_message() -> None:
    assert set(BODY_FIELDS) == set(COMMAND_NAMES)
    for ctype, field in BODY_FIELDS.items():
        descriptor = BaseCommand.DESCRIPTOR.fields_by_name[field]
        assert descriptor.number == ctype
        assert descriptor.message_type is not None
        assert descriptor.message_type.name.startswith("Command")


def test_known_wire_numbers() -> None:
    # Numbers from the protocol specification and long-stable upstream facts.
    expected = {
        "CONNECT": 2,
        "CONNECTED": 3,
        "SUBSCRIBE": 4,
        "PRODUCER": 5,
        "SEND": 6,
        "SEND_RECEIPT": 7,
        "SEND_ERROR": 8,
        "MESSAGE": 9,
        "ACK": 10,
        "FLOW": 11,
        "PING": 18,
        "PONG": 19,
        "LOOKUP": 23,
        "LOOKUP_RESPONSE": 24,
        "AUTH_CHALLENGE": 36,
        "AUTH_RESPONSE": 37,
    }
    assert {name: COMMAND_TYPES[name] for name in expected} == expected
    assert {COMMAND_NAMES[t] for t in PAYLOAD_TYPES} == {"SEND", "MESSAGE"}
