"""Trace context out of a message's properties: W3C, B3 (single and multi), Jaeger, sw8.

Input: one application message's properties, (key, value) pairs: MessageMetadata.properties,
or for a batch entry its own SingleMessageMetadata.properties (`trace_context`).
Output: `Trace` (trace id, span id, format, W3C tracestate) or None, and one `Malformed`
(format, property key, short reason, capped excerpt of the value) per malformed value.
Rules (docs/journeys.md#trace-context says them for users):
- Cheap when there is nothing: a key no longer than the longest of `KEYS` is looked up
  (lower-cased) in `KEYS`; a message with no such key costs that and nothing else. Keys
  are matched case-insensitively (HTTP header names are, and W3C says vendors MUST accept
  any case); the first of a key wins.
- Formats, each as its authority writes it:
  - `w3c`: `traceparent` = version-traceid(32)-parentid(16)-flags(2), lower-case hex; ids
    of all zeros and version ff invalid; version 00 has exactly these 4 fields, a higher
    version may add fields after a dash (W3C Trace Context,
    https://www.w3.org/TR/trace-context/#traceparent-header, "Versioning of traceparent").
    `tracestate` (same page, #tracestate-header): at most 32 list members key=value, keys
    and values as its ABNF says (the Level 2 draft's key grammar, a superset of Level 1's),
    no key twice; kept only with a valid traceparent (W3C: not parsed without one).
  - `b3`: `b3` = traceid(16|32)-spanid(16)[-sampling(0|1|d)[-parentspanid(16)]], or a bare
    sampling state `0`, `1`, `d`, which carries no ids and is not malformed
    (https://github.com/openzipkin/b3-propagation, "Single Header").
  - `b3multi`: `X-B3-TraceId`, `X-B3-SpanId` (both, or neither: sampling only),
    `X-B3-ParentSpanId`, `X-B3-Sampled` (0, 1, or the older true/false), `X-B3-Flags`
    (1 is debug; "any other value can be ignored"), same page, "Multiple Headers".
  - `jaeger`: `uber-trace-id` = traceid:spanid:parentspanid:flags, hex ids that may lack
    their leading zeros (trace id up to 32 digits, the others up to 16), trace and span id
    not 0, flags 1 or 2 hex digits; URL-encoded values (`%3A`) are decoded first
    (https://www.jaegertracing.io/docs/1.52/client-libraries/#propagation-format).
  - `sw8`: 8 dash-separated fields: sample (0|1), trace id, parent segment id (base64),
    parent span id (an integer >= 0), parent service, instance, endpoint, peer (base64)
    (SkyWalking Cross Process Propagation Headers Protocol v3, https://skywalking.apache.org/
    docs/main/next/en/api/x-process-propagation-headers-v3/).
- Normalised ids: hex ids in lower case (W3C requires it on the wire; B3 and Jaeger values in
  upper case are accepted, as OpenTelemetry's Python propagators accept them); trace ids of
  64 bits (B3's 16 digits, Jaeger's short ids) left-padded with zeros to 32 digits and
  Jaeger's short span ids to 16, as OpenTelemetry's B3 and Jaeger propagators do (they read
  the id as a 128-bit number), so a trace id here is the one OpenTelemetry backends store.
  sw8: trace_id is the decoded trace id string, span_id "{parent segment id}-{parent span
  id}" (a SkyWalking span is named by its segment and its number in it).
- Which wins: the first valid one in `ORDER` (w3c, b3, b3multi, jaeger, sw8): W3C is the
  standard OpenTelemetry propagates by default; B3's single header takes precedence over
  the multiple headers, as the OpenTelemetry specification requires of its B3 propagator.
  Every present value is parsed: each malformed one is reported, whichever wins.
- Bounded: a value longer than `MAX_VALUE` is malformed unparsed; a `Malformed` carries at
  most `MAX_EXCERPT` characters of the value's ASCII-escaped text (never a long value whole).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Sequence
from typing import NamedTuple, TypeVar
from urllib.parse import unquote

from dissector.events import TraceFormat

#: Longer values are malformed without being parsed: the longest valid value of these
#: formats is a tracestate of 32 members of 256 + 1 + 256 characters (about 16,500).
MAX_VALUE = 32_768
#: Characters of a malformed value quoted in its anomaly's detail: enough to recognise it.
MAX_EXCERPT = 64
#: Formats, the first valid one wins.
ORDER = tuple(TraceFormat)
W3C, B3_MULTI, JAEGER = TraceFormat.W3C, TraceFormat.B3_MULTI, TraceFormat.JAEGER

TRACEPARENT, TRACESTATE, B3, UBER, SW8 = "traceparent", "tracestate", "b3", "uber-trace-id", "sw8"
X_TRACE, X_SPAN, X_PARENT = "x-b3-traceid", "x-b3-spanid", "x-b3-parentspanid"
X_SAMPLED, X_FLAGS = "x-b3-sampled", "x-b3-flags"
_MULTI = (X_TRACE, X_SPAN, X_PARENT, X_SAMPLED, X_FLAGS)
#: The property keys that carry trace context (lower case).
KEYS = frozenset((TRACEPARENT, TRACESTATE, B3, UBER, SW8, *_MULTI))
_LONGEST = max(map(len, KEYS))


#: The trace properties of a message: lower-cased key -> (key as sent, value).
Found = dict[str, tuple[str, str]]


class Trace(NamedTuple):
    trace_id: str
    span_id: str
    format: TraceFormat
    state: str | None = None  # W3C tracestate, as sent (valid), with a w3c trace only


class Malformed(NamedTuple):
    format: TraceFormat
    key: str  # the property key as sent
    reason: str
    excerpt: str  # at most MAX_EXCERPT characters of the value, ASCII-escaped

    def detail(self) -> str:
        return f"{self.format} {self.key!r}: {self.reason}: {self.excerpt}"


class _Bad(Exception):
    """A value is malformed: the reason."""


_LCHEX = re.compile(r"[0-9a-f]+")
_HEX = re.compile(r"[0-9a-fA-F]+")
_STATE_KEY = re.compile(r"[a-z0-9][a-z0-9_\-*/@]{0,255}")
_STATE_VALUE = re.compile(r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]")
_DIGITS = re.compile(r"[0-9]{1,19}")
#: A valid traceparent's shape (version, trace id, parent id, flags, a later version's rest)
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}(-.*)?", re.S)
_ZERO_TRACE, _ZERO_SPAN = "0" * 32, "0" * 16
T = TypeVar("T")
_NOTHING: tuple[Trace | None, tuple[Malformed, ...]] = (None, ())


def trace_context(
    properties: Sequence[tuple[str, str]],
) -> tuple[Trace | None, tuple[Malformed, ...]]:
    """The message's trace context (None: none valid) and its malformed values."""
    found: Found = {}
    for key, value in properties:
        if len(key) > _LONGEST:
            continue
        low = key.lower()
        if low in KEYS and low not in found:
            found[low] = (key, value)
    if not found:
        return _NOTHING
    faults: list[Malformed] = []
    winner: Trace | None = None
    present = {_FORMAT_OF[key] for key in found}
    for fmt in ORDER:
        if fmt in present:
            trace = _PARSERS[fmt](found, faults)
            if winner is None:
                winner = trace
    return winner, tuple(faults)


