"""The golden scenarios against Apache Pulsar's own broker: every capture of pcaps/ made again
in the session, and the golden tests' assertions run on them.

Input:  the scenarios of scripts/make_sample_pcaps.py (the official Python client, as for
        the committed pulsar-lite captures), recorded once per module by tcpdump on the
        shared Apache broker's port (`apache_broker`); the keepalive scenario, which wants a
        2 s keep-alive, on a broker of its own with `keepAliveIntervalSeconds`. The
        partitioned topic is made with the admin API beforehand (Apache's broker creates
        topics unpartitioned), with the partitions pulsar-lite's default gave.
Output: the golden tests (test_golden_captures, _messages, _timeline, test_pandas_api)
        collected again here, on these captures (their fixtures `sample`, `chunked`,
        `produce_consume`, `keepalive` are this module's); what Apache's broker does unlike
        pulsar-lite, said from the client's record, the broker's config and its admin API;
        the Spark source over one of these captures.
Rule:   expected values come from the client's record (the manifest), the broker's own
        settings and admin API, or the spec; never from our tables. Nothing is timed: the
        capture ends when every connection's end is in the file (capture.wait_closed).
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from dissector.read import Capture, read_capture
from tests.frontends.conftest import _sessions, spark  # noqa: F401  (the Spark test's session)
from tests.support.apache.admin import admin, topic_path
from tests.support.apache.broker import ApacheBroker
from tests.support.broker_traits import APACHE
from tests.support.capture import capture_scenario
from tests.support.samples import identity
from tests.support.scripts import load_script
from tests.test_diagnose_no_false_alarm import (  # noqa: F401  (no false alarm on them either)
    test_a_scene_has_only_the_findings_its_scenario_made,
)
from tests.test_golden_captures import (  # noqa: F401  (collected here, on this module's captures)
    test_broker_endpoint_and_handshake,
    test_clean_capture_has_no_anomalies,
    test_deliveries_match_what_the_client_received,
    test_every_stream_byte_is_a_frame_byte,
    test_frames_are_time_ordered_per_direction,
    test_sends_and_receipts_match_what_the_client_sent,
    test_topics_named_by_frames,
)
from tests.test_golden_messages import (  # noqa: F401
    test_chunked_message_is_joined,
    test_delivered_ids_and_topics,
    test_delivered_messages_include_everything_the_client_received,
    test_payload_preview_is_opt_in,
    test_produced_messages_are_what_the_client_sent,
)
from tests.test_golden_timeline import (  # noqa: F401
    test_acks_the_client_made_pair_with_deliveries,
    test_entities_are_what_the_client_created,
    test_every_request_with_an_id_is_answered,
    test_every_send_has_its_receipt,
    test_keepalive_pings_are_answered,
    test_latency_is_the_difference_of_the_frames_timestamps,
)
from tests.test_pandas_api import (  # noqa: F401
    test_dataframes_are_made_once_and_keep_edits,
    test_durations_are_also_timedeltas,
    test_iter_events_yields_exported_types,
    test_low_cardinality_strings_are_categoricals,
    test_only_the_tables_asked_for_are_read,
    test_repr_names_the_files_and_rows,
)

pytestmark = [pytest.mark.peers, pytest.mark.apache, pytest.mark.capture, pytest.mark.tools]

SPECS = load_script("make_sample_pcaps").CAPTURES
NAMES = [spec.name for spec in SPECS]
#: the keep-alive interval of the shared broker (Apache's default) and of capture_scenario's
DEFAULT_KEEPALIVE = 30
Recorded = tuple[Path, dict[str, Any]]  # a capture and the manifest its client recorded


def _record(spec: Any, broker: ApacheBroker, out: Path) -> Recorded:
    """One scenario under tcpdump on `broker`'s port."""
    kw = dict(spec.kwargs)
    partitions = (spec.broker_config or {}).get("default_partitions")
    if partitions:  # pulsar-lite partitions every new topic; here it is made beforehand
        kw["topic"] = f"persistent://public/default/partitioned-{uuid.uuid4().hex[:12]}"
        admin(broker, "PUT", f"{topic_path(kw['topic'])}/partitions", partitions)
    path = out / spec.filename
    manifest, _ = capture_scenario(
        spec.scenario,
        path,
        name=spec.name,
        description=spec.description,
        gzip_output=spec.gzip_output,
        broker=broker,
        settle=0.0,
        **kw,
    )
    manifest["admin_partitions"] = partitions
    return path, manifest


