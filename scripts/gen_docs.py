"""Regenerate the generated parts of README.md and docs/*.md, so that they cannot drift.

Input: the table registry (dissector.tables.schema.TABLES), the anomaly registry
(dissector.anomalies.REGISTRY), the command line's parser (dissector.frontends.cli
.build_parser), the modules of dissector/ (each one's docstring, read without importing it)
and `pulsar-dissect` itself run on the bundled samples (the README's examples).
Output: in each file, the text between `<!-- BEGIN GENERATED: NAME -->` and
`<!-- END GENERATED: NAME -->` replaced with block NAME's fresh text; what is outside the
markers is written by hand and kept; the files of `WHOLE` (the shipped Grafana dashboard's
JSON) are made whole. `--check` writes nothing and exits 1 naming the stale
files (tests/test_docs.py does the same in memory).
Rule: deterministic: the same sources give the same bytes (no times, sizes of this machine,
terminal width or Python version in the output: the CLI reference is rendered from the
parser's actions, not from argparse's help layout). Every block a source calls for must be
in some file (a new table or command needs its block), and every block in a file must be
one this script makes.
"""

from __future__ import annotations

import argparse
import ast
import functools
import glob
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "dissector"
#: Files that may hold generated blocks (README.md and every doc).
SOURCES = ("README.md", "docs/*.md")
#: Examples are cut to this width (longer lines end with " ...").
WIDTH = 100
PROG = "pulsar-dissect"

BLOCK = re.compile(
    r"(?P<begin><!-- BEGIN GENERATED: (?P<name>[\w:.-]+) -->\n)"
    r"(?P<body>.*?)"
    r"(?P<end><!-- END GENERATED: (?P=name) -->)",
    re.S,
)

# ---------------------------------------------------------------------------------- tables


def _cell(text: str) -> str:
    """Text for one cell of a Markdown table."""
    return text.replace("|", "\\|").replace("\n", " ")


def table_columns(name: str) -> str:
    """Every column of table `name`: its type and its description, from the registry."""
    from dissector.tables.schema import TABLES

    table = TABLES[name]
    lines = ["| column | type | description |", "| --- | --- | --- |"]
    for column in table.columns:
        kind = f"`{column.type}`" + ("" if column.nullable else ", never null")
        lines.append(f"| `{column.name}` | {_cell(kind)} | {_cell(column.doc)} |")
    return "\n".join(lines) + "\n"


def table_index() -> str:
    """The tables, in the registry's order, with their number of columns."""
    from dissector.tables.schema import TABLES

    lines = ["| table | columns |", "| --- | --- |"]
    lines += [f"| [`{n}`](#{n}) | {len(t.columns)} |" for n, t in TABLES.items()]
    return "\n".join(lines) + "\n"


def anomaly_codes() -> str:
    """Every anomaly code with its severity and meaning, from the registry."""
    from dissector.anomalies import REGISTRY

    lines = ["| code | severity | meaning |", "| --- | --- | --- |"]
    for code, kind in sorted(REGISTRY.items()):
        lines.append(f"| `{code}` | {kind.severity} | {_cell(kind.summary)} |")
    return "\n".join(lines) + "\n"


def finding_codes() -> str:
    """Every finding code with its severity, threshold option, meaning and hint."""
    from dissector.findings import REGISTRY

    lines = [
        "| code | severity | threshold | meaning | what to check |",
        "| --- | --- | --- | --- | --- |",
    ]
    for code, kind in sorted(REGISTRY.items()):
        option = f"`--{kind.threshold.replace('_', '-')}`" if kind.threshold else ""
        lines.append(
            f"| `{code}` | {kind.severity} | {option} | {_cell(kind.title)} | {_cell(kind.hint)} |"
        )
    return "\n".join(lines) + "\n"


def finding_thresholds() -> str:
    """Every threshold option with its default (the official clients' settings)."""
    from dissector.findings import THRESHOLDS, Thresholds

    defaults = Thresholds()
    lines = ["| option | default | meaning |", "| --- | --- | --- |"]
    for name, text in THRESHOLDS.items():
        lines.append(
            f"| `--{name.replace('_', '-')}` | {getattr(defaults, name)} | {_cell(text)} |"
        )
    return "\n".join(lines) + "\n"


_ISSUE = re.compile(r"^(?P<repo>[\w.-]+/[\w.-]+)#(?P<number>\d+)$")


def _source(text: str, spec_url: str) -> str:
    """One source in Markdown: an issue as its link, a spec section as a link to the spec."""
    issue = _ISSUE.match(text)
    if issue is not None:
        return f"[{text}](https://github.com/{issue['repo']}/issues/{issue['number']})"
    if text.startswith("spec: "):
        return f"[binary protocol: {text[len('spec: ') :]}]({spec_url})"
    return text


