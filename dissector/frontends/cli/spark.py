"""EDGE: `pulsar-dissect spark`: the fleet job on Spark.

Input: the parsed arguments of `spark`: captures, an output folder, the master and settings.
Output: Parquet tables and the summary in the folder; the summary on stdout.
Rule: pyspark is an extra: without it the command is one error line; the session is
stopped whatever happens.
"""

from __future__ import annotations

import argparse
from typing import TextIO

from dissector.errors import DissectorError, UsageError
from dissector.frontends.cli.options import Subcommands, reader_arguments, reader_options


def _spark_conf(items: list[str]) -> dict[str, str]:
    conf = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--conf takes KEY=VALUE, not {item!r}")
        conf[key.strip()] = value
    return conf


def cmd_spark(args: argparse.Namespace, out: TextIO) -> int:
    """The fleet job: dissect every capture on Spark into Parquet, then summarize."""
    try:
        from dissector.frontends import spark
        from dissector.frontends.fleet import job as fleet
    except ImportError as exc:  # pyspark is an extra
        raise DissectorError(f"the spark command needs pyspark ({exc})") from None
    session = spark.session(args.master, **_spark_conf(args.conf))
    try:
        summary = fleet.run(session, args.captures, args.output, reader_options(args))
    finally:
        session.stop()
    out.write(fleet.render(summary))
    out.write(f"tables and summary written to {args.output}\n")
    return 0


def add_parser(sub: Subcommands) -> None:
    """The `spark` command's arguments."""
    fleet = sub.add_parser("spark", help="fleet job: captures -> Parquet tables + summary")
    reader_arguments(fleet)
    fleet.add_argument(
        "-o", "--output", required=True, help="output folder: a path or s3://, gs://, hdfs:// URI"
    )
    fleet.add_argument("--master", default="local[*]", help="Spark master URL (default local[*])")
    fleet.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting, repeatable (e.g. spark.archives=venv.tar.gz#environment); "
        "executors run this Python unless spark.pyspark.python says otherwise",
    )
    fleet.set_defaults(run=cmd_spark)
