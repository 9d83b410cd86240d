"""EDGE: the `pulsar-dissect` command line, one module per command.

Input: command-line arguments (`main`), or nothing (`build_parser`, for the parser alone).
Output: the exit status; the commands write on stdout, errors one line on stderr.
Rule: `entry` parses and turns errors into one line; `options` holds what the commands
share; each command (stream, read, summary, fields, sql, report, spark, live) is a module
with its arguments (`add_parser`) and its `cmd_*` function.
"""

from __future__ import annotations

from dissector.frontends.cli.entry import build_parser, main

__all__ = ["build_parser", "main"]
