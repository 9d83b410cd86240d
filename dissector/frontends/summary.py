"""Summaries of dissected captures: per-connection overview, latencies, errors, unanswered.

Input: the Arrow tables of one or more captures (as from `read_tables`).
Output: a JSON-ready dict (`summarize`) and its text rendering (`render`).
Rule: every number is computed from the tables alone, so a summary can always be checked
against them; latency percentiles use answered pairs only (outcome success or error).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from dissector.reader import to_pandas

PERCENTILES = (0.5, 0.9, 0.99)


def summarize(tables: dict[str, pa.Table]) -> dict[str, Any]:
    conv = to_pandas(tables["conversations"])
    timeline = to_pandas(tables["timeline"])
    anomalies = to_pandas(tables["anomalies"])
    connections = []
    for row in conv.sort_values("conn_id").itertuples():
        connections.append(
            {
                "conn_id": int(row.conn_id),
                "client": f"{row.client_ip}:{row.client_port}",
                "broker": f"{row.broker_ip}:{row.broker_port}",
                "start": row.ts.isoformat(),
                "duration_s": round(int(row.duration_us) / 1e6, 6),
                "ended": row.ended,
                "encrypted": bool(row.encrypted),
                "client_version": _opt(row.client_version),
                "server_version": _opt(row.server_version),
                "frames": [int(row.frames_c2b), int(row.frames_b2c)],
                "bytes": [int(row.stream_bytes_c2b), int(row.stream_bytes_b2c)],
                "gap_bytes": int(row.gap_bytes_c2b) + int(row.gap_bytes_b2c),
                "producers": _int(row.producers),
                "consumers": _int(row.consumers),
                "topics": list(row.topics) if row.topics is not None else [],
                "anomalies": int(row.anomalies),
            }
        )
    answered = timeline[timeline["outcome"].isin(["success", "error"])]
    latency: dict[str, dict[str, float | int]] = {}
    for command, group in answered.groupby("request_command"):
        us = group["latency_us"].astype("float64")
        stats: dict[str, float | int] = {"count": len(us)}
        for p in PERCENTILES:
            stats[f"p{round(p * 100)}_ms"] = round(float(us.quantile(p)) / 1000, 3)
        stats["max_ms"] = round(float(us.max()) / 1000, 3)
        latency[str(command)] = stats
    errors = timeline[timeline["outcome"] == "error"]
    unanswered = timeline[timeline["outcome"] == "unanswered"]
    unmatched = timeline[timeline["outcome"] == "unmatched"]
    return {
        "connections": connections,
        "latency": latency,
        "errors": {
            str(k): int(v) for k, v in errors["error_code"].fillna("?").value_counts().items()
        },
        "unanswered": {
            str(k): int(v) for k, v in unanswered["request_command"].value_counts().items()
        },
        "unmatched": {
            str(k): int(v) for k, v in unmatched["response_command"].value_counts().items()
        },
        "anomalies": {str(k): int(v) for k, v in anomalies["code"].value_counts().items()},
        "frames": int(tables["frames"].num_rows),
        "messages": int(tables["messages"].num_rows),
    }


def _opt(value: Any) -> Any:
    return None if value is None or value != value else value  # NaN -> None


def _int(value: Any) -> int | None:
    return None if value is None or value != value else int(value)


def render(summary: dict[str, Any]) -> str:
    """The summary as text, one section per heading."""
    lines = [
        f"{summary['frames']} frames, {summary['messages']} messages, "
        f"{len(summary['connections'])} connections"
    ]
    lines.append("")
    lines.append("Connections")
    for c in summary["connections"]:
        versions = f"{c['client_version'] or '?'} / {c['server_version'] or '?'}"
        lines.append(
            f"  #{c['conn_id']} {c['client']} -> {c['broker']} {c['duration_s']:.3f}s "
            f"ended={c['ended']} frames={c['frames'][0]}/{c['frames'][1]} "
            f"bytes={c['bytes'][0]}/{c['bytes'][1]} gaps={c['gap_bytes']} "
            f"producers={c['producers']} consumers={c['consumers']} "
            f"anomalies={c['anomalies']}{' TLS' if c['encrypted'] else ''} ({versions})"
        )
        for topic in c["topics"]:
            lines.append(f"      {topic}")
    lines.append("")
    lines.append("Latency per request (ms)")
    lines.append(f"  {'request':<32} {'count':>7} {'p50':>9} {'p90':>9} {'p99':>9} {'max':>9}")
    for command, s in sorted(summary["latency"].items()):
        lines.append(
            f"  {command:<32} {s['count']:>7} {s['p50_ms']:>9.3f} {s['p90_ms']:>9.3f} "
            f"{s['p99_ms']:>9.3f} {s['max_ms']:>9.3f}"
        )
    for title, key in (
        ("Errors by code", "errors"),
        ("Unanswered requests", "unanswered"),
        ("Unmatched responses", "unmatched"),
        ("Anomalies by code", "anomalies"),
    ):
        lines.append("")
        lines.append(title + ("" if summary[key] else ": none"))
        for name, count in sorted(summary[key].items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"  {name:<40} {count:>7}")
    return "\n".join(lines) + "\n"