def excerpt(value: str) -> str:
    """At most MAX_EXCERPT characters of `value` ASCII-escaped (the escaped text cut there
    too: one character may take 10), quoted; with the value's length when it was cut."""
    shown = ascii(value[:MAX_EXCERPT])[1:-1]
    if len(value) <= MAX_EXCERPT and len(shown) <= MAX_EXCERPT:
        return f"'{shown}'"
    return f"'{shown[:MAX_EXCERPT]}'... ({len(value)} characters)"


def _one(
    fmt: TraceFormat, key: str, found: Found, faults: list[Malformed],
    parse: Callable[[str], T],
) -> T | None:  # fmt: skip
    """`parse` of the value of `key` (None when absent); a malformed one goes to `faults`."""
    sent = found.get(key)
    if sent is None:
        return None
    name, value = sent
    try:
        if len(value) > MAX_VALUE:
            raise _Bad(f"longer than {MAX_VALUE} characters")
        return parse(value.strip(" \t"))
    except _Bad as bad:
        faults.append(Malformed(fmt, name, str(bad), excerpt(value)))
        return None


# ------------------------------------------------------------------------------ W3C


def _w3c(found: Found, faults: list[Malformed]) -> Trace | None:
    trace = _one(W3C, TRACEPARENT, found, faults, _traceparent)
    if trace is None:  # W3C: without a valid traceparent, tracestate is not parsed
        return None
    state = _one(W3C, TRACESTATE, found, faults, _tracestate)
    return trace._replace(state=state) if state else trace  # empty: nothing in it


