"""The pandas face of the library: what a notebook user expects of `read_capture`.

Expected values come from the capture's own columns by another route (timestamps for
durations), from the client's record in the sample's manifest, or from the API's
documented contract (which tables were asked for), not from the conversion under test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import dissector
from dissector import UsageError, iter_events, read_capture
from dissector.pulsar.wire import COMMAND_TYPES

PCAPS = Path(__file__).resolve().parents[1] / "pcaps"
Sample = tuple[Path, dict[str, Any]]  # a capture, the manifest its client recorded


@pytest.fixture(scope="module")
def produce_consume() -> Sample:
    """The sample capture and its manifest (tests/test_apache_golden.py: Apache's broker)."""
    return PCAPS / "produce_consume.pcap", json.loads(
        (PCAPS / "produce_consume.manifest.json").read_text()
    )


def test_only_the_tables_asked_for_are_read(produce_consume: Sample) -> None:
    path, manifest = produce_consume
    cap = read_capture(path, tables=["frames"])
    assert list(cap.arrow) == ["frames"]
    assert (cap.frames["command"] == "SEND").sum() == len(manifest["sent"])
    with pytest.raises(UsageError, match=r"tables=\[\.\.\., 'messages'\]"):
        _ = cap.messages
    with pytest.raises(UsageError, match="no table nope"):
        read_capture(path, tables=["nope"])


def test_dataframes_are_made_once_and_keep_edits(produce_consume: Sample) -> None:
    path, _ = produce_consume
    cap = read_capture(path)
    frames = cap.frames
    frames["mine"] = 1
    assert cap.frames is frames and "mine" in cap.frames.columns


def test_low_cardinality_strings_are_categoricals(produce_consume: Sample) -> None:
    path, _ = produce_consume
    cap = read_capture(path)
    for table, column in (("frames", "command"), ("frames", "direction"),
                          ("timeline", "outcome"), ("anomalies", "code")):  # fmt: skip
        assert isinstance(cap.table(table)[column].dtype, pd.CategoricalDtype), (table, column)
    assert set(cap.frames["command"].cat.categories) <= set(COMMAND_TYPES)
    assert not isinstance(cap.frames["topic"].dtype, pd.CategoricalDtype)  # many: stays text


def test_durations_are_also_timedeltas(produce_consume: Sample) -> None:
    path, _ = produce_consume
    timeline = read_capture(path).timeline
    answered = timeline.dropna(subset=["latency_us"])
    assert len(answered) > 0
    assert answered["latency"].dtype == "timedelta64[us]"
    assert (answered["latency"] == answered["response_ts"] - answered["request_ts"]).all()
    assert (answered["latency"] // pd.Timedelta(microseconds=1) == answered["latency_us"]).all()
    conversations = read_capture(path).conversations
    assert (conversations["duration"] == conversations["end_ts"] - conversations["ts"]).all()


def test_repr_names_the_files_and_rows(produce_consume: Sample) -> None:
    path, _ = produce_consume
    cap = read_capture(path, tables=["frames", "messages"])
    text = repr(cap)
    assert str(path) in text
    assert f"frames={len(cap.frames)}" in text and f"messages={len(cap.messages)}" in text


def test_iter_events_yields_exported_types(produce_consume: Sample) -> None:
    path, _ = produce_consume
    kinds = {type(ev) for _, ev in iter_events(path)}
    assert len(kinds) >= 5
    for kind in kinds:
        assert kind.__name__ in dissector.__all__ and getattr(dissector, kind.__name__) is kind
