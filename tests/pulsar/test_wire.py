"""The wire schema: bindings fresh, the tables derived from it cover every command, and the
newest upstream fields decode as known fields from bytes written by hand."""

from __future__ import annotations

import struct
from types import ModuleType

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.unknown_fields import UnknownFieldSet

from dissector import Frame
from dissector.pulsar.wire import (
    BODY_FIELDS,
    COMMAND_NAMES,
    COMMAND_TYPES,
    PAYLOAD_TYPES,
    BaseCommand,
)
from tests.support.framehelpers import decode
from tests.support.scripts import load_script


def _gen_proto() -> ModuleType:
    return load_script("gen_proto")


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


# ------------------------------------------------- the fields of Apache Pulsar's newest schema

#: (message, field) -> (number, label, type, default) as Apache Pulsar's PulsarApi.proto
#: declares them (pulsar-common/src/main/proto/PulsarApi.proto; scalable topics, PIP-486).
UPSTREAM_FIELDS = {
    ("MessageMetadata", "entry_hash_min"): (33, "optional", "uint32", None),
    ("MessageMetadata", "entry_hash_max"): (34, "optional", "uint32", None),
    ("SegmentInfoProto", "entry_bucket_splits"): (12, "repeated", "uint32", None),
    ("CommandScalableTopicLookup", "create_if_missing"): (3, "optional", "bool", True),
    ("ScalableAssignedSegment", "bucket_ranges"): (5, "repeated", "IntRange", None),
}


def test_newest_upstream_fields_have_upstream_numbers_types_and_defaults() -> None:
    scalars = {FieldDescriptor.TYPE_UINT32: "uint32", FieldDescriptor.TYPE_BOOL: "bool"}
    for (message, name), (number, label, kind, default) in UPSTREAM_FIELDS.items():
        field = BaseCommand.DESCRIPTOR.file.message_types_by_name[message].fields_by_name[name]
        got_kind = field.message_type.name if field.message_type else scalars[field.type]
        got_default = field.default_value if field.has_default_value else None
        got_label = (
            "repeated" if field.is_repeated else "required" if field.is_required else "optional"
        )
        got = (field.number, got_label, got_kind, got_default)
        assert got == (number, label, kind, default), (message, name)


def unknown_fields(msg: Message, path: str = "") -> list[str]:
    """Fields on the wire that our schema does not describe, anywhere in the message."""
    unknown = UnknownFieldSet(msg)
    found = [f"{path}#{unknown[i].field_number}" for i in range(len(unknown))]
    for field, value in msg.ListFields():
        if field.message_type is not None:
            for i, item in enumerate(value if field.is_repeated else [value]):
                found += unknown_fields(item, f"{path}.{field.name}[{i}]")
    return found


def ld(tag: bytes, body: bytes) -> bytes:
    """A length-delimited field: its tag (written by hand), a one-byte length, the bytes."""
    assert len(body) < 0x80
    return tag + bytes([len(body)]) + body


def frame_bytes(command: bytes, metadata: bytes | None = None) -> bytes:
    """[totalSize][commandSize][command], then for payload frames (no checksum)
    [metadataSize][metadata] and a 3-byte payload."""
    rest = b"" if metadata is None else struct.pack(">I", len(metadata)) + metadata + b"abc"
    return struct.pack(">II", 4 + len(command) + len(rest), len(command)) + command + rest


def only_frame(data: bytes) -> Frame:
    frames, anomalies, _ = decode([data])
    assert anomalies == [] and len(frames) == 1
    return frames[0]


def test_send_metadata_entry_hash_range_decodes_as_known_fields() -> None:
    # Tags are (field number << 3) | wire type, as varints: 33 << 3 | 0 = 264 = 0x88 0x02,
    # 34 << 3 | 0 = 272 = 0x90 0x02. Values: 0x1234 = 4660 -> 0xb4 0x24, 0xffff -> 0xff 0xff 0x03.
    metadata = (
        ld(b"\x0a", b"p")  # producer_name (1, length-delimited)
        + b"\x10\x07"  # sequence_id (2) = 7
        + b"\x18\x01"  # publish_time (3) = 1
        + b"\x88\x02\xb4\x24"  # entry_hash_min (33) = 0x1234
        + b"\x90\x02\xff\xff\x03"  # entry_hash_max (34) = 0xffff
    )
    # BaseCommand: type (1) = SEND (6); send (6 << 3 | 2 = 0x32): producer_id 1, sequence_id 7.
    command = b"\x08\x06" + ld(b"\x32", b"\x08\x01\x10\x07")
    f = only_frame(frame_bytes(command, metadata))
    assert f.command_name == "SEND" and f.payload is not None and bytes(f.payload) == b"abc"
    assert unknown_fields(f.metadata) == [] and unknown_fields(f.command) == []
    assert (f.metadata.entry_hash_min, f.metadata.entry_hash_max) == (0x1234, 0xFFFF)


