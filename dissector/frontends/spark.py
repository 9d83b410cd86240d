"""EDGE: the `pulsar` Spark data source: capture files in, the project's tables out.

Input: `spark.read.format("pulsar").option("table", "frames").load(path_or_glob)`, with
options `table` (frames, messages, anomalies, conversations, timeline, entities, findings;
journeys through `read()`, which joins them across the captures as the fleet job does),
`ports` (extra broker ports, comma-separated), `tls_ports`, `max_frame_size`, `max_uncompressed`,
`payload_preview`, `series` (auto, digits, none), `s3_endpoint` (an S3 endpoint URL other
than AWS; default: AWS_ENDPOINT_URL_S3, then AWS_ENDPOINT_URL, as `read()`'s process sees
them, else as the source's planning worker does (the environment Spark was started with)).
`payload_preview`, `series` (auto, digits, none), `tls_keylog` (NSS key log files,
comma-separated, read by the executors: TLS sessions are decrypted with them), `values`
("true": messages and journeys get the payloads decoded by their schemas, docs/values.md;
each series is read alone, so its schemas are those it carries) and `redact_fields`
("a.b,c": fields of the values masked).
Output: a DataFrame with the table's schema, converted from the single Arrow definition in
dissector.tables.schema; rows come out of executors as Arrow record batches.
Rules:
- One partition per capture series (a file, or the rotated files of one capture point, read
  in order so connections spanning files are whole); conn_id = series index * 2**32 + n,
  unique across the fleet without any coordination between executors. A local read
  (`read_tables`) numbers the same connections 1, 2, ... in time order instead, and merges
  series taken at the same time; Spark does not merge them (each capture point is its own).
- Executors open the files themselves: the driver only lists paths (globs and directories,
  local or in object storage: dissector.capture.listing). Local paths must be readable by
  every executor (local mode, a shared filesystem); s3://, gs://, hdfs:// are opened by each
  executor with its own credentials, streamed, with the endpoint the driver resolved.
- Executors run the driver's Python unless told otherwise (`session()`); executors that
  cannot import the package give one InputError naming the fix (`check_executors`,
  `executor_errors`), not a worker traceback.
- With option `pushdown=true` (set by `read()` when the session has
  spark.sql.python.filterPushdown.enabled, as `session()` does), filters on `conn_id`, `ts`,
  `command`, `topic`, ports and `code` are applied to each batch before it leaves the
  executor; every other filter is left to Spark. Pushed filters become terms of the one
  predicate model (dissector.tables.predicates, `term_of`; `filters_of` is the reverse),
  which the executor compiles to an Arrow mask as the CLI's read filters do.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from dissector.capture import series as series_mod
from dissector.capture.listing import expand_captures
from dissector.capture.locations import s3_endpoint_from
from dissector.errors import InputError, UsageError
from dissector.read.options import ReaderOptions
from dissector.read.plan import plan_read
from dissector.read.runs import iter_series
from dissector.read.tables import make_builder
from dissector.tables.predicates import AllOf, AnyOf, Op, Predicate, Term
from dissector.tables.predicates import mask as predicate_mask
from dissector.tables.schema import TABLES

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
#: The table `read` joins in Spark (the data source's reader refuses it: see `read`).
JOURNEYS = "journeys"
_PUSHABLE = ("conn_id", "ts", "command", "topic", "broker_port", "client_port", "code")
_OPS: dict[type[Filter], Op] = {
    EqualTo: "eq",
    GreaterThan: "gt",
    GreaterThanOrEqual: "ge",
    LessThan: "lt",
    LessThanOrEqual: "le",
    In: "in",
}
_FILTERS: dict[Op, Callable[..., Filter]] = {op: kind for kind, op in _OPS.items()}


def expand(paths: str | Sequence[str], s3_endpoint: str | None = None) -> list[str]:
    """Capture files named by paths, globs or directories (searched recursively), local or
    remote (s3://, gs://, hdfs://, ...); a string may list several, comma-separated."""
    items = [paths] if isinstance(paths, str) else list(paths)
    parts = [p.strip() for item in items for p in str(item).split(",") if p.strip()]
    if not parts:
        raise InputError(f"no capture files in {paths!r}")
    return expand_captures(parts, s3_endpoint)


def _int_list(text: str | None) -> list[int]:
    return [int(p) for p in (text or "").split(",") if p.strip()]


def _flag(text: str | None) -> bool:
    """A boolean option: true/false (any case), 1/0; absent is false."""
    word = (text or "false").strip().lower()
    if word not in ("true", "false", "1", "0"):
        raise UsageError(f"bad pulsar data source option: {text!r} is not true or false")
    return word in ("true", "1")


def options_from(opts: dict[str, str]) -> ReaderOptions:
    """Reader settings from data source options (strings, case-insensitive keys)."""
    base = ReaderOptions()
    try:
        return ReaderOptions.make(
            _int_list(opts.get("ports")),
            tls_ports=frozenset(_int_list(opts.get("tls_ports")) or base.tls_ports),
            max_frame_size=int(opts.get("max_frame_size", base.max_frame_size)),
            max_uncompressed=int(opts.get("max_uncompressed", base.max_uncompressed)),
            payload_preview=int(opts.get("payload_preview", 0)),
            values=_flag(opts.get("values")),
            redact_fields=opts.get("redact_fields", opts.get("redactfields", "")),
            series=opts.get("series", base.series),
            s3_endpoint=opts.get("s3_endpoint") or None,
            tls_keylog=tuple(p.strip() for p in opts.get("tls_keylog", "").split(",") if p.strip()),
        )
    except ValueError as exc:
        raise UsageError(f"bad pulsar data source option: {exc}") from None


class PulsarDataSource(DataSource):
    """`spark.read.format("pulsar")`: see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return "pulsar"

    def _table(self) -> str:
        table = self.options.get("table", "frames")
        if table not in TABLES:
            raise UsageError(f"table must be one of {', '.join(TABLES)}, not {table!r}")
        return str(table)

    def schema(self) -> StructType:
        return from_arrow_schema(TABLES[self._table()].schema)

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = {str(k).lower(): str(v) for k, v in self.options.items()}
        opts["table"] = self._table()
        if opts["table"] == JOURNEYS:
            raise UsageError(
                "the journeys table joins messages across captures, which a data source "
                "reading each series alone cannot: use dissector.spark.read(spark, paths, "
                "table='journeys') (docs/fleet.md)"
            )
        # the endpoint the driver resolves (option, else its environment) is the executors'
        endpoint = s3_endpoint_from(opts.get("s3_endpoint"))
        if endpoint:
            opts["s3_endpoint"] = endpoint
        if opts.get("pushdown", "false").lower() == "true":
            return PushdownReader(opts)
        return PulsarReader(opts)


class SeriesPartition(InputPartition):
    def __init__(self, index: int, files: list[str]) -> None:
        super().__init__((index, files))
        self.index = index
        self.files = files


class PulsarReader(DataSourceReader):
    def __init__(self, opts: dict[str, str]) -> None:
        self.opts = opts
        self.table = opts["table"]
        self.filters: list[Term] = []  # pushed down (values of time columns in µs)

    def partitions(self) -> Sequence[InputPartition]:
        path = self.opts.get("path") or self.opts.get("paths")
        if not path:
            raise UsageError("give the captures: .load(path_or_glob) or .option('paths', ...)")
        options = options_from(self.opts)
        groups = series_mod.group(expand(path, options.s3_endpoint), options.series)
        return [SeriesPartition(i, files) for i, files in enumerate(groups)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SeriesPartition)
        options = options_from(self.opts)
        # only the table asked for is built (its stages only): a batch at a time leaves
        plan = plan_read(options, [self.table])
        builder = make_builder(plan, options, partition.files[0])
        target = builder.batches[self.table]
        add = builder.feeder()
        for ev in iter_series(partition.files, options, partition.index, plan=plan):
            add(ev)
            if target.batches:
                yield from self._filtered(target.take())
        builder.finish()
        yield from self._filtered(target.take())

    def _filtered(self, batches: list[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            if self.filters:
                batch = batch.filter(predicate_mask(AllOf(tuple(self.filters)), batch))
            if batch.num_rows:
                yield batch


class PushdownReader(PulsarReader):
    """PulsarReader that also takes filters (Spark needs spark.sql.python.filterPushdown.enabled
    for a reader with pushFilters, so it is chosen only when that setting is on)."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        schema = TABLES[self.table].schema
        rest = []
        for f in filters:
            term = term_of(f, schema)
            if term is None:
                rest.append(f)
            else:
                self.filters.append(term)
        return rest


def term_of(f: Filter, schema: pa.Schema) -> Term | None:
    """A filter Spark pushes down as a predicate term, when the reader applies it: a
    comparison or IN on one of the _PUSHABLE columns of the table (`schema`); time values
    (datetimes) become µs."""
    op = _OPS.get(type(f))
    attribute: tuple[str, ...] = getattr(f, "attribute", ())
    column = attribute[0] if len(attribute) == 1 else None
    if op is None or column not in _PUSHABLE or column not in schema.names:
        return None
    raw: Any = getattr(f, "value", None)
    if pa.types.is_timestamp(schema.field(column).type):
        return Term(column, op, tuple(_us(v) for v in raw) if op == "in" else _us(raw))
    return Term(column, op, tuple(raw) if op == "in" else raw)


def filters_of(pred: Predicate) -> list[Filter]:
    """A predicate as the filters Spark pushes to a data source (the reverse of `term_of`):
    it must be a conjunction of terms (`predicates.restrict` it to the table's columns
    first); time values stay µs (the reader takes ints as they are)."""
    if isinstance(pred, AnyOf):
        raise ValueError("Spark pushes a conjunction: an AnyOf of several terms is not one")
    if isinstance(pred, AllOf):
        return [f for part in pred.parts for f in filters_of(part)]
    return [_FILTERS[pred.op]((pred.column,), pred.value)]


def _us(value: Any) -> int:
    """A Spark timestamp filter value (datetime) as microseconds since the epoch."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        stamp: float = value.timestamp()
        return round(stamp * 1_000_000)
    number: int = int(value)
    return number


#: The executors' Python. pyspark started from a plain interpreter (not spark-submit) reads
#: only the environment variable PYSPARK_PYTHON when it makes the SparkContext, and hands
#: that path to every executor, standalone ones included; spark-submit and cluster managers
#: read the conf. `session()` sets both, to the same interpreter.
PYTHON_CONF = "spark.pyspark.python"
DRIVER_PYTHON_CONF = "spark.pyspark.driver.python"
#: The fix named when executors cannot import the package.
SHIP_HINT = (
    "install pulsar-dissector[spark] into that Python on every node, or ship it: "
    "--conf spark.archives=VENV.tar.gz#environment "
    "--conf spark.pyspark.python=./environment/bin/python (a venv packed with venv-pack); "
    "see docs/fleet.md, 'Shipping the package to a cluster'"
)
_IMPORT_ERROR = re.compile(r"\b((?:ModuleNotFoundError|ImportError): [^\n]*)")
_checked: set[str] = set()  # applications whose executors could import the package


def executor_python(conf: dict[str, str] | None = None) -> str:
    """The Python executors run: the conf's, else $PYSPARK_PYTHON, else this interpreter."""
    given = (conf or {}).get(PYTHON_CONF) or os.environ.get("PYSPARK_PYTHON")
    return given or sys.executable


def session(master: str = "local[*]", app: str = "pulsar-dissector", **conf: str) -> SparkSession:
    """A Spark session whose executors run this interpreter (so they can import us), unless
    conf names another `spark.pyspark.python`; registers the data source (which checks that
    executors can import the package)."""
    python = executor_python(conf)
    os.environ["PYSPARK_PYTHON"] = python  # what pyspark itself reads (see PYTHON_CONF)
    builder = SparkSession.builder.master(master).appName(app)
    builder = builder.config("spark.ui.enabled", "false")
    builder = builder.config("spark.sql.session.timeZone", "UTC")
    builder = builder.config(PUSHDOWN_CONF, "true")
    builder = builder.config(PYTHON_CONF, python)
    builder = builder.config(DRIVER_PYTHON_CONF, sys.executable)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    try:
        register(spark)
    except BaseException:
        spark.stop()
        raise
    return spark


def register(spark: SparkSession) -> None:
    """Make `spark.read.format("pulsar")` available in this session, once the executors are
    known to import the package (else InputError naming the fix)."""
    check_executors(spark)
    spark.dataSource.register(PulsarDataSource)


def check_executors(spark: SparkSession) -> None:
    """Run a task per core that imports the package: InputError if an executor cannot.

    The probe is a local function, so it travels by value and runs even where `dissector`
    does not import; checked once per application."""
    sc = spark.sparkContext
    if sc.applicationId in _checked:
        return

    def probe(_: object) -> tuple[str, str]:
        import importlib
        import sys

        try:
            importlib.import_module("dissector.frontends.spark")
        except ImportError as exc:
            return sys.executable, f"{type(exc).__name__}: {exc}"
        return sys.executable, ""

    n = max(1, sc.defaultParallelism)
    for python, error in sc.parallelize(range(n), n).map(probe).collect():
        if error:
            raise InputError(_cannot_import(error, python))
    _checked.add(sc.applicationId)


def _cannot_import(error: str, python: str | None = None) -> str:
    where = f" (Python {python})" if python else ""
    return f"executors cannot import the dissector package{where}: {error}; {SHIP_HINT}"


@contextmanager
def executor_errors() -> Iterator[None]:
    """Turn an executor's failure to import the package (a PythonException or, for the data
    source's planning, an AnalysisException, whose text holds the worker's traceback) into
    one InputError line; any other error passes unchanged."""
    try:
        yield
    except PySparkException as exc:
        found = _IMPORT_ERROR.search(str(exc))
        if found is None:
            raise
        raise InputError(_cannot_import(found.group(1), os.environ.get("PYSPARK_PYTHON"))) from None


def read(
    spark: SparkSession, paths: str | Sequence[str], table: str = "frames", **options: Any
) -> DataFrame:
    """One table of the captures as a Spark DataFrame (registers the source if needed).
    The journeys table is joined across the captures as the fleet job joins it
    (dissector.frontends.fleet.journeys): the data source reads each series alone."""
    register(spark)
    if table == JOURNEYS:
        from dissector.frontends.fleet import (
            journeys as fleet_journeys,
        )  # Spark stages: imported when used

        given = {k: ",".join(map(str, v)) if isinstance(v, list | tuple | set | frozenset)
                 else str(v) for k, v in options.items()}  # fmt: skip
        given["table"] = table
        endpoint = s3_endpoint_from(given.pop("s3_endpoint", None))
        if endpoint:
            given["s3_endpoint"] = endpoint
        settings = options_from(given)
        groups = series_mod.group(expand(paths, settings.s3_endpoint), settings.series)
        with executor_errors():
            return fleet_journeys.journeys_frame(spark, groups, settings)
    reader = spark.read.format("pulsar").option("table", table)
    if spark.conf.get(PUSHDOWN_CONF, "false") == "true":
        reader = reader.option("pushdown", "true")
    endpoint = s3_endpoint_from(options.pop("s3_endpoint", None))
    if endpoint:  # as this process sees it: the planner's Python worker may not
        reader = reader.option("s3_endpoint", endpoint)
    for key, value in options.items():
        if isinstance(value, list | tuple | set | frozenset):
            value = ",".join(str(v) for v in value)
        reader = reader.option(key, str(value))
    path = paths if isinstance(paths, str) else ",".join(str(p) for p in paths)
    with executor_errors():  # planning runs the source in the executors' Python
        return reader.load(path)