def finding_reference() -> str:
    """Every finding code (by name) with its severity, title, threshold option and default,
    hint, wire evidence and sources (dissector.findings: REGISTRY, Thresholds, SOURCES)."""
    from dissector.findings import REGISTRY, SOURCES, SPEC_URL, THRESHOLDS, Thresholds

    defaults = Thresholds()
    out: list[str] = []
    for code, kind in sorted(REGISTRY.items()):
        told = SOURCES[code]
        name = kind.threshold
        if name:
            default = getattr(defaults, name)
            option = f"`--{name.replace('_', '-')}`, default {default:g}: {THRESHOLDS[name]}"
        else:
            option = "none"
        sources = ", ".join(_source(s, SPEC_URL) for s in told.sources)
        out += [
            f"### `{code}`",
            "",
            f"- **severity**: {kind.severity}; **threshold**: {option}",
            f"- **what it means**: {kind.title}",
            f"- **wire evidence**: {told.evidence}",
            f"- **usual causes**: {kind.hint}",
            f"- **sources**: {sources}",
            "",
        ]
    return "\n".join(out)


# ------------------------------------------------------------------------------------- CLI


def _commands() -> dict[str, tuple[argparse.ArgumentParser, str]]:
    """Subcommand name -> (its parser, its one-line help), in --help's order."""
    from dissector.frontends.cli import build_parser

    parser = build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            return {name: (p, helps.get(name, "")) for name, p in action.choices.items()}
    raise SystemExit("gen_docs: the command line has no subcommands")


def _metavar(action: argparse.Action) -> str:
    """What follows an option (or stands for a positional), as argparse writes it."""
    if action.nargs == 0:
        return ""
    if action.metavar is not None:
        base = action.metavar if isinstance(action.metavar, str) else " ".join(action.metavar)
    elif action.choices is not None:
        base = "{" + ",".join(str(c) for c in action.choices) + "}"
    elif action.option_strings:
        base = action.dest.upper()
    else:
        base = action.dest
    if action.nargs == "?":
        return f"[{base}]"
    if action.nargs == "*":
        return f"[{base} ...]"
    if action.nargs == "+":
        return f"{base} [{base} ...]"
    if isinstance(action.nargs, int):
        return " ".join([base] * action.nargs)
    return base


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The action's help with argparse's %(...)s expanded (as --help shows it)."""
    text = action.help or ""
    if "%" not in text:
        return text
    params = {k: v for k, v in vars(action).items() if v is not argparse.SUPPRESS}
    params["prog"] = parser.prog
    if params.get("choices") is not None:
        params["choices"] = ", ".join(str(c) for c in params["choices"])
    return text % params


def _markdown(text: str) -> str:
    """Help text as Markdown: `*` escaped outside code spans (argparse help is plain text)."""
    parts = text.split("`")
    return "`".join(p if i % 2 else p.replace("*", "\\*") for i, p in enumerate(parts))


def _argument(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """One argument as a Markdown list item: its names, then what it does."""
    metavar = _metavar(action)
    if action.option_strings:
        names = ", ".join(
            f"`{o} {metavar}`" if metavar else f"`{o}`" for o in action.option_strings
        )
    else:
        names = f"`{metavar}`"
    text = _help(parser, action)
    notes = []
    if action.choices is not None and action.metavar is not None:
        notes.append("one of " + ", ".join(f"`{c}`" for c in action.choices))
    if action.required and action.option_strings:
        notes.append("required")
    if isinstance(action, argparse._AppendAction) and "repeatable" not in text:
        notes.append("repeatable")
    default = action.default
    if isinstance(default, list | tuple):
        default = ", ".join(str(d) for d in default)
    if (
        action.option_strings
        and action.nargs != 0
        and default not in (None, argparse.SUPPRESS, "")
        and "default" not in text
    ):
        notes.append(f"default `{default}`")
    parts = [_markdown(text)] if text else []
    if notes:
        parts.append(f"({'; '.join(notes)})")
    return f"- {names}" + (": " + " ".join(parts) if parts else "")


def _visible(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    for action in parser._actions:
        if action.help is argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
            continue
        yield action


def _synopsis(name: str, parser: argparse.ArgumentParser) -> str:
    words = [f"{PROG} {name}", "[options]"]
    for action in _visible(parser):
        if action.option_strings and action.required:
            words.append(f"{action.option_strings[0]} {_metavar(action)}".strip())
    words += [_metavar(a) for a in _visible(parser) if not a.option_strings]
    return " ".join(words)


def cli_overview() -> str:
    """The commands, each with its one line of help, linking to its section."""
    lines = [f"`{PROG} [--version] COMMAND ...`", ""]
    for name, (_, text) in _commands().items():
        lines.append(f"- [`{name}`](#{PROG}-{name}): {text}")
    return "\n".join(lines) + "\n"


def cli_command(name: str) -> str:
    """One command's reference: its synopsis and every argument, from its parser."""
    parser, text = _commands()[name]
    lines = [text[:1].upper() + text[1:] + ".", "", "```text", _synopsis(name, parser), "```", ""]
    lines += [_argument(parser, a) for a in _visible(parser)]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------- layout


