"""Trace context from message properties (dissector.pulsar.trace_context), format by format.

Expected values come from each format's own documents, never from our output:
- W3C Trace Context (https://www.w3.org/TR/trace-context/): the traceparent examples of
  "Examples of HTTP traceparent Headers", the tracestate examples of "Relationship Between
  the Headers", the rules of "Versioning of traceparent" and the tracestate ABNF.
- B3 (https://github.com/openzipkin/b3-propagation): the single header examples (a sampled
  root, a not yet sampled root, a debug child; the sampling-only `b3: 0`, `1`, `d`) and the
  multiple headers example; 64-bit trace ids left-padded with zeros to 32 digits, as
  OpenTelemetry's B3 propagator documents ("16 character traceIds will be converted to 32
  characters by left-padding with 0s").
- Jaeger (https://www.jaegertracing.io/docs/1.52/client-libraries/#propagation-format):
  "{trace-id}:{span-id}:{parent-span-id}:{flags}", "shorter values are 0-padded on the
  left", "value of 0 is invalid"; the example of opentelemetry-propagator-jaeger's docs
  ("000000000000000000000000deadbeef:00000000deadbef0:00000000:01").
- SkyWalking sw8 (Cross Process Propagation Headers Protocol v3): the published example
  header whose trace id decodes to a4ec6fc8ccab4bb4b682064698cc97e6.74.16218381104550009 and
  parent segment id to ...08, parent span id 2.
"""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dissector.events import TraceFormat
from dissector.pulsar import trace_context as tc
from dissector.pulsar.trace_context import KEYS, MAX_EXCERPT, MAX_VALUE, Trace, trace_context

W3C, B3, B3M, JAEGER, SW8 = (
    TraceFormat.W3C, TraceFormat.B3, TraceFormat.B3_MULTI, TraceFormat.JAEGER, TraceFormat.SW8,
)  # fmt: skip
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"
SW8_EXAMPLE = (
    "1-YTRlYzZmYzhjY2FiNGJiNGI2ODIwNjQ2OThjYzk3ZTYuNzQuMTYyMTgzODExMDQ1NTAwMDk="
    "-YTRlYzZmYzhjY2FiNGJiNGI2ODIwNjQ2OThjYzk3ZTYuNzQuMTYyMTgzODExMDQ1NTAwMDg="
    "-2-b25lbW9yZS1h-ZTFkMmZiYjYzYmJhNDMwNDk5YWY4OTVjMDQwZTMyZmVAMTkyLjE2OC4xLjEwMQ=="
    "-L29uZW1vcmUtYS9nZXQ=-MTkyLjE2OC4xLjEwMjo4MA=="
)


def one(*props: tuple[str, str]) -> Trace | None:
    """The trace of `props`, which must have no malformed value."""
    trace, faults = trace_context(list(props))
    assert faults == ()
    return trace


def bad(*props: tuple[str, str]) -> list[tuple[str, str, str]]:
    """(format, key, reason) of each malformed value of `props`."""
    return [(f.format, f.key, f.reason) for f in trace_context(list(props))[1]]


# ------------------------------------------------------------------------------------ W3C


@pytest.mark.parametrize("flags", ["01", "00"])
def test_w3c_examples(flags: str) -> None:
    assert one(("traceparent", f"00-{TRACE}-{SPAN}-{flags}")) == Trace(TRACE, SPAN, W3C)


def test_w3c_tracestate_is_kept_with_its_traceparent() -> None:
    got = one(
        ("traceparent", "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"),
        ("tracestate", "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"),
    )
    assert got == Trace(
        "0af7651916cd43dd8448eb211c80319c",
        "00f067aa0ba902b7",
        W3C,
        "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
    )


def test_w3c_key_in_any_case_and_optional_whitespace() -> None:
    """'Vendors MUST expect the header name in any case'; OWS around list members."""
    got = one(("TraceParent", f"00-{TRACE}-{SPAN}-01"), ("TRACESTATE", " a=1 , ,b@c=x y "))
    assert got == Trace(TRACE, SPAN, W3C, "a=1 , ,b@c=x y")


def test_w3c_higher_version_with_more_fields() -> None:
    """'If a higher version is detected', the first 4 fields are used, then a dash."""
    assert one(("traceparent", f"cc-{TRACE}-{SPAN}-01-what-the-future-will-be")) == Trace(
        TRACE, SPAN, W3C
    )
    assert one(("traceparent", f"01-{TRACE}-{SPAN}-09")) == Trace(TRACE, SPAN, W3C)


