"""The read plan (dissector.read.plan): what each read asks -> the stages it runs, decided once.

The expected stages are written out here from what each table's rows are made of
(docs/tables.md, docs/architecture.md): payloads for the tables whose rows come from decoded
payloads or count their anomalies, pairs for the timeline and the findings, frames one by
one for findings and journeys. A frames-only read is checked by spies: it makes no
MessageExtractor and pairs nothing, and its frames table is the full read's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dissector.pipeline import Pipeline
from dissector.pulsar.messages import MessageExtractor
from dissector.read import ReaderOptions, read_tables
from dissector.read.plan import EVENTS, SPANS, TEXT, ReadPlan, plan_read, plan_table
from dissector.tables.schema import TABLES as REGISTRY

PCAPS = Path(__file__).resolve().parents[2] / "pcaps"
#: Samples with compressed and batched payloads: the work a frames-only read skips.
SAMPLES = ["compression_zstd.pcap", "compression_lz4.pcap", "batching.pcap", "acks.pcap"]

#: table -> (payloads, pairs, frame_runs, findings, journeys) when it is read alone
ALONE = {
    "frames": (False, False, True, False, False),
    "messages": (True, False, False, False, False),
    "anomalies": (True, False, False, False, False),
    "conversations": (True, False, False, False, False),  # its anomaly counts
    "timeline": (False, True, False, False, False),
    "entities": (False, False, True, False, False),
    "findings": (False, True, False, True, False),  # the request rules read the pairs
    "checks": (False, True, False, True, False),  # made by the findings' Diagnoser
    "journeys": (True, True, False, False, True),  # receipts: the facts pair them
}


def stages(plan: ReadPlan) -> tuple[bool, ...]:
    return (plan.payloads, plan.pairs, plan.frame_runs, plan.findings, plan.journeys)


def test_every_table_alone_runs_only_its_stages() -> None:
    assert set(ALONE) == set(REGISTRY)
    for name, expected in ALONE.items():
        assert stages(plan_read(ReaderOptions(), [name])) == expected, name


def test_tables_together_run_the_union_of_their_stages() -> None:
    # the union, except frame runs: any table reading frames one by one (or any stage that
    # reads every frame) takes them away from all
    for a in REGISTRY:
        for b in REGISTRY:
            got = stages(plan_read(ReaderOptions(), [a, b]))
            pa, pb = ALONE[a], ALONE[b]
            union = [x or y for x, y in zip(pa, pb, strict=True)]
            runs = pa[2] and pb[2]
            assert got == (union[0], union[1], runs, union[3], union[4]), (a, b)


def test_every_table_by_default() -> None:
    plan = plan_read(ReaderOptions())
    assert plan.tables == tuple(REGISTRY)
    assert stages(plan) == (True, True, False, True, True)


def test_options_turn_a_stage_off_never_on() -> None:
    off = ReaderOptions(messages=False, pairs=False)
    assert stages(plan_read(off, ["messages", "timeline"])) == (False, False, True, False, False)
    assert not plan_read(off, None, TEXT).payloads
    assert not plan_read(ReaderOptions(), ["frames"]).payloads  # on, but not needed


def test_the_findings_with_values_get_schema_facts_and_no_payloads() -> None:
    """diagnose --values: the schema facts follow their frames (schema.incompatible compares
    the schemas) while no payload is decoded; without values, or without findings (or the
    checks, made by the same Diagnoser), none."""
    values = ReaderOptions(values=True)
    plan = plan_read(values, ["findings"])
    assert (plan.schemas, plan.payloads) == (True, False)
    assert not plan_read(ReaderOptions(), ["findings"]).schemas
    assert plan_read(values, ["checks"]).schemas  # the findings' Diagnoser makes the checks
    for name in sorted(set(REGISTRY) - {"findings", "checks"}):
        assert not plan_read(values, [name]).schemas, name
    assert plan_read(values, ["findings", "messages"]).schemas


def test_what_reads_every_frame_takes_no_runs() -> None:
    assert not plan_read(ReaderOptions(fields=True), ["frames"]).frame_runs
    assert plan_read(ReaderOptions(fields=True), ["entities"]).frame_runs  # no fields made
    assert not plan_read(ReaderOptions(frame_bytes=True), ["frames"]).frame_runs


def test_the_front_ends() -> None:
    options = ReaderOptions()
    # the text view: payloads for its `!` lines, no pairs it would not print, no runs
    assert stages(plan_read(options, None, TEXT)) == (True, False, False, False, False)
    assert plan_read(options, ["timeline"], TEXT).pairs  # live: a timeline made beside it
    # the event API: what the options say, every frame an object
    assert stages(plan_read(options, None, EVENTS)) == (True, True, False, False, False)
    off = ReaderOptions(messages=False, pairs=False)
    assert stages(plan_read(off, None, EVENTS)) == (False, False, False, False, False)
    # read -w: connections' spans only, whatever the tables read for them
    assert stages(plan_read(options, ["conversations"], SPANS)) == (
        False, False, True, False, False,
    )  # fmt: skip
    with pytest.raises(ValueError, match="front end"):
        plan_read(options, None, "nowhere")


def test_the_docs_table_is_the_plan() -> None:
    table = plan_table()
    lines = table.splitlines()
    assert lines[0] == "| asked | `payloads` | `pairs` | `frame_runs` | `findings` | `journeys` |"
    assert "| `frames` | - | - | yes | - | - |" in lines
    assert "| `journeys` | yes | yes | - | - | yes |" in lines
    assert table in (Path(__file__).resolve().parents[2] / "docs" / "architecture.md").read_text()


class Spies:
    """MessageExtractors and pipelines the run driver makes, counted through its names."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.extractors = 0
        self.pipelines: list[dict[str, Any]] = []
        extractor, pipeline = MessageExtractor, Pipeline  # the names the driver calls

        def made_extractor(*args: Any, **kw: Any) -> Any:
            self.extractors += 1
            return extractor(*args, **kw)

        def made_pipeline(*args: Any, **kw: Any) -> Pipeline:
            self.pipelines.append(kw)
            return pipeline(*args, **kw)

        monkeypatch.setattr("dissector.read.driver.MessageExtractor", made_extractor)
        monkeypatch.setattr("dissector.read.driver.Pipeline", made_pipeline)


@pytest.fixture
def spies(monkeypatch: pytest.MonkeyPatch) -> Spies:
    return Spies(monkeypatch)


@pytest.mark.parametrize("sample", SAMPLES)
def test_a_frames_only_read_decodes_no_payload(spies: Spies, sample: str) -> None:
    path = str(PCAPS / sample)
    frames = read_tables(path, tables=["frames"])["frames"]
    assert spies.extractors == 0
    assert spies.pipelines and all(
        kw["messages"] is None and kw["pairs"] is False and kw["frame_runs"] is True
        for kw in spies.pipelines
    )
    full = read_tables(path)
    assert spies.extractors == len(spies.pipelines) - 1  # the full read's pipeline has one
    assert spies.pipelines[-1]["pairs"] is True
    assert frames.num_rows > 0 and frames.equals(full["frames"])
    assert full["messages"].num_rows > 0  # there were payloads to decode


def test_pipeline_refuses_frame_runs_with_a_stage_that_reads_every_frame() -> None:
    Pipeline(pairs=False, frame_runs=True)
    with pytest.raises(ValueError, match="frame_runs"):
        Pipeline(pairs=True, frame_runs=True)
    with pytest.raises(ValueError, match="frame_runs"):
        Pipeline(pairs=False, frame_bytes=True, frame_runs=True)