def _summary(path: Path) -> str:
    """The first sentence of a module's docstring: its first line, with the lines after it
    while the sentence goes on (up to a line that ends with a period)."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    words: list[str] = []
    for line in doc.split("\n\n", 1)[0].splitlines():
        words.append(line.strip())
        if line.rstrip().endswith("."):
            break
    return " ".join(words)


def _tree(folder: Path, depth: int) -> Iterator[tuple[str, str]]:
    """(indented name, summary) for the package folder's modules, then its subpackages (every
    folder with a module; the generated bindings in _pb/ as one line)."""
    pad = "  " * depth
    for path in sorted(p for p in folder.glob("*.py") if p.name != "__init__.py"):
        yield f"{pad}{path.name}", _summary(path)
    for sub in sorted(p for p in folder.iterdir() if p.is_dir() and any(p.glob("*.py"))):
        init = sub / "__init__.py"  # a namespace package has none
        yield f"{pad}{sub.name}/", _summary(init) if init.is_file() else ""
        if sub.name != "_pb":
            yield from _tree(sub, depth + 1)


def layout() -> str:
    """The package's layout, one line per module: the first sentence of its docstring."""
    rows = [("dissector/", ""), ("  __init__.py", _summary(PACKAGE / "__init__.py"))]
    rows += list(_tree(PACKAGE, 1))
    width = max(len(name) for name, _ in rows) + 2
    lines = [f"{name:<{width}}{text}".rstrip() for name, text in rows]
    return "```text\n" + "\n".join(lines) + "\n```\n"


# -------------------------------------------------------------------------------- examples

#: README examples: block name -> (arguments of pulsar-dissect, lines kept: None for all).
EXAMPLES: dict[str, tuple[tuple[str, ...], int | None]] = {
    "example:read": (("read", "pcaps/produce_consume.pcap"), 8),
    "example:summary": (("summary", "pcaps/seek.pcap"), None),
    "example:sql": (
        (
            "sql",
            "pcaps/*.pcap*",
            "SELECT request_command, count(*) AS n, max(latency_us) AS max_us "
            "FROM timeline WHERE outcome = 'success' GROUP BY 1 ORDER BY n DESC, 1 LIMIT 5",
        ),
        None,
    ),
}