def test_tracestate_alone_is_not_parsed() -> None:
    """W3C: without a valid traceparent, tracestate is not parsed (not even reported)."""
    assert trace_context([("tracestate", "not a list member")]) == (None, ())


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (f"ff-{TRACE}-{SPAN}-01", "version ff is invalid"),
        (f"0-{TRACE}-{SPAN}-01", "version is not 2 lower-case hex digits"),
        (f"00-{'0' * 32}-{SPAN}-01", "trace id is all zeros"),
        (f"00-{TRACE}-{'0' * 16}-01", "parent id is all zeros"),
        (f"00-{TRACE.upper()}-{SPAN}-01", "trace id is not 32 lower-case hex digits"),
        (f"00-{TRACE}-{SPAN.upper()}-01", "parent id is not 16 lower-case hex digits"),
        (f"00-{TRACE}-{SPAN}-0g", "flags is not 2 lower-case hex digits"),
        (f"00-{TRACE}-{SPAN}-01-extra", "version 00 has 4 fields"),
        (f"cc-{TRACE}-{SPAN}-01.extra", "flags not followed by '-'"),
        (f"00-{TRACE[:16]}-{SPAN}-01", "shorter than 55 characters"),
        (f"00_{TRACE}_{SPAN}_01", "fields are not separated by '-' where version 00 puts them"),
    ],
)
def test_w3c_malformed(value: str, reason: str) -> None:
    assert bad(("traceparent", value)) == [(W3C, "traceparent", reason)]


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        ("rojo", "a list member without '='"),
        ("Rojo=1", "a key is not [a-z0-9][a-z0-9_-*/@]{0,255}"),
        ("a=1,a=2", "a key is there twice"),
        ("a=", "a value is not 1-256 printable characters without ',' and '='"),
        ("a=x\ty", "a value is not 1-256 printable characters without ',' and '='"),
        (f"a={'v' * 257}", "a value is not 1-256 printable characters without ',' and '='"),
        (",".join(f"k{i}=v" for i in range(33)), "more than 32 list members"),
    ],
)
def test_tracestate_malformed_keeps_the_traceparent(state: str, reason: str) -> None:
    """'failure to parse tracestate MUST NOT affect the parsing of traceparent'."""
    props = [("traceparent", f"00-{TRACE}-{SPAN}-01"), ("tracestate", state)]
    trace, faults = trace_context(props)
    assert trace == Trace(TRACE, SPAN, W3C)
    assert [(f.format, f.key, f.reason) for f in faults] == [(W3C, "tracestate", reason)]


def test_tracestate_of_32_members_and_empty() -> None:
    full = ",".join(f"k{i}=v" for i in range(32))
    assert one(("traceparent", f"00-{TRACE}-{SPAN}-01"), ("tracestate", full)) == Trace(
        TRACE, SPAN, W3C, full
    )
    empty = one(("traceparent", f"00-{TRACE}-{SPAN}-01"), ("tracestate", ""))
    assert empty == Trace(TRACE, SPAN, W3C)  # "Vendors MUST accept empty tracestate"


# ------------------------------------------------------------------------------------- B3


@pytest.mark.parametrize(
    ("value", "trace", "span"),
    [
        (
            "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1-05e3ac9a4f6e3b90",
            "80f198ee56343ba864fe8b2a57d3eff7",
            "e457b5a2e4d86bd1",
        ),
        (f"{TRACE}-{SPAN}-1", TRACE, SPAN),
        (f"{TRACE}-{SPAN}", TRACE, SPAN),
        (f"{TRACE}-{SPAN}-d-5b4185666d50f68b", TRACE, SPAN),
        ("a3ce929d0e0e4736-00f067aa0ba902b7-0", "0000000000000000a3ce929d0e0e4736", SPAN),
        (f"{TRACE.upper()}-{SPAN.upper()}", TRACE, SPAN),
    ],
)
def test_b3_single_examples(value: str, trace: str, span: str) -> None:
    assert one(("b3", value)) == Trace(trace, span, B3)


@pytest.mark.parametrize("value", ["0", "1", "d"])
def test_b3_sampling_only_carries_no_ids_and_is_not_malformed(value: str) -> None:
    assert trace_context([("b3", value)]) == (None, ())


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("2", "neither a sampling state (0, 1, d) nor traceid-spanid"),
        (f"{TRACE[:15]}-{SPAN}", "trace id is not 16 or 32 hex digits"),
        (f"{'0' * 32}-{SPAN}", "trace id is all zeros"),
        (f"{TRACE}-{'0' * 16}", "span id is all zeros"),
        (f"{TRACE}-{SPAN[:8]}", "span id is not 16 hex digits"),
        (f"{TRACE}-{SPAN}-x", "sampling state is not 0, 1 or d"),
        (f"{TRACE}-{SPAN}-1-{SPAN}-1", "more than 4 fields"),
        (f"{TRACE}-{SPAN}-1-05e3", "parent span id is not 16 hex digits"),
    ],
)
def test_b3_single_malformed(value: str, reason: str) -> None:
    assert bad(("b3", value)) == [(B3, "b3", reason)]


