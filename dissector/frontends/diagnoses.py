"""EDGE: findings ranked and grouped for people: `diagnose`'s text and JSON, the report's.

Input: rows of the findings table (dicts, as pyarrow's to_pylist gives them: timestamps as
datetimes, evidence as a list of packet numbers), and of the checks table.
Output: `ranked` (connections ordered by their worst finding, each with its findings ordered
and grouped by entity), `render` (plain text), `as_json` (a JSON-ready dict); `added_up`
(the checks rows of every capture, group or worker added up: counts add, maxima take the
largest, latency sketches add bucket by bucket) and `bill` (what was checked and what could
not be known, in words: the "clean bill" when nothing was found).
Rules: the rank is severity first (error, warning, info), then impact: how many times it
happened, then the measured value; a connection ranks by its worst finding; findings that
belong to no connection (conn_id 0) come last. Ties keep the table's order (stable sort),
which is the capture's, so the same capture gives the same text every run.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

from dissector.events import Finding
from dissector.findings import SEVERITY_RANK
from dissector.frontends.terminal import printable

Row = dict[str, Any]


def rank_key(row: Row) -> tuple[int, int, float]:
    """Severity first, then impact (count, then value): the most serious and largest first."""
    return (SEVERITY_RANK.get(row["severity"], 9), -(row["count"] or 0), -(row["value"] or 0.0))


def ranked(rows: Iterable[Row]) -> list[tuple[int, list[Row]]]:
    """(conn_id, its findings ranked), connections ordered by their worst finding."""
    by_conn: dict[int, list[Row]] = {}
    for row in rows:
        by_conn.setdefault(row["conn_id"], []).append(row)
    groups = []
    for conn_id, found in by_conn.items():
        found.sort(key=rank_key)
        # within a connection, one entity's findings stay together (its worst first)
        first: dict[str | None, int] = {}
        for i, row in enumerate(found):
            first.setdefault(row["entity"], i)
        found.sort(key=lambda r: first[r["entity"]])
        groups.append((conn_id, found))
    groups.sort(key=lambda g: (g[0] == 0, min(rank_key(r) for r in g[1])))
    return groups


def _time(value: dt.datetime | None) -> str:
    return "?" if value is None else value.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _endpoints(row: Row) -> str:
    if row["client_ip"] is None:
        return ""
    client = f"{row['client_ip']}:{row['client_port']}"
    return f"  {client} -> {row['broker_ip']}:{row['broker_port']}"


def evidence_text(row: Row) -> str:
    packets = row["evidence"] or []
    shown = ", ".join(str(p) for p in packets)
    if row["count"] and row["count"] > len(packets):
        shown += f" ({row['count']} in all)"
    return f"packets {shown}, {_time(row['first_ts'])} to {_time(row['last_ts'])}"


def finding_line(found: Finding, when: str) -> str:
    """One line for a finding as `live --findings` prints it when it is established."""
    where = f"conn {found.conn_id}" if found.conn_id else "across connections"
    text = f"finding ({when}): {found.severity.upper()} {found.code} {where}: {found.summary}"
    return printable(text) + "\n"


def row_line(row: Row) -> str:
    """One line for a findings row once complete (live), with its evidence."""
    where = f"conn {row['conn_id']}" if row["conn_id"] else "across connections"
    text = (
        f"finding: {row['severity'].upper()} {row['code']} {where}: {row['summary']} "
        f"(evidence: {evidence_text(row)})"
    )
    return printable(text) + "\n"


def added_up(checks: Iterable[Row], *, sketches: bool = False) -> dict[str, Row]:
    """Check name -> its rows added up (every capture, group or worker): count, entities,
    failed, unknown added; worst_us the largest; the latency sketches added, p99_us taken
    from the sum; detail in words (sketches: the sum kept, as `latency_buckets`)."""
    # imported here: `read`'s text and live import this module, never the rules' package
    from dissector.diagnose.checks import CHECKS, describe, merge, quantile

    out: dict[str, Row] = {}
    buckets: dict[str, list[list[int]]] = {}
    for row in checks:
        name = row["check"]
        got = out.setdefault(
            name,
            {"count": 0, "entities": 0, "failed": 0, "unknown": 0, "worst_us": None},
        )
        for key in ("count", "entities", "failed", "unknown"):
            got[key] += row[key] or 0
        worst = row["worst_us"]
        if worst is not None and (got["worst_us"] is None or worst > got["worst_us"]):
            got["worst_us"] = worst
        buckets.setdefault(name, []).append(row["latency_buckets"] or [])
    order = {name: i for i, name in enumerate(CHECKS)}
    for name in sorted(out, key=lambda n: order.get(n, len(order))):
        got = out.pop(name)
        summed = merge(buckets[name])
        got["p99_us"] = quantile(summed, 0.99, got["worst_us"])
        got["detail"] = describe(name, *_numbers(got))
        if sketches:
            got["latency_buckets"] = summed
        out[name] = got
    return out


def _numbers(got: Row) -> tuple[int, int, int, int, int | None, int | None]:
    return (
        got["count"],
        got["entities"],
        got["failed"],
        got["unknown"],
        got["worst_us"],
        got["p99_us"],
    )


def bill(checks: Iterable[Row], *, unknown: bool = True) -> str:
    """What the rules checked, then (unknown) what the capture could not tell them, in one
    line from the checks rows: "checked: ...; ... could not know: ...; ..."."""
    from dissector.diagnose.checks import BYTES, words  # as in added_up

    added = added_up(checks)
    said = [words(name, *_numbers(got)) for name, got in added.items()]
    checked = [c for (c, _), name in zip(said, added, strict=True) if c and name != BYTES]
    told = f"checked: {'; '.join(checked)}." if checked else "checked: no SEND, request or PING."
    lost = [u for _, u in said if u]
    if unknown and lost:
        told += f" could not know: {'; '.join(lost)}."
    return told


def render(rows: list[Row], checks: list[Row] | None = None) -> str:
    """The findings as text: a headline, then each connection with its findings; then what
    the rules checked (with the checks rows: when nothing was found, also what could not
    be known)."""
    if not rows:
        if checks is None:
            return "no findings: nothing the rules check went wrong in these captures\n"
        return printable(f"no findings. {bill(checks)}") + "\n"
    severities: dict[str, int] = {}
    for row in rows:
        severities[row["severity"]] = severities.get(row["severity"], 0) + 1
    groups = ranked(rows)
    told = ", ".join(
        f"{n} {s}{'s' if n > 1 else ''}"
        for s, n in sorted(severities.items(), key=lambda i: SEVERITY_RANK.get(i[0], 9))
    )
    findings = f"{len(rows)} finding{'s' if len(rows) > 1 else ''}"
    conns = f"{len(groups)} connection{'s' if len(groups) > 1 else ''}"
    lines = [f"{findings} in {conns} ({told})", ""]
    for conn_id, found in groups:
        head = "across connections" if conn_id == 0 else f"conn {conn_id}{_endpoints(found[0])}"
        lines.append(printable(head))
        for row in found:
            what = "  ".join(x for x in (row["entity"], row["topic"]) if x)
            lines.append(printable(f"  {row['severity'].upper():7} {row['code']}  {what}"))
            lines.append(printable(f"          {row['summary']}"))
            lines.append(printable(f"          why: {row['hint']}"))
            lines.append(printable(f"          evidence: {evidence_text(row)}"))
        lines.append("")
    if checks is not None:
        lines.extend([printable(bill(checks, unknown=False)), ""])
    return "\n".join(lines)


def as_json(rows: list[Row], checks: list[Row] | None = None) -> dict[str, Any]:
    """The findings ranked and grouped, times as ISO 8601 text; with the checks rows,
    `checked`: each check added up (`added_up`)."""

    def plain(row: Row) -> Row:
        return {k: v.isoformat() if isinstance(v, dt.datetime) else v for k, v in row.items()}

    out: dict[str, Any] = {
        "findings": len(rows),
        "connections": [
            {"conn_id": conn_id, "findings": [plain(r) for r in found]}
            for conn_id, found in ranked(rows)
        ],
    }
    if checks is not None:
        out["checked"] = added_up(checks)
    return out