@pytest.fixture(scope="module")
def recordings(
    apache_broker: ApacheBroker, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Recorded]:
    """Every golden scenario recorded once against Apache's broker: name -> recording."""
    out = tmp_path_factory.mktemp("apache-golden")
    done = {
        spec.name: _record(spec, apache_broker, out)
        for spec in SPECS
        if spec.keep_alive_interval_secs == DEFAULT_KEEPALIVE
    }
    for spec in SPECS:
        if spec.keep_alive_interval_secs != DEFAULT_KEEPALIVE:
            keepalive = {"keepAliveIntervalSeconds": str(spec.keep_alive_interval_secs)}
            with ApacheBroker(extra=keepalive) as broker:
                done[spec.name] = _record(spec, broker, out)
    return done


def _read(recorded: Recorded) -> tuple[Capture, dict[str, Any]]:
    path, manifest = recorded
    return read_capture(path, ports=[manifest["broker_port"]]), manifest


@pytest.fixture(scope="module", params=NAMES)
def sample(
    request: pytest.FixtureRequest, recordings: dict[str, Recorded]
) -> tuple[Capture, dict[str, Any]]:
    return _read(recordings[request.param])


@pytest.fixture(scope="module")
def chunked(recordings: dict[str, Recorded]) -> tuple[Capture, dict[str, Any]]:
    return _read(recordings["chunked"])


@pytest.fixture(scope="module")
def produce_consume(recordings: dict[str, Recorded]) -> Recorded:
    return recordings["produce_consume"]


@pytest.fixture(scope="module")
def keepalive(recordings: dict[str, Recorded]) -> Capture:
    return _read(recordings["keepalive"])[0]


# ------------------------------------------------------------------ unlike pulsar-lite


def test_every_scenario_was_recorded_against_apache_pulsar(
    recordings: dict[str, Recorded], apache_broker: ApacheBroker
) -> None:
    assert sorted(recordings) == sorted(NAMES)
    for _, m in recordings.values():
        assert m["broker"]["implementation"] == APACHE
        assert m["versions"][APACHE] == apache_broker.version
        assert "pulsar-lite" not in m["versions"]


def test_no_workaround_was_needed(sample: tuple[Capture, dict[str, Any]]) -> None:
    """pulsar-lite's runs record quirks (duplicate dispatch, nothing dispatched after SEEK
    until a nudge message): Apache's broker needed none, every send succeeded."""
    _, m = sample
    assert m["quirks"] == []
    assert all(s["result"] == "Ok" and "nudge" not in s["properties"] for s in m["sent"])
    assert not any(r.get("unexpected_duplicate") for r in m["received"])


def test_every_message_carries_the_brokers_entry_metadata(
    sample: tuple[Capture, dict[str, Any]],
) -> None:
    """The broker runs AppendBrokerTimestamp/AppendIndexMetadataInterceptor, exposed to
    clients (its config in the manifest): every MESSAGE has magic 0x0e02 ahead of its
    checksum; the timestamp was taken between the client's send and its receive (one clock,
    loopback); on a fresh topic the index counts the messages up to the entry's last, from 0."""
    cap, m = sample
    conf = m["broker"]["standalone_conf"]
    assert "exposingBrokerEntryMetadataToClientEnabled=true" in conf
    assert "AppendIndexMetadataInterceptor" in conf
    frames = cap.frames
    messages = frames[frames["command"] == "MESSAGE"]
    assert len(messages) > 0
    assert messages["broker_entry_index"].notna().all()
    assert messages["broker_entry_timestamp"].notna().all()
    assert (messages["checksum"] == "valid").all()
    sent_at: dict[tuple[str, int, int], float] = {}
    per_entry: Counter[tuple[str, int, int]] = Counter()
    for s in m["sent"]:
        key = (s["partition_topic"], s["message_id"]["ledger_id"], s["message_id"]["entry_id"])
        sent_at[key] = min(sent_at.get(key, s["sent_at"]), s["sent_at"])
        per_entry[key] += 1
    index: dict[tuple[str, int, int], int] = {}
    counted: defaultdict[str, int] = defaultdict(int)
    for key in sorted(per_entry):
        counted[key[0]] += per_entry[key]
        index[key] = counted[key[0]] - 1
    chunked = bool(m.get("chunks"))  # each chunk an entry: one message id, ids not counted
    for row in messages.itertuples():
        key = (row.topic, row.ledger_id, row.entry_id)
        if chunked:
            ((key, _),) = per_entry.items()  # the one message, named by its last chunk
        received = [
            r["received_at"]
            for r in m["received"]
            if (r["topic_name"], r["message_id"]["ledger_id"], r["message_id"]["entry_id"]) == key
        ]
        broker_ms = row.broker_entry_timestamp.timestamp() * 1000
        assert int(sent_at[key] * 1000) <= broker_ms, row
        assert not received or broker_ms <= max(received) * 1000, row
        if not chunked:
            assert row.broker_entry_index == index[key], row