def _lchex(text: str, digits: int, what: str) -> str:
    if len(text) != digits or _LCHEX.fullmatch(text) is None:
        raise _Bad(f"{what} is not {digits} lower-case hex digits")
    return text


def _traceparent(v: str) -> Trace:
    ok = _TRACEPARENT.fullmatch(v)
    if ok is not None and ok[1] != "ff" and (ok[4] is None or ok[1] != "00"):
        trace_id, span_id = ok[2], ok[3]
        if trace_id != _ZERO_TRACE and span_id != _ZERO_SPAN:
            return Trace(trace_id, span_id, W3C)
    return _traceparent_fault(v)  # raises: the reason


def _traceparent_fault(v: str) -> Trace:
    """The reason `v` is malformed, found field by field."""
    version = _lchex(v[:2], 2, "version")
    if version == "ff":
        raise _Bad("version ff is invalid")
    if len(v) < 55:
        raise _Bad("shorter than 55 characters")
    if v[2] != "-" or v[35] != "-" or v[52] != "-":
        raise _Bad("fields are not separated by '-' where version 00 puts them")
    trace_id = _lchex(v[3:35], 32, "trace id")
    span_id = _lchex(v[36:52], 16, "parent id")
    _lchex(v[53:55], 2, "flags")
    if len(v) > 55 and (version == "00" or v[55] != "-"):
        raise _Bad("version 00 has 4 fields" if version == "00" else "flags not followed by '-'")
    if trace_id == _ZERO_TRACE:
        raise _Bad("trace id is all zeros")
    if span_id == _ZERO_SPAN:
        raise _Bad("parent id is all zeros")
    return Trace(trace_id, span_id, W3C)


def _tracestate(v: str) -> str:
    """`v`, checked."""
    keys: set[str] = set()
    for member in v.split(","):
        member = member.strip(" \t")
        if not member:
            continue  # empty members are allowed
        key, eq, value = member.partition("=")
        if not eq:
            raise _Bad("a list member without '='")
        if _STATE_KEY.fullmatch(key) is None:
            raise _Bad("a key is not [a-z0-9][a-z0-9_-*/@]{0,255}")
        if _STATE_VALUE.fullmatch(value) is None:
            raise _Bad("a value is not 1-256 printable characters without ',' and '='")
        if key in keys:
            raise _Bad("a key is there twice")
        keys.add(key)
        if len(keys) > 32:
            raise _Bad("more than 32 list members")
    return v


# ------------------------------------------------------------------------------- B3


def _hex_id(text: str, sizes: tuple[int, ...], what: str) -> str:
    """A B3 id: hex of one of `sizes` digits, not all zeros; lower case, 32 digits for a
    trace id."""
    if len(text) not in sizes or _HEX.fullmatch(text) is None:
        raise _Bad(f"{what} is not {' or '.join(map(str, sizes))} hex digits")
    if text.strip("0") == "":
        raise _Bad(f"{what} is all zeros")
    return text.lower().rjust(max(sizes), "0")


def _b3(found: Found, faults: list[Malformed]) -> Trace | None:
    return _one(TraceFormat.B3, B3, found, faults, _b3_single)


def _b3_single(v: str) -> Trace | None:
    fields = v.split("-")
    if len(fields) == 1:
        if v in ("0", "1", "d"):
            return None  # a sampling decision only: no ids
        raise _Bad("neither a sampling state (0, 1, d) nor traceid-spanid")
    if len(fields) > 4:
        raise _Bad("more than 4 fields")
    trace_id, span_id = _b3_trace_id(fields[0]), _b3_span_id(fields[1])
    if len(fields) > 2 and fields[2] not in ("0", "1", "d"):
        raise _Bad("sampling state is not 0, 1 or d")
    if len(fields) > 3:
        _b3_parent_id(fields[3])
    return Trace(trace_id, span_id, TraceFormat.B3)


