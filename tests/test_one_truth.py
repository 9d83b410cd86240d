"""One capture, one truth: every output reports the same anomalies, whatever was asked for.

For every bundled sample and for crafted captures holding each payload fault (a lying
`uncompressed_size`, smaller and larger, in every codec; a decompression bomb; an invalid
batch; a missing chunk), the anomalies of
- `read --table anomalies --format jsonl`,
- the text view's `!` lines (`read`, and `live` replaying the same packets),
- `summary --format json`,
- `read_capture(...).anomalies`
must be the same (code, connection and detail, in order; counts by code for the summary).
The crafted faults must be among them: what was put in is the independent expectation.
Tables that may be read without payload decoding (`WITHOUT_PAYLOADS`, the speed path)
must be the same with and without it.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from dissector.capture import open_capture
from dissector.frontends.cli import main
from dissector.frontends.live.loop import run
from dissector.frontends.live.options import LiveOptions
from dissector.read import ReaderOptions, read_capture, read_tables
from dissector.read.plan import WITHOUT_PAYLOADS, plan_read
from tests.support.live import FakeSource
from tests.support.payload_faults import ERRORS, crafted

PCAPS = Path(__file__).resolve().parent.parent / "pcaps"
SAMPLES = sorted(PCAPS.glob("*.pcap*"))


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, set[str]]]:
    made = crafted(tmp_path_factory.mktemp("one-truth"))
    return {**{p.name: (p, set()) for p in SAMPLES}, **made}


Key = tuple[int, str, str]  # conn_id, code, detail


def cli(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(list(argv)) == 0
    return out.getvalue()


_BANG = re.compile(r"^\s+!\s+(?:conn (\d+)|capture): (\S+) \(\w+\) (.*)$")


def bang_lines(text: str) -> list[Key]:
    found = []
    for line in text.splitlines():
        m = _BANG.match(line)
        if m:
            found.append((int(m[1] or 0), m[2], m[3]))
    return found


def from_table(path: Path, tmp: Path) -> list[Key]:
    out = tmp / "anomalies.jsonl"
    cli("read", str(path), "--table", "anomalies", "--format", "jsonl", "-o", str(out))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    return [(r["conn_id"] or 0, r["code"], r["detail"]) for r in rows]


def from_live(path: Path) -> list[Key]:
    with open_capture(path) as reader:
        pkts = [(p.ts, p.data) for p in reader]
    out = io.StringIO()
    assert run(LiveOptions(count=len(pkts)), out, io.StringIO(), FakeSource(pkts, 1)) == 0
    return bang_lines(out.getvalue())


@pytest.mark.slow  # every output of every sample and crafted capture (~9 s)
def test_every_output_reports_the_same_anomalies(
    captures: dict[str, tuple[Path, set[str]]], tmp_path: Path
) -> None:
    for name, (path, codes) in captures.items():
        table = from_table(path, tmp_path)
        assert bang_lines(cli("read", str(path))) == table, name
        summary = json.loads(cli("summary", str(path), "--format", "json"))["anomalies"]
        assert summary == dict(Counter(code for _, code, _ in table)), name
        frame = read_capture(path).anomalies
        assert list(zip(frame.conn_id, frame.code, frame.detail, strict=True)) == table, name
        if path.suffix == ".pcap":  # live replays one link type: the crafted and most samples
            assert from_live(path) == table, name
        if codes:
            assert codes & {code for _, code, _ in table}, (name, table)


def test_skipping_payloads_changes_no_table_that_skips_them(
    captures: dict[str, tuple[Path, set[str]]],
) -> None:
    for name, (path, _) in captures.items():
        full = read_tables(path, ReaderOptions(messages=True))
        fast = read_tables(path, ReaderOptions(messages=False))
        for table in WITHOUT_PAYLOADS:
            assert fast[table].equals(full[table]), (name, table)


def test_which_outputs_need_payload_decoding() -> None:
    def payloads(tables: list[str]) -> bool:
        return plan_read(ReaderOptions(), tables).payloads

    assert not payloads(["frames"]) and not payloads(sorted(WITHOUT_PAYLOADS))
    for table in ("messages", "anomalies", "conversations"):
        assert payloads([table]) and payloads(["frames", table])


def test_a_faulty_message_says_why_in_its_own_row(
    captures: dict[str, tuple[Path, set[str]]],
) -> None:
    """The messages table alone is never silent: an incomplete message always names its
    problem, a crafted fault shows in its message's row, a clean sample has none."""
    for name, (path, codes) in captures.items():
        messages = read_capture(path).messages
        assert messages[~messages.complete].problem.notna().all(), name
        if not codes:
            assert messages.problem.isna().all(), (name, set(messages.problem.dropna()))
            continue
        problems = set(messages.problem.dropna())
        assert problems and problems <= codes | ERRORS, (name, problems)
