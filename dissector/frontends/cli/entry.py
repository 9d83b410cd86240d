"""EDGE: the `pulsar-dissect` command line: the parser of every command, and its errors.

Input: command-line arguments and the files they name.
Output: text or JSON lines on stdout; errors as one line on stderr with a non-zero exit.
Rule: bad input never shows a traceback: DissectorError and OSError become one clear line
(exit 2), and so does an argument of text (-Y, --topic, a query...) holding bytes that are
not UTF-8 (file names are the file system's bytes: any are taken). Exit 0 when the input
was read, even if it held anomalies.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import dissector.frontends.cli.dashboard as dashboard
import dissector.frontends.cli.diagnose as diagnose
import dissector.frontends.cli.fields as fields
import dissector.frontends.cli.live as live
import dissector.frontends.cli.read as read
import dissector.frontends.cli.report as report
import dissector.frontends.cli.spark as spark
import dissector.frontends.cli.sql as sql
import dissector.frontends.cli.stream as stream
import dissector.frontends.cli.summary as summary
from dissector.capture.listing import expand_captures
from dissector.errors import DissectorError, UsageError, describe_os_error, os_reason
from dissector.frontends.cli.options import inputs
from dissector.frontends.overwrite_guard import refuse_overwrite
from dissector.frontends.terminal import printable
from dissector.keylog_files import check_keylogs
from dissector.read.inputs import check_captures

_DIST = "pulsar-dissector"


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (what was wrong, and where help is), exit 2,
    and options are never abbreviated (`--top` must not silently mean `--topic`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{**kwargs, "allow_abbrev": False})

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")

    def _print_message(self, message: str, file: Any = None) -> None:
        """argparse's, but a failed write of --help or --version is not passed over: one
        line and exit 2 (a full disk), or exit 0 for a reader that left (`| head`)."""
        if not message:
            return
        out = file or sys.stderr
        try:
            out.write(message)
            out.flush()
        except BrokenPipeError:
            _to_devnull(out)
            raise SystemExit(0) from None
        except OSError as exc:
            _to_devnull(out)  # the exit's flush too
            print(f"pulsar-dissect: {_stream_name(out)}: cannot write: {os_reason(exc)}",
                  file=sys.stderr)  # fmt: skip
            raise SystemExit(2) from None


def _to_devnull(out: Any) -> None:
    """Point a stream that can no longer be written at /dev/null, so that the interpreter's
    own flush on its way out does not complain a second time."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())


def _stream_name(out: Any) -> str:
    return "standard output" if out is sys.stdout else "standard error"


def build_parser() -> argparse.ArgumentParser:
    """Every command's parser; each one's arguments and `run` come from its module."""
    parser = _Parser(
        prog="pulsar-dissect",
        description="Decode Apache Pulsar binary-protocol traffic into frames and tables.",
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {importlib.metadata.version(_DIST)}"
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for command in (stream, read, summary, diagnose, fields, sql, report, spark, live, dashboard):
        command.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: the exit status (0, 1 as documented, 2 for an error, 130 for Ctrl-C)."""
    try:
        code = _main(argv)
    except SystemExit as exc:  # argparse's own exit: --help, or a usage error (one line)
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 2
    return _flushed(code)


def _flushed(code: int) -> int:
    """Standard output flushed now, while an error can still be told: a write that fails
    (a full disk) is one line and exit 2, never a silent exit at the interpreter's end."""
    try:
        sys.stdout.flush()
    except OSError as exc:
        # the interpreter flushes again on its way out: let that one go nowhere
        _to_devnull(sys.stdout)
        if isinstance(exc, BrokenPipeError):
            return code
        print(f"pulsar-dissect: standard output: cannot write: {os_reason(exc)}", file=sys.stderr)
        return 2
    return code


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "captures", None):  # `-` reads standard output of another tool
        args.captures = ["/dev/stdin" if c == "-" else c for c in args.captures]
    try:
        refuse_undecodable(args, _options_of(parser))
        if getattr(args, "tls_keylog", None):
            check_keylogs(args.tls_keylog)
        if getattr(args, "captures", None):
            # globs and directories, local or in object storage, then every input checked
            # before any output
            args.captures = expand_captures(args.captures, args.s3_endpoint)
            check_captures(args.captures, args.s3_endpoint)
        outputs = [None, getattr(args, "output", None), getattr(args, "write", None)]
        refuse_overwrite(inputs(args), [o for o in outputs if isinstance(o, str) or o is None])
        return int(args.run(args, sys.stdout))
    except BrokenPipeError:
        # Output piped into `head`: not an error. Point stdout at devnull so that the
        # interpreter's final flush does not complain either.
        _to_devnull(sys.stdout)
        return 0
    except DissectorError as exc:
        print(f"pulsar-dissect: {printable(str(exc))}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"pulsar-dissect: {printable(describe_os_error(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: outputs were removed on the way out (TableWriter)
        print("pulsar-dissect: interrupted", file=sys.stderr)
        return 130


#: Arguments naming files (or a network interface): the file system's bytes, whatever they
#: are (undecodable ones arrive surrogate-escaped and are opened as they are).
PATH_ARGUMENTS = frozenset({"captures", "files", "tls_keylog", "output", "write", "interface"})
#: Characters of a refused argument quoted in the error
_SHOWN = 60


def refuse_undecodable(args: argparse.Namespace, names: dict[str, str]) -> None:
    """A UsageError for the first argument of text that holds bytes that are not UTF-8
    (Python gives them as lone surrogates): no filter, query or name can use them."""
    for dest, value in vars(args).items():
        if dest in PATH_ARGUMENTS:
            continue
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and not _is_utf8(item):
                shown = ascii(os.fsencode(item[:_SHOWN]))[1:]
                more = "..." if len(item) > _SHOWN else ""
                raise UsageError(
                    f"{names.get(dest, dest)}: {shown}{more} holds bytes that are not UTF-8 text"
                )


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _options_of(parser: argparse.ArgumentParser) -> dict[str, str]:
    """dest -> the option's long name (`--filter`, `--topic`) or the argument's name, in
    every command (a dest means one option in all of them)."""
    names: dict[str, str] = {}
    for action in parser._actions:  # argparse keeps its sub-parsers nowhere public
        if not isinstance(action, argparse._SubParsersAction):
            continue
        for sub in action.choices.values():
            for a in sub._actions:
                strings = sorted(a.option_strings, key=len)  # `--filter` for -Y and -f
                names[a.dest] = strings[-1] if strings else str(a.metavar or a.dest)
    return names
