"""EDGE: a read's settings, and the paths a read takes, as the API accepts them.

Input: the keyword settings of a read (ports, limits, tables wanted, series mode, shard...);
paths as str, bytes or path-like, one or a list.
Output: `ReaderOptions` (frozen, checked when made); `as_paths` -> str paths; `idle_us` -> an
idle timeout in the pipeline's whole microseconds; `diagnoser` -> the findings table's engine
with the read's thresholds and ports.
Rule: a bad setting or a thing that is not a path is a UsageError naming it, raised before
any file is read; bytes paths are decoded as the file system names them (surrogateescape).
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dissector.errors import UsageError
from dissector.findings import Thresholds
from dissector.pipeline import DEFAULT_BROKER_PORTS, DEFAULT_TLS_PORTS
from dissector.pulsar.decompression import DEFAULT_MAX_UNCOMPRESSED
from dissector.pulsar.framing import DEFAULT_MAX_FRAME_SIZE

if TYPE_CHECKING:
    from dissector.diagnose import Diagnoser
    from dissector.diagnose.state import Listener

PathLike = str | os.PathLike[str]
DEFAULT_THRESHOLDS = Thresholds()
#: A key log's path as the API takes it: text, bytes (as the file system names it) or a Path.
KeylogPath = str | bytes | os.PathLike[str]


@dataclass(frozen=True, slots=True)
class ReaderOptions:
    broker_ports: frozenset[int] = DEFAULT_BROKER_PORTS
    tls_ports: frozenset[int] = DEFAULT_TLS_PORTS
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    #: extract application messages (payload decoding), and make request/response pairs:
    #: False turns the stage off; on, a read runs it only when its tables need it
    #: (dissector.read.plan)
    messages: bool = True
    pairs: bool = True
    max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED
    payload_preview: int = 0  # bytes of each payload kept in the messages table (opt-in)
    #: messages and journeys: payloads decoded by their schemas (opt-in: the user's data)
    values: bool = False
    redact_fields: str = ""  # "a.b,c": fields of the values masked (dissector.values.redact)
    series: str = "auto"  # how rotated files are grouped: auto, digits or none (see series.py)
    shard: tuple[int, int] | None = None  # (k, n): only connections of shard k of n
    idle_timeout: float | None = None  # seconds without a packet that end a connection
    frame_bytes: bool = False  # frames carry their bytes (Frame.raw), for the hex view
    fields: bool = False  # the frames table's on-request `fields` column (JSON) is made
    s3_endpoint: str | None = None  # S3 endpoint URL other than AWS (default: environment)
    merge: bool = True  # series taken at the same time merge by timestamp (capture.merge)
    #: Number connections as Spark and the fleet job do: series index * CONN_ID_STRIDE + n,
    #: each series read on its own (no merge), so local and Spark tables compare row for row.
    per_series_ids: bool = False
    tls_keylog: tuple[str, ...] = ()  # NSS key log files: TLS sessions decrypted with them
    #: thresholds of the findings table's rules (dissector.findings), the clients' defaults
    thresholds: Thresholds = DEFAULT_THRESHOLDS

    def __post_init__(self) -> None:
        idle = self.idle_timeout
        if idle is not None and (not isinstance(idle, numbers.Real) or not idle >= 0):
            raise UsageError(f"idle_timeout: {idle!r} is not a number of seconds >= 0")
        if self.redact_fields:
            from dissector.values.redact import parse_redact_fields

            parse_redact_fields(self.redact_fields)  # UsageError now, not in a worker
            if not self.values:
                raise UsageError("redact_fields: fields of values, given without values")
            if self.payload_preview:  # its bytes hold the fields, encoded: none can be masked
                raise UsageError(
                    "redact_fields with payload_preview: the preview is the payload's bytes, "
                    "the redacted fields in clear (give one or the other)"
                )
        for path in self.tls_keylog:
            if not isinstance(path, str):
                raise UsageError(f"tls_keylog: {path!r} is not a path (give str paths)")

    @classmethod
    def make(cls, ports: Iterable[int] = (), **kw: Any) -> ReaderOptions:
        """Options with `ports` added to the default broker ports."""
        return cls(broker_ports=DEFAULT_BROKER_PORTS | frozenset(ports), **kw)


def _path(path: object, what: str) -> str:
    if isinstance(path, str | bytes | os.PathLike):
        return os.fsdecode(path)  # bytes: as the file system names it (surrogateescape)
    raise UsageError(f"{what}: {path!r} is not a path")


def as_paths(paths: KeylogPath | Iterable[KeylogPath], what: str = "paths") -> list[str]:
    """One path or several (str, bytes or path-like) as str paths; UsageError for anything
    else."""
    if isinstance(paths, str | bytes | os.PathLike):
        return [_path(paths, what)]
    try:
        items = list(paths)
    except TypeError:
        raise UsageError(f"{what}: {paths!r} is neither a path nor a list of paths") from None
    return [_path(p, what) for p in items]


#: Idle timeouts longer than this (µs, about 146,000 years) never end a connection: no
#: capture spans them, and a float as large as 1e303 s has no integer microsecond value.
MAX_IDLE_US = 1 << 62


def idle_us(seconds: float | None) -> int | None:
    """An idle timeout in seconds as the pipeline's whole microseconds (None: never)."""
    if seconds is None or seconds * 1e6 >= MAX_IDLE_US:
        return None
    return round(seconds * 1e6)


def diagnoser(options: ReaderOptions, listener: Listener | None = None) -> Diagnoser:
    """The findings table's engine for a read with these settings (imported here: reads
    that make no findings never load the rules); `listener` told of each finding as it is
    established (Context.listener)."""
    from dissector.diagnose import Diagnoser

    return Diagnoser(
        options.thresholds,
        broker_ports=options.broker_ports,
        tls_ports=options.tls_ports,
        listener=listener,
    )
