"""Pulsar's primitive schemas: payload bytes -> a JSON-ready value.

Input: a payload and the primitive schema's type name (STRING, BOOLEAN, INT8..INT64, FLOAT,
DOUBLE, BYTES, DATE, TIME, TIMESTAMP, INSTANT, LOCAL_DATE, LOCAL_TIME, LOCAL_DATE_TIME).
Output: a bool, int, float-or-string, or str; `BadValue` with the reason when the bytes are
not a value of the type.
Rule: the encodings are the Java client's (pulsar-client .../impl/schema/*Schema.java):
integers, floats and doubles big-endian of exactly their width; BOOLEAN one byte, 0 false;
DATE, TIME, TIMESTAMP one INT64 of milliseconds since the epoch (TIME shown as the UTC time
of day); INSTANT an INT64 of seconds then an INT32 of nanoseconds (12 bytes); LOCAL_DATE an
INT64 epoch day; LOCAL_TIME an INT64 nano of day; LOCAL_DATE_TIME an INT64 epoch day then
an INT64 nano of day (16 bytes); BYTES as base64; STRING in the schema's `__charset`
property (UTF-8 by default; only Java's charset names, charsets.py). NaN and infinities
are the strings "NaN", "Infinity", "-Infinity" (JSON has no such numbers); times are ISO
8601, instants in UTC with "Z".
"""

from __future__ import annotations

import base64
import math
import struct
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta

from dissector.values.charsets import decode_text
from dissector.values.model import BadValue, SchemaInfo

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_DAY = date(1970, 1, 1)
_NANOS_PER_DAY = 86_400 * 1_000_000_000
_MILLIS_PER_DAY = 86_400_000

JsonScalar = bool | int | float | str | None


def _exact(data: bytes, size: int, type_name: str) -> None:
    if len(data) != size:
        raise BadValue(f"{type_name} takes {size} bytes, the payload has {len(data)}")


def _int(size: int, type_name: str) -> Callable[[bytes], JsonScalar]:
    def read(data: bytes) -> JsonScalar:
        _exact(data, size, type_name)
        return int.from_bytes(data, "big", signed=True)

    return read


def _float_json(x: float) -> JsonScalar:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


def shortest_float32(x: float) -> float:
    """The shortest decimal that is the same 32-bit float (0.1f is 0.1, not 0.100000001...),
    as Java's Float.toString shows it."""
    if not math.isfinite(x):
        return x
    exact = struct.pack(">f", x)
    for digits in range(2, 10):  # at least two, as Java; nine always round-trip a float32
        y = float(f"{x:.{digits}g}")
        try:
            if struct.pack(">f", y) == exact:
                return y
        except OverflowError:  # rounded up past the largest float32
            continue
    return x


def _float(data: bytes) -> JsonScalar:
    _exact(data, 4, "FLOAT")
    return _float_json(shortest_float32(struct.unpack(">f", data)[0]))


def _double(data: bytes) -> JsonScalar:
    _exact(data, 8, "DOUBLE")
    return _float_json(struct.unpack(">d", data)[0])


def _boolean(data: bytes) -> JsonScalar:
    _exact(data, 1, "BOOLEAN")
    return data[0] != 0


def _bytes(data: bytes) -> JsonScalar:
    return base64.b64encode(data).decode("ascii")


def _long(data: bytes, type_name: str) -> int:
    _exact(data, 8, type_name)
    return int.from_bytes(data, "big", signed=True)


def _instant_text(seconds: int, nanos: int, type_name: str) -> str:
    try:
        moment = _EPOCH + timedelta(seconds=seconds)
    except OverflowError:
        raise BadValue(f"{type_name} out of range: {seconds} s from the epoch") from None
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + f".{nanos:09d}".rstrip("0").rstrip(".") + "Z"


def _millis_instant(data: bytes, type_name: str) -> JsonScalar:
    millis = _long(data, type_name)
    seconds, rest = divmod(millis, 1000)
    return _instant_text(seconds, rest * 1_000_000, type_name)


def _date(data: bytes) -> JsonScalar:
    return _millis_instant(data, "DATE")


def _timestamp(data: bytes) -> JsonScalar:
    return _millis_instant(data, "TIMESTAMP")


def _time_of_day(nanos: int) -> str:
    seconds, frac = divmod(nanos, 1_000_000_000)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h:02d}:{m:02d}:{s:02d}" + f".{frac:09d}".rstrip("0").rstrip(".")


def _time(data: bytes) -> JsonScalar:
    millis = _long(data, "TIME") % _MILLIS_PER_DAY
    return _time_of_day(millis * 1_000_000)


def _instant(data: bytes) -> JsonScalar:
    _exact(data, 12, "INSTANT")
    seconds = int.from_bytes(data[:8], "big", signed=True)
    nanos = int.from_bytes(data[8:], "big", signed=True)
    if not 0 <= nanos < 1_000_000_000:
        raise BadValue(f"INSTANT nanoseconds out of range: {nanos}")
    return _instant_text(seconds, nanos, "INSTANT")


def _epoch_day(day: int, type_name: str) -> str:
    try:
        return (_EPOCH_DAY + timedelta(days=day)).isoformat()
    except OverflowError:
        raise BadValue(f"{type_name} out of range: epoch day {day}") from None


def _nano_of_day(nanos: int, type_name: str) -> str:
    if not 0 <= nanos < _NANOS_PER_DAY:
        raise BadValue(f"{type_name} nano of day out of range: {nanos}")
    return _time_of_day(nanos)


def _local_date(data: bytes) -> JsonScalar:
    return _epoch_day(_long(data, "LOCAL_DATE"), "LOCAL_DATE")


def _local_time(data: bytes) -> JsonScalar:
    return _nano_of_day(_long(data, "LOCAL_TIME"), "LOCAL_TIME")


def _local_date_time(data: bytes) -> JsonScalar:
    _exact(data, 16, "LOCAL_DATE_TIME")
    day = int.from_bytes(data[:8], "big", signed=True)
    nanos = int.from_bytes(data[8:], "big", signed=True)
    t = _nano_of_day(nanos, "LOCAL_DATE_TIME")
    return f"{_epoch_day(day, 'LOCAL_DATE_TIME')}T{t}"


#: Primitive type name -> decoder (STRING is apart: it reads its schema's charset).
PRIMITIVES: dict[str, Callable[[bytes], JsonScalar]] = {
    "BOOLEAN": _boolean,
    "INT8": _int(1, "INT8"),
    "INT16": _int(2, "INT16"),
    "INT32": _int(4, "INT32"),
    "INT64": _int(8, "INT64"),
    "FLOAT": _float,
    "DOUBLE": _double,
    "BYTES": _bytes,
    "DATE": _date,
    "TIME": _time,
    "TIMESTAMP": _timestamp,
    "INSTANT": _instant,
    "LOCAL_DATE": _local_date,
    "LOCAL_TIME": _local_time,
    "LOCAL_DATE_TIME": _local_date_time,
}


def decode_string(data: bytes, schema: SchemaInfo) -> str:
    """A STRING payload in its schema's charset (property `__charset`, else UTF-8): a Java
    charset name, decoded as Java would (charsets.py)."""
    return decode_text(data, schema.prop("__charset") or "utf-8")