def _shell_word(word: str) -> str:
    if re.fullmatch(r"[\w./*:=-]+", word):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def example(name: str) -> str:
    """A command of the README run on the bundled samples, its output cut to WIDTH."""
    args, keep = EXAMPLES[name]
    argv: list[str] = []
    for arg in args:  # sample globs as the shell expands them (sorted)
        argv += sorted(glob.glob(arg, root_dir=ROOT)) if arg.startswith("pcaps/") else [arg]
    env = {**os.environ, "COLUMNS": str(WIDTH), "LC_ALL": "C.UTF-8", "TZ": "UTC"}
    done = subprocess.run(
        [sys.executable, "-m", "dissector.frontends.cli", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(
            f"gen_docs: {PROG} {' '.join(args)}: exit {done.returncode}\n{done.stderr}"
        )
    lines = done.stdout.splitlines()
    cut = keep is not None and len(lines) > keep
    lines = lines[:keep] + ["..."] if cut else lines
    shown = [line if len(line) <= WIDTH else line[: WIDTH - 4] + " ..." for line in lines]
    command = " ".join([f"$ {PROG}", *(_shell_word(a) for a in args)])
    return "```console\n" + "\n".join([command, *shown]) + "\n```\n"


# ---------------------------------------------------------------------------------- blocks


def metric_families() -> str:
    """Every metric family (dissector.metrics.families): name, type, unit, labels, meaning,
    what it is made from."""
    from dissector.metrics.families import FAMILIES

    lines = [
        "| name | type | unit | labels | meaning | made from |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for f in FAMILIES:
        labels = ", ".join(f"`{label}`" for label in f.labels)
        where = f.source + (" (`live` only)" if f.live_only else "")
        lines.append(
            f"| `{f.name}` | {f.kind} | {f.unit} | {labels} | {_cell(f.help)} | {_cell(where)} |"
        )
    return "\n".join(lines) + "\n"


def metric_limits() -> str:
    """The label limits and the histograms' buckets (dissector.metrics.families)."""
    from dissector.metrics.families import LABEL_LIMITS, LATENCY_BUCKETS, OTHER

    lines = [f"- `{label}`: at most {limit:,} distinct values per family, the rest `{OTHER}`"
             for label, limit in LABEL_LIMITS.items()]  # fmt: skip
    bounds = ", ".join(f"{b:g}" for b in LATENCY_BUCKETS)
    lines.append(f"- histogram buckets (`le`, seconds): {bounds}, +Inf")
    return "\n".join(lines) + "\n"


def read_plan() -> str:
    """What each read asks -> the stages it runs (dissector.read.plan), default settings."""
    from dissector.read.plan import plan_table

    return plan_table()


def grafana_panels() -> str:
    """Every panel of the shipped Grafana dashboard with its queries, and its variables."""
    from dissector.metrics.dashboard import panel_docs

    return panel_docs()


def grafana_board() -> str:
    """The shipped Grafana dashboard's JSON (a file generated whole)."""
    from dissector.metrics.board import render

    return render()


#: Files generated whole (not blocks in a hand-written file): path -> its maker.
WHOLE: dict[str, Callable[[], str]] = {
    "dissector/metrics/grafana/pulsar-dissector.json": grafana_board,
}


def blocks() -> dict[str, Callable[[], str]]:
    """Every generated block by name, and how to make it."""
    from dissector.tables.schema import TABLES

    made: dict[str, Callable[[], str]] = {
        "tables:index": table_index,
        "anomaly-codes": anomaly_codes,
        "finding-codes": finding_codes,
        "finding-thresholds": finding_thresholds,
        "finding-reference": finding_reference,
        "cli:overview": cli_overview,
        "layout": layout,
        "read-plan": read_plan,
        "grafana:panels": grafana_panels,
        "metrics:families": metric_families,
        "metrics:limits": metric_limits,
    }
    for table in TABLES:
        made[f"tables:{table}"] = functools.partial(table_columns, table)
    for command in _commands():
        made[f"cli:{command}"] = functools.partial(cli_command, command)
    for name in EXAMPLES:
        made[name] = functools.partial(example, name)
    return made


def files() -> list[Path]:
    """README.md and every doc, sorted."""
    found = {p for pattern in SOURCES for p in ROOT.glob(pattern)}
    return sorted(found)


def check_names(texts: dict[Path, str], makers: dict[str, Callable[[], str]]) -> None:
    """SystemExit naming a block in a file that this script does not make, or a block it
    makes that no file has (a new table or command needs its place in the docs)."""
    seen: set[str] = set()
    for path, text in texts.items():
        for match in BLOCK.finditer(text):
            if match["name"] not in makers:
                where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                raise SystemExit(f"gen_docs: {where}: no block {match['name']!r} is made")
            seen.add(match["name"])
    missing = sorted(set(makers) - seen)
    if missing:
        raise SystemExit(f"gen_docs: blocks in no file: {', '.join(missing)}")


def render(text: str, makers: dict[str, Callable[[], str]], made: dict[str, str]) -> str:
    """The text with each generated block made afresh (`made` caches blocks by name)."""

    def fresh(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in made:
            made[name] = makers[name]()
        return match["begin"] + made[name] + match["end"]

    return BLOCK.sub(fresh, text)


def regenerate() -> dict[Path, str]:
    """Every file with generated blocks -> its text with fresh blocks (nothing written)."""
    texts = {path: path.read_text(encoding="utf-8") for path in files()}
    texts = {path: text for path, text in texts.items() if BLOCK.search(text)}
    makers = blocks()
    check_names(texts, makers)
    with ThreadPoolExecutor(len(EXAMPLES)) as pool:  # each a process: run them side by side
        made = dict(zip(EXAMPLES, pool.map(example, EXAMPLES), strict=True))
    fresh = {path: render(text, makers, made) for path, text in texts.items()}
    return fresh | {ROOT / name: make() for name, make in WHOLE.items()}


def stale() -> list[str]:
    """Files whose generated blocks differ from a fresh generation (empty when fresh)."""
    return [
        str(path.relative_to(ROOT))
        for path, text in regenerate().items()
        if not path.exists() or path.read_text(encoding="utf-8") != text
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else "")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    if args.check:
        old = stale()
        for name in old:
            print(f"stale: {name} (run make docs)")
        return 1 if old else 0
    for path, text in regenerate().items():
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