def test_connected_names_the_brokers_max_message_size(
    sample: tuple[Capture, dict[str, Any]], apache_broker: ApacheBroker
) -> None:
    """pulsar-lite sends none (PEERS.md); Apache's broker its maxMessageSize setting."""
    cap, _ = sample
    config = admin(apache_broker, "GET", "/admin/v2/brokers/configuration/runtime")
    assert set(cap.conversations["max_message_size"]) == {int(config["maxMessageSize"])}


def test_partitions_are_the_admin_apis(recordings: dict[str, Recorded]) -> None:
    """PARTITIONED_METADATA answers the partitions made with the admin API; each partition
    is looked up, produced to and subscribed to by name."""
    path, m = recordings["partitioned"]
    assert len(m["partitions"]) == m["admin_partitions"] == 3
    frames = read_capture(path, ports=[m["broker_port"]], fields=True).frames
    answers = frames.loc[frames["command"] == "PARTITIONED_METADATA_RESPONSE", "fields"]
    assert len(answers) > 0
    assert {json.loads(a)["partitions"] for a in answers} == {m["admin_partitions"]}
    for command in ("LOOKUP", "PRODUCER", "SUBSCRIBE"):
        assert set(frames.loc[frames["command"] == command, "topic"]) >= set(m["partitions"])
    assert set(m["sent_per_partition"]) <= set(m["partitions"])


def test_a_seek_closes_the_consumer_and_it_subscribes_again(
    recordings: dict[str, Recorded],
) -> None:
    """pulsar-lite answers SEEK and dispatches nothing; Apache's broker closes the consumer
    (CLOSE_CONSUMER, request_id -1: a notification) and the client subscribes again."""
    cap, m = _read(recordings["seek"])
    frames = cap.frames
    seeks = frames[frames["command"] == "SEEK"]
    closes = frames[
        (frames["command"] == "CLOSE_CONSUMER") & (frames["direction"] == "broker_to_client")
    ]
    assert len(seeks) == len(closes) == len(m["seeks"]) == 2
    assert (closes["request_id"] == -1).all()
    assert (frames["command"] == "SUBSCRIBE").sum() == 1 + len(m["seeks"])
    for seek_ts, close_ts in zip(seeks["ts"], closes["ts"], strict=True):
        assert seek_ts <= close_ts
    phases = Counter(r["phase"] for r in m["received"])
    assert phases["after_seek_message_id"] > 0 and phases["after_seek_publish_time"] > 0


def test_values_of_producers_without_schema(recordings: dict[str, Recorded]) -> None:
    """The client's producers were made without a schema (their options in the record):
    asked for values, every message is BYTES (not declared), its bytes the client's."""
    path, m = recordings["produce_consume"]
    assert all("schema" not in p["options"] for p in m["producers"])
    msgs = read_capture(path, ports=[m["broker_port"]], values=True).messages
    assert len(msgs) == len(m["sent"]) + len(m["received"])
    assert (msgs["value_schema"] == "BYTES (not declared)").all()
    got = Counter(
        hashlib.sha256(base64.b64decode(json.loads(v))).hexdigest() for v in msgs["value"]
    )
    assert got == Counter(e["sha256"] for e in [*m["sent"], *m["received"]])


@pytest.mark.spark
def test_the_spark_source_reads_a_capture_of_apaches_broker(
    spark: SparkSession,  # noqa: F811  (the fixture imported above)
    recordings: dict[str, Recorded],
) -> None:
    path, m = recordings["produce_consume"]
    read = spark.read.format("pulsar")
    msgs = [r.asDict() for r in read.option("table", "messages").load(str(path)).collect()]

    def rows(kind: str) -> Counter[tuple[Any, ...]]:
        return Counter(
            identity(r["payload_sha256"], r["payload_size"], r["key"], r["properties"])
            for r in msgs
            if r["kind"] == kind
        )

    assert rows("produced") == Counter(
        identity(s["sha256"], s["size"], s["key"], s["properties"]) for s in m["sent"]
    )
    assert rows("delivered") >= Counter(
        identity(r["sha256"], r["size"], r["key"], r["properties"]) for r in m["received"]
    )
    frames = read.option("table", "frames").load(str(path))
    deliveries = [r.asDict() for r in frames.where("command = 'MESSAGE'").collect()]
    assert {(r["ledger_id"], r["entry_id"]) for r in deliveries} == {
        (r["message_id"]["ledger_id"], r["message_id"]["entry_id"]) for r in m["received"]
    }
    assert all(r["checksum"] == "valid" and r["broker_entry_index"] is not None for r in deliveries)