def test_scalable_topic_lookup_create_if_missing_decodes_as_known_field() -> None:
    # BaseCommand.type (1) = 70; scalableTopicLookup: 70 << 3 | 2 = 562 = 0xb2 0x04.
    body = b"\x08\x05" + ld(b"\x12", b"topic://t/n/x")  # session_id (1) = 5, topic (2)
    explicit = only_frame(frame_bytes(b"\x08\x46" + ld(b"\xb2\x04", body + b"\x18\x00")))
    assert explicit.command_name == "SCALABLE_TOPIC_LOOKUP"
    assert unknown_fields(explicit.command) == []
    # create_if_missing (3 << 3 | 0 = 0x18) = false, as sent; absent, upstream's default: true.
    assert explicit.body.HasField("create_if_missing") and explicit.body.create_if_missing is False
    absent = only_frame(frame_bytes(b"\x08\x46" + ld(b"\xb2\x04", body)))
    assert not absent.body.HasField("create_if_missing") and absent.body.create_if_missing is True


def test_segment_entry_bucket_splits_decode_as_known_fields() -> None:
    # entry_bucket_splits (12): unpacked, tag 12 << 3 | 0 = 0x60, one value each; packed,
    # tag 12 << 3 | 2 = 0x62 and the varints in one length-delimited field. Proto2 readers
    # take both. 0x4000 = 16384 -> 0x80 0x80 0x01, 0x8000 = 32768 -> 0x80 0x80 0x02.
    segment = (
        b"\x08\x00"  # segment_id (1) = 0
        + b"\x10\x00"  # hash_start (2) = 0
        + b"\x18\xff\xff\x03"  # hash_end (3) = 0xffff
        + b"\x20\x00"  # state (4) = ACTIVE
        + b"\x38\x01"  # created_at_epoch (7) = 1
        + b"\x48\x01"  # created_at_ms (9) = 1
    )
    unpacked = segment + b"\x60\x80\x80\x01" + b"\x60\x80\x80\x02"
    packed = segment + ld(b"\x62", b"\x80\x80\x01\x80\x80\x02")
    for splits in (unpacked, packed):
        dag = b"\x08\x03" + ld(b"\x12", splits)  # epoch (1) = 3, segments (2)
        update = b"\x08\x05" + ld(b"\x12", dag)  # session_id (1) = 5, dag (2)
        # BaseCommand.type = 71; scalableTopicUpdate: 71 << 3 | 2 = 570 = 0xba 0x04.
        f = only_frame(frame_bytes(b"\x08\x47" + ld(b"\xba\x04", update)))
        assert f.command_name == "SCALABLE_TOPIC_UPDATE"
        assert unknown_fields(f.command) == []
        assert list(f.body.dag.segments[0].entry_bucket_splits) == [0x4000, 0x8000]


def test_assigned_segment_bucket_ranges_decode_as_known_fields() -> None:
    # bucket_ranges (5): 5 << 3 | 2 = 0x2a, an IntRange each: start (1), end (2).
    # 0x7fff = 32767 -> 0xff 0xff 0x01; 0x8000 -> 0x80 0x80 0x02; 0xffff -> 0xff 0xff 0x03.
    segment = (
        b"\x08\x01"  # segment_id (1) = 1
        + b"\x10\x00"  # hash_start (2) = 0
        + b"\x18\xff\xff\x03"  # hash_end (3) = 0xffff
        + ld(b"\x22", b"segment://t/n/x/0000-ffff-1")  # segment_topic (4)
        + ld(b"\x2a", b"\x08\x00\x10\xff\xff\x01")  # bucket_ranges (5): [0, 0x7fff]
        + ld(b"\x2a", b"\x08\x80\x80\x02\x10\xff\xff\x03")  # [0x8000, 0xffff]
    )
    assignment = b"\x08\x03" + ld(b"\x12", segment)  # layout_epoch (1) = 3, segments (2)
    update = b"\x08\x09" + ld(b"\x12", assignment)  # consumer_id (1) = 9, assignment (2)
    # BaseCommand.type = 75; scalableTopicAssignmentUpdate: 75 << 3 | 2 = 602 = 0xda 0x04.
    f = only_frame(frame_bytes(b"\x08\x4b" + ld(b"\xda\x04", update)))
    assert f.command_name == "SCALABLE_TOPIC_ASSIGNMENT_UPDATE"
    assert unknown_fields(f.command) == []
    ranges = f.body.assignment.segments[0].bucket_ranges
    assert [(r.start, r.end) for r in ranges] == [(0, 0x7FFF), (0x8000, 0xFFFF)]