def test_b3_multi_example() -> None:
    got = one(
        ("X-B3-TraceId", "80f198ee56343ba864fe8b2a57d3eff7"),
        ("X-B3-ParentSpanId", "05e3ac9a4f6e3b90"),
        ("X-B3-SpanId", "e457b5a2e4d86bd1"),
        ("X-B3-Sampled", "1"),
    )
    assert got == Trace("80f198ee56343ba864fe8b2a57d3eff7", "e457b5a2e4d86bd1", B3M)


def test_b3_multi_keys_in_any_case_and_64_bit_trace_id() -> None:
    got = one(("x-b3-traceid", "a3ce929d0e0e4736"), ("x-b3-spanid", SPAN), ("x-b3-flags", "1"))
    assert got == Trace("0000000000000000a3ce929d0e0e4736", SPAN, B3M)


@pytest.mark.parametrize("props", [[("X-B3-Sampled", "0")], [("X-B3-Flags", "1")]])
def test_b3_multi_sampling_only(props: list[tuple[str, str]]) -> None:
    assert trace_context(props) == (None, ())


@pytest.mark.parametrize(
    ("props", "key", "reason"),
    [
        ([("X-B3-TraceId", TRACE)], "X-B3-TraceId", "X-B3-SpanId is missing"),
        ([("X-B3-SpanId", SPAN)], "X-B3-SpanId", "X-B3-TraceId is missing"),
        (
            [("X-B3-TraceId", TRACE), ("X-B3-SpanId", SPAN), ("X-B3-Sampled", "yes")],
            "X-B3-Sampled",
            "X-B3-Sampled is not 0 or 1",
        ),
        (
            [("X-B3-TraceId", TRACE), ("X-B3-SpanId", SPAN), ("X-B3-ParentSpanId", "1")],
            "X-B3-ParentSpanId",
            "parent span id is not 16 hex digits",
        ),
        (
            [("X-B3-TraceId", "xyz"), ("X-B3-SpanId", SPAN)],
            "X-B3-TraceId",
            "trace id is not 16 or 32 hex digits",
        ),
    ],
)
def test_b3_multi_malformed(props: list[tuple[str, str]], key: str, reason: str) -> None:
    assert bad(*props) == [(B3M, key, reason)]


# --------------------------------------------------------------------------------- Jaeger


@pytest.mark.parametrize(
    "value",
    [
        "000000000000000000000000deadbeef:00000000deadbef0:00000000:01",
        "deadbeef:deadbef0:0:1",
        "deadbeef%3Adeadbef0%3A0%3A1",
        "DEADBEEF%3aDEADBEF0%3a0%3a1",
    ],
)
def test_jaeger_examples(value: str) -> None:
    got = one(("uber-trace-id", value))
    assert got == Trace("000000000000000000000000deadbeef", "00000000deadbef0", JAEGER)


def test_jaeger_128_bit_trace_id() -> None:
    got = one(("Uber-Trace-Id", f"{TRACE}:{SPAN}:{SPAN}:3"))
    assert got == Trace(TRACE, SPAN, JAEGER)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("0:deadbef0:0:1", "trace id is 0"),
        ("deadbeef:0:0:1", "span id is 0"),
        ("deadbeef:deadbef0:1", "not 4 fields separated by ':'"),
        (f"1{TRACE}:deadbef0:0:1", "trace id is not 1 to 32 hex digits"),
        ("deadbeef::0:1", "span id is not 1 to 16 hex digits"),
        ("deadbeef:deadbef0:x:1", "parent span id is not 1 to 16 hex digits"),
        ("deadbeef:deadbef0:0:123", "flags is not 1 to 2 hex digits"),
    ],
)
def test_jaeger_malformed(value: str, reason: str) -> None:
    assert bad(("uber-trace-id", value)) == [(JAEGER, "uber-trace-id", reason)]


# ------------------------------------------------------------------------------------ sw8


def test_sw8_example() -> None:
    got = one(("sw8", SW8_EXAMPLE))
    segment = "a4ec6fc8ccab4bb4b682064698cc97e6.74.16218381104550008"
    assert got == Trace(
        "a4ec6fc8ccab4bb4b682064698cc97e6.74.16218381104550009", f"{segment}-2", SW8
    )


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        (SW8_EXAMPLE.split("-")[:7], "not 8 fields separated by '-'"),
        (["2", *SW8_EXAMPLE.split("-")[1:]], "sample is not 0 or 1"),
        (["1", "!!!", *SW8_EXAMPLE.split("-")[2:]], "trace id is not base64 of UTF-8 text"),
        (
            ["1", _b64("t"), "", *SW8_EXAMPLE.split("-")[3:]],
            "trace id or parent segment id is empty",
        ),
        (
            [*SW8_EXAMPLE.split("-")[:3], "x", *SW8_EXAMPLE.split("-")[4:]],
            "parent span id is not an integer >= 0",
        ),
        ([*SW8_EXAMPLE.split("-")[:7], "/w=="], "parent peer is not base64 of UTF-8 text"),
    ],
)
def test_sw8_malformed(fields: list[str], reason: str) -> None:
    assert bad(("sw8", "-".join(fields))) == [(SW8, "sw8", reason)]


