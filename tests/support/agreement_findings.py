"""One truth across tables, the findings' side: the findings request.unanswered,
request.unknown_response and producer.send_timeout name exactly the timeline rows their
rules' definitions (dissector/diagnose/requests.py, producers.py) select.

Input: a `Capture` read with every table, and the thresholds it was read with.
Output: one function per claim, giving the disagreements found as sentences naming the rows
(an empty list: the tables agree).
Rule: the findings' side is the findings table, the other side the timeline, conversations
and frames tables; the rules' thresholds and definitions (closed connection: all pending;
capture end: only those older than the timeout) are the docs' (docs/tables.md#finding-codes).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from dissector.findings import Thresholds
from dissector.read import Capture
from tests.support.agreement import ENTITY, Row, label, rows


def _horizons(cap: Capture) -> dict[int, tuple[int, bool]]:
    """conn_id -> (when its rules end, closed by FIN/RST/port reuse), as conversations say."""
    convs = rows(cap, "conversations")
    end = max((c["end_ts"] for c in convs), default=0)
    out = {}
    for c in convs:
        closed = c["ended"] in ("fin", "rst", "port_reuse")
        out[c["conn_id"]] = (c["end_ts"] if closed else max(c["end_ts"], end), closed)
    return out


def _agree(want: Mapping[Any, list[int]], found: Mapping[Any, Row], what: str) -> list[str]:
    """Each finding (by its key: connection, or connection and producer) names the timeline's
    packets `want` holds for that key: their count, its evidence among them; none without."""
    bad = []
    for key in want.keys() | found.keys():
        packets = sorted(want.get(key, []))
        f = found.get(key)
        if f is None:
            bad.append(f"{key}: timeline's {what} {packets[:8]} but no finding")
            continue
        where = label(f, "conn_id", "code", "count", "evidence")
        if f["count"] != len(packets):
            bad.append(f"finding {where}: timeline has {len(packets)} {what} {packets[:8]}")
        if not set(f["evidence"]) <= set(packets):
            bad.append(f"finding {where}: evidence not among the timeline's {what} {packets[:8]}")
    return bad


def unanswered_requests(cap: Capture, th: Thresholds | None = None) -> list[str]:
    """request.unanswered of a connection == its timeline rows with a request_id left
    unanswered: all when the connection closed, else those older than request_timeout."""
    limit = round((th or Thresholds()).request_timeout * 1e6)
    horizons = _horizons(cap)
    want: dict[int, list[int]] = defaultdict(list)
    for p in rows(cap, "timeline"):
        if p["outcome"] != "unanswered" or p["request_id"] is None:
            continue
        horizon, closed = horizons[p["conn_id"]]
        if closed or horizon - p["request_ts"] > limit:
            want[p["conn_id"]].append(p["request_packet"])
    found = {f["conn_id"]: f for f in rows(cap, "findings") if f["code"] == "request.unanswered"}
    return _agree(want, found, "unanswered requests")


def send_timeouts(cap: Capture, th: Thresholds | None = None) -> list[str]:
    """producer.send_timeout of a producer == its timeline SENDs answered later than
    send_timeout, unanswered (all when the connection closed, else those older than the
    timeout) or still unanswered when the client closed the producer."""
    limit = round((th or Thresholds()).send_timeout * 1e6)
    horizons = _horizons(cap)
    tl = rows(cap, "timeline")
    closes = {
        (p["conn_id"], p["producer_id"]): p["request_ts"]
        for p in tl
        if p["request_command"] == "CLOSE_PRODUCER" and p["request_direction"] == "client_to_broker"
    }
    want: dict[tuple[int, int], list[int]] = defaultdict(list)
    for p in tl:
        if p["request_command"] != "SEND":
            continue
        key = (p["conn_id"], p["producer_id"])
        horizon, closed = horizons[p["conn_id"]]
        answered = p["response_ts"] if p["outcome"] != "unanswered" else None
        closed_at = closes.get(key)
        if (
            (answered is not None and answered - p["request_ts"] > limit)
            or (answered is None and (closed or horizon - p["request_ts"] > limit))
            or (closed_at is not None and p["request_ts"] <= closed_at < (answered or horizon + 1))
        ):
            want[key].append(p["request_packet"])
    found: dict[tuple[int, int], Row] = {}
    for row in rows(cap, "findings"):
        m = ENTITY.match(row["entity"] or "")
        if row["code"] == "producer.send_timeout" and m:
            found[row["conn_id"], int(m[2])] = row
    return _agree(want, found, "timed-out SENDs")


def unknown_responses(cap: Capture) -> list[str]:
    """request.unknown_response of a connection whose history is whole (its CONNECT captured,
    no byte missing) == its timeline responses with a request_id that pair with no request."""
    whole = {f["conn_id"] for f in rows(cap, "frames") if f["command"] == "CONNECT"}
    intact = {
        c["conn_id"]
        for c in rows(cap, "conversations")
        if not (c["gap_bytes_c2b"] or c["gap_bytes_b2c"])
    }
    want: dict[int, list[int]] = defaultdict(list)
    for p in rows(cap, "timeline"):
        known = p["conn_id"] in whole and p["conn_id"] in intact
        if p["outcome"] == "unmatched" and p["request_id"] is not None and known:
            want[p["conn_id"]].append(p["response_packet"])
    found = {
        f["conn_id"]: f for f in rows(cap, "findings") if f["code"] == "request.unknown_response"
    }
    return _agree(want, found, "unmatched responses")