def _b3_multi(found: Found, faults: list[Malformed]) -> Trace | None:
    before = len(faults)
    trace_id = _one(B3_MULTI, X_TRACE, found, faults, _b3_trace_id)
    span_id = _one(B3_MULTI, X_SPAN, found, faults, _b3_span_id)
    _one(B3_MULTI, X_PARENT, found, faults, _b3_parent_id)
    _one(B3_MULTI, X_SAMPLED, found, faults, _sampled)
    if len(faults) == before and (X_TRACE in found) != (X_SPAN in found):  # neither: sampling
        key, value = found.get(X_TRACE) or found[X_SPAN]
        missing = "X-B3-SpanId" if X_SPAN not in found else "X-B3-TraceId"
        faults.append(Malformed(B3_MULTI, key, f"{missing} is missing", excerpt(value)))
    if trace_id is None or span_id is None or len(faults) > before:
        return None
    return Trace(trace_id, span_id, B3_MULTI)


def _b3_trace_id(v: str) -> str:
    return _hex_id(v, (16, 32), "trace id")


def _b3_span_id(v: str) -> str:
    return _hex_id(v, (16,), "span id")


def _b3_parent_id(v: str) -> str:
    return _hex_id(v, (16,), "parent span id")


def _sampled(v: str) -> str:
    if v not in ("0", "1", "true", "false"):
        raise _Bad("X-B3-Sampled is not 0 or 1")
    return v


# --------------------------------------------------------------------------- Jaeger


def _jaeger(found: Found, faults: list[Malformed]) -> Trace | None:
    return _one(JAEGER, UBER, found, faults, _uber)


def _short_hex(text: str, most: int, what: str, zero: bool = False) -> str:
    if not 0 < len(text) <= most or _HEX.fullmatch(text) is None:
        raise _Bad(f"{what} is not 1 to {most} hex digits")
    if not zero and text.strip("0") == "":
        raise _Bad(f"{what} is 0")
    return text.lower().rjust(most, "0")


def _uber(v: str) -> Trace:
    fields = unquote(v).split(":")
    if len(fields) != 4:
        raise _Bad("not 4 fields separated by ':'")
    trace_id = _short_hex(fields[0], 32, "trace id")
    span_id = _short_hex(fields[1], 16, "span id")
    _short_hex(fields[2], 16, "parent span id", zero=True)
    _short_hex(fields[3], 2, "flags", zero=True)
    return Trace(trace_id, span_id, JAEGER)


# ------------------------------------------------------------------------ SkyWalking


def _sw8(found: Found, faults: list[Malformed]) -> Trace | None:
    return _one(TraceFormat.SW8, SW8, found, faults, _sw8_value)


def _b64(text: str, what: str) -> str:
    try:
        return base64.b64decode(text, validate=True).decode("utf-8")
    except (binascii.Error, ValueError):  # UnicodeDecodeError is a ValueError
        raise _Bad(f"{what} is not base64 of UTF-8 text") from None


def _sw8_value(v: str) -> Trace:
    fields = v.split("-")
    if len(fields) != 8:
        raise _Bad("not 8 fields separated by '-'")
    if fields[0] not in ("0", "1"):
        raise _Bad("sample is not 0 or 1")
    trace_id = _b64(fields[1], "trace id")
    segment = _b64(fields[2], "parent segment id")
    if not trace_id or not segment:
        raise _Bad("trace id or parent segment id is empty")
    if _DIGITS.fullmatch(fields[3]) is None:
        raise _Bad("parent span id is not an integer >= 0")
    for text, what in zip(fields[4:], ("service", "instance", "endpoint", "peer"), strict=True):
        _b64(text, f"parent {what}")
    return Trace(trace_id, f"{segment}-{int(fields[3])}", TraceFormat.SW8)


_PARSERS: dict[TraceFormat, Callable[[Found, list[Malformed]], Trace | None]] = {
    W3C: _w3c,
    TraceFormat.B3: _b3,
    B3_MULTI: _b3_multi,
    JAEGER: _jaeger,
    TraceFormat.SW8: _sw8,
}
assert tuple(_PARSERS) == ORDER
#: The format each key belongs to.
_FORMAT_OF: dict[str, TraceFormat] = {
    TRACEPARENT: W3C, TRACESTATE: W3C, B3: TraceFormat.B3, UBER: JAEGER, SW8: TraceFormat.SW8,
    **dict.fromkeys(_MULTI, B3_MULTI),
}  # fmt: skip
assert set(_FORMAT_OF) == KEYS