# ------------------------------------------------------------------- several, and bounds


def test_the_first_valid_format_wins_and_every_malformed_one_is_reported() -> None:
    w3c = ("traceparent", f"00-{TRACE}-{SPAN}-01")
    b3 = ("b3", "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1")
    uber = ("uber-trace-id", "deadbeef:deadbef0:0:1")
    assert one(uber, b3, w3c, ("sw8", SW8_EXAMPLE)) == Trace(TRACE, SPAN, W3C)
    assert one(uber, b3) == Trace("80f198ee56343ba864fe8b2a57d3eff7", "e457b5a2e4d86bd1", B3)
    multi = [("X-B3-TraceId", TRACE), ("X-B3-SpanId", SPAN)]
    assert one(*multi, b3)[2] == B3  # type: ignore[index]  # single before multi
    trace, faults = trace_context(
        [("traceparent", "00-zz"), b3, ("uber-trace-id", "1:2"), ("sw8", "0")]
    )
    assert trace == Trace("80f198ee56343ba864fe8b2a57d3eff7", "e457b5a2e4d86bd1", B3)
    assert [f.format for f in faults] == [W3C, JAEGER, SW8]


def test_the_first_of_a_key_wins() -> None:
    other = "0af7651916cd43dd8448eb211c80319c"
    got = one(("traceparent", f"00-{TRACE}-{SPAN}-01"), ("TRACEPARENT", f"00-{other}-{SPAN}-01"))
    assert got == Trace(TRACE, SPAN, W3C)


def test_other_properties_cost_nothing() -> None:
    assert trace_context([("traceparentx", "1"), ("key", "value"), ("b3-", "x")]) == (None, ())


def test_long_values_are_not_parsed_nor_echoed() -> None:
    huge = "0" * (MAX_VALUE + 1)
    ((fault),) = trace_context([("b3", huge)])[1]
    assert fault.reason == f"longer than {MAX_VALUE} characters"
    assert len(fault.excerpt) < MAX_EXCERPT + 40 and str(MAX_VALUE + 1) in fault.excerpt
    long_bad = "z" * 5000
    ((fault),) = trace_context([("uber-trace-id", long_bad)])[1]
    assert fault.excerpt == f"'{'z' * MAX_EXCERPT}'... (5000 characters)"
    wide = "\U00010000" * 20  # 20 characters, 200 once escaped
    ((fault),) = trace_context([("b3", wide)])[1]
    escaped = "\\U00010000" * 6 + "\\U00"  # 64 characters of the escaped text
    assert fault.excerpt == f"'{escaped}'... (20 characters)"


#: Keys that carry trace context, in several cases, and any other key.
_KEY = st.one_of(
    st.sampled_from(sorted(KEYS)).flatmap(lambda k: st.sampled_from([k, k.upper(), k.title()])),
    st.text(max_size=20),
)
_VALUE = st.one_of(
    st.text(max_size=80),
    st.text(alphabet="0123456789abcdefABCDEF-:%3=,", max_size=80),
    st.sampled_from([f"00-{TRACE}-{SPAN}-01", SW8_EXAMPLE, "deadbeef:deadbef0:0:1", "d"]),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(_KEY, _VALUE), max_size=8))
def test_any_properties_give_a_trace_or_faults_never_an_exception(
    props: list[tuple[str, str]],
) -> None:
    trace, faults = trace_context(props)
    for f in faults:
        assert f.format in TraceFormat and f.key.lower() in KEYS and f.reason
        assert len(f.detail()) < 250
    if trace is None:
        return
    assert trace.format in TraceFormat and trace.trace_id and trace.span_id
    if trace.format is not SW8:
        assert len(trace.trace_id) == 32 and len(trace.span_id) == 16
        assert set(trace.trace_id + trace.span_id) <= set("0123456789abcdef")
    assert trace.state is None or trace.format is W3C
    # the winner is the first valid format of the order: every earlier present one failed
    present = {k.lower() for k, _ in props}
    earlier = tc.ORDER[: tc.ORDER.index(trace.format)]
    failed = {f.format for f in faults}
    for fmt in earlier:
        keys = {
            W3C: {"traceparent"},
            B3: {"b3"},
            B3M: {"x-b3-traceid", "x-b3-spanid"},
            JAEGER: {"uber-trace-id"},
        }[fmt]
        assert not keys & present or fmt in failed or fmt is B3
