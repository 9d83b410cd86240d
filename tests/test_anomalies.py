"""The anomaly registry is the one place a code is written (dissector/anomalies.py).

Every other module names a code (`AnomalyCode.TCP_GAP`), never writes its string: a code typed
twice can drift (a typo is a new, undocumented code that `Anomaly.of` only refuses when that
path runs). Each code has one line of description, one severity, one name; codes are stable
public data (users filter on them), so the codes of the first release are pinned here.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Collection
from pathlib import Path

from dissector import anomalies, findings
from dissector.anomalies import REGISTRY, AnomalyCode, Severity
from dissector.findings import REGISTRY as FINDINGS
from dissector.findings import FindingCode, Thresholds

PACKAGE = Path(__file__).resolve().parent.parent / "dissector"

#: The codes as published before the registry named them (b7eb92b): never renamed, never
#: removed (new ones may be added).
PUBLISHED = [
    "pulsar.frame_too_large",
    "pulsar.frame_too_small",
    "pulsar.command_size_invalid",
    "pulsar.command_undecodable",
    "pulsar.unknown_command_type",
    "pulsar.command_missing_body",
    "pulsar.invalid_utf8",
    "pulsar.trailing_bytes",
    "pulsar.payload_missing",
    "pulsar.bad_magic",
    "pulsar.bad_checksum",
    "pulsar.metadata_size_invalid",
    "pulsar.metadata_undecodable",
    "pulsar.broker_entry_metadata_invalid",
    "pulsar.skipped_bytes",
    "pulsar.truncated_frame",
    "pulsar.encrypted",
    "proxy.header_invalid",
    "tls.alert",
    "tls.handshake_failure",
    "tls.no_key",
    "tls.waiting_dropped",
    "tls.decrypt_failed",
    "tls.unsupported_cipher",
    "tls.skipped_bytes",
    "tls.truncated_record",
    "tls.certificate_undecodable",
    "payload.decompression_failed",
    "payload.size_mismatch",
    "payload.decompression_bomb",
    "payload.batch_invalid",
    "payload.chunk_missing",
    "payload.chunk_duplicate",
    "payload.chunk_size_mismatch",
    "payload.chunk_count_invalid",
    "payload.encrypted",
    "tcp.gap",
    "tcp.midstream_start",
    "tcp.retransmission_mismatch",
    "tcp.out_of_order_overflow",
    "tcp.data_after_close",
    "tcp.flow_evicted",
    "net.ip_fragment",
    "net.ip_fragment_overlap",
    "net.encapsulation_too_deep",
    "net.truncated_header",
    "net.bad_header",
    "net.unsupported_linktype",
    "capture.truncated",
    "capture.corrupt_record",
    "capture.bad_timestamp",
    "capture.kernel_drops",
    "capture.not_dissected",
]


def named() -> dict[str, str]:
    """AnomalyCode's names -> codes."""
    return {k: v for k, v in vars(AnomalyCode).items() if k.isupper()}


def written_codes(path: Path, registry: Collection[str] = REGISTRY) -> list[str]:
    """`line: code` for each string literal of the file that is a registered code, or that
    quotes one (Python source held in a string, such as a table column's expression)."""
    quoted = re.compile(r"""["']([a-z]+\.[a-z0-9_]+)["']""")
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            inner = [c for c in quoted.findall(node.value) if c in registry]
            for code in [node.value] if node.value in registry else inner:
                found.append(f"{node.lineno}: {code}")
    return found


def test_no_code_is_written_outside_the_registry() -> None:
    offences = {
        str(path.relative_to(PACKAGE.parent)): hits
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != PACKAGE / "anomalies.py" and "_pb" not in path.parts
        for hits in [written_codes(path)]
        if hits
    }
    assert offences == {}, "name these codes AnomalyCode.<NAME> (dissector/anomalies.py)"


def test_no_finding_code_is_written_outside_its_registry() -> None:
    offences = {
        str(path.relative_to(PACKAGE.parent)): hits
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != PACKAGE / "findings.py" and "_pb" not in path.parts
        for hits in [written_codes(path, FINDINGS)]
        if hits
    }
    assert offences == {}, "name these codes FindingCode.<NAME> (dissector/findings.py)"


def test_the_scan_finds_a_written_finding_code(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text('A = "flow.starved"\nB = "c == \'producer.busy\'"\nC = "flow.x"\n')
    assert written_codes(source, FINDINGS) == ["1: flow.starved", "2: producer.busy"]


def test_every_finding_code_is_named_documented_and_unique() -> None:
    names = {k: v for k, v in vars(FindingCode).items() if k.isupper()}
    assert len(set(names.values())) == len(names), "two names for one code"
    assert len(findings._TABLE) == len(FINDINGS), "a code described twice"
    assert set(names.values()) == set(FINDINGS), "a code named but not described, or not named"
    assert not set(FINDINGS) & set(REGISTRY), "a code both a finding and an anomaly"
    options = set(Thresholds.__dataclass_fields__)
    for name, code in names.items():
        assert re.fullmatch(r"[a-z]+\.[a-z0-9_]+", code), code
        assert name == code.replace(".", "_").upper(), (name, code)
        kind = FINDINGS[code]
        assert kind.code == code and isinstance(kind.severity, Severity)
        for text in (kind.title, kind.hint):
            assert text.strip() and "\n" not in text, code
        assert kind.threshold is None or kind.threshold in options, code


#: The codes issue 28 names: never renamed, never removed.
PUBLISHED_FINDINGS = [
    "flow.no_flow_after_subscribe", "flow.starved", "flow.overshoot", "producer.send_timeout",
    "producer.receipt_out_of_order", "producer.sequence_regression", "producer.busy",
    "consumer.redelivered_after_ack", "consumer.redelivery_storm", "consumer.ack_hole",
    "keepalive.unanswered", "lookup.redirect_loop", "request.unanswered",
    "request.unknown_response", "request.id_reused", "message.oversize",
    "topic.migrated_not_followed", "chunk.incomplete_expired", "connection.wrong_protocol",
    "checksum.mismatch_hop",
]  # fmt: skip


def test_published_finding_codes_are_stable() -> None:
    assert [c for c in PUBLISHED_FINDINGS if c not in FINDINGS] == []
    assert Thresholds().send_timeout == 30.0 and Thresholds().chunk_expiry == 60.0


def test_the_scan_finds_a_written_code(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text('A = "tcp.gap"\nB = "x == \'tls.alert\'"\nC = "tcp.gapless"\n')
    assert written_codes(source) == ["1: tcp.gap", "2: tls.alert"]


def test_every_code_is_named_documented_and_unique() -> None:
    names = named()
    assert len(set(names.values())) == len(names), "two names for one code"
    assert len(anomalies._TABLE) == len(REGISTRY), "a code described twice"
    assert set(names.values()) == set(REGISTRY), "a code named but not described, or not named"
    for name, code in names.items():
        assert re.fullmatch(r"[a-z]+\.[a-z0-9_]+", code), code
        assert name == code.replace(".", "_").upper(), (name, code)
        kind = REGISTRY[code]
        assert kind.code == code
        assert isinstance(kind.severity, Severity)
        assert kind.summary.strip() and "\n" not in kind.summary, code


def test_published_codes_are_stable() -> None:
    assert len(PUBLISHED) == len(set(PUBLISHED)) == 53
    assert [c for c in PUBLISHED if c not in REGISTRY] == []
    assert AnomalyCode.TCP_GAP == "tcp.gap"  # the name stands for the very same string
    assert type(AnomalyCode.TCP_GAP) is str
