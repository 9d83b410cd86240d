"""The `cli` level: `pulsar-dissect` run as a user runs it, with generated arguments.

Input: a `random.Random`; captures made as the other levels make them (damaged sample windows,
TLS sessions with key logs, conversations full of hostile strings: fuzz.evil).
Output: `make` gives a `Case` (the argument list, and the files of a scratch folder: captures
and key logs, some with odd names: spaces, quotes, dashes, glob characters, non-UTF-8 bytes);
`run` writes the folder, runs the command in a subprocess (a fresh interpreter, the console
script, standard input /dev/null) under a time limit, and checks it.
Arguments: a subcommand (read, summary, sql, fields, report) and options with generated values:
numbers huge, negative, inf, nan or not numbers; every --format and --table; -o and -w onto
the inputs or the key logs (the same path spelled otherwise, through a link), /dev/full, a
missing folder; -Y expressions (SQL, Wireshark style, broken, words of up to 100,000
characters); SQL with duplicate column names; --since/--until, -t, --columns; remote URLs
(s3:///x ...), globs, folders, missing files.
Invariants: exit status 0 or 2 (the CLI's documented ones) within TIME_LIMIT s; no Python
traceback, and every line of standard error the tool's own (it starts with `pulsar-dissect`:
no library warning); no input file changed (hashed before and after); no hidden temporary
file left, and after a non-zero exit no new file at all; JSON lines on standard output
parse; text output (the text view, -V, summary, sql's table) and standard error hold no
control character a terminal obeys (ESC, BEL, ...); a run that printed something, run again
with standard output on /dev/full, fails (non-zero), and so do -o and -w onto a full device,
which stays a device.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from random import Random
from typing import Any

from fuzz import mutators as mu
from fuzz import tls_inputs as ti
from fuzz.checks import Case, Seen, require
from fuzz.evil import raw_controls, strings_capture
from fuzz.packets import Conn, pcap, stamp
from fuzz.seeds import Corpus
from fuzz.tls_pool import pool

#: Seconds one command may run (the campaign's own limit per input is 30 s).
TIME_LIMIT = 20.0
SUBCOMMANDS = ("read",) * 5 + ("summary",) * 2 + ("sql",) * 2 + ("report", "fields")
NUMBERS = (
    "0", "1", "2", "-1", "10", "65535", "65536", "1e303", "1e308", "1e309", "inf", "-inf",
    "nan", "1e-300", "9" * 30, "0x10", "1_000", "abc", "", " 5", "5.5",
)  # fmt: skip
#: -j values: small, or not numbers (a large N would fork N processes on a shared machine).
JOBS = ("1", "2", "3", "0", "-1", "abc", "2.5", "", "nan", "1e3")
TIMES = ("2024-01-01", "1e20", "-1e20", "nan", "garbage", "9999-12-31T23:59:59", "0", "1.5")
NAMES = (
    "in.pcap", "in put.pcap", "it's.pcap", '"q".pcap', "-dash.pcap", "[a].pcap", "*.pcap",
    "ünï.pcap", "%s%n.pcap", os.fsdecode(b"\xff\xfe.pcap"), os.fsdecode(b"caf\xe9.pcap"),
    "x" * 200 + ".pcap", "noext",
)  # fmt: skip
FORMATS = ("text", "jsonl", "csv", "parquet")
TABLES = ("frames", "messages", "timeline", "entities", "anomalies", "conversations")
FILTERS = (
    "command = 'SEND'",
    "frame_size > 10",
    'command == "SEND" && frame_size > 10',
    'topic contains "a"',
    '!(command == "PING") || conn_id == 1',
    "latency_us > 10ms",
    "fields LIKE '%topic%'",
    "(((",
    "'",
    "1=1; DROP TABLE frames",
    "nope = 1",
    "conn_id IN (SELECT conn_id FROM frames)",
)
QUERIES = (
    "SELECT conn_id, conn_id FROM frames LIMIT 1",
    "SELECT * FROM frames, messages LIMIT 3",
    "SELECT command, count(*) FROM frames GROUP BY 1",
    "SELECT * FROM conversations",
    "SELECT topic, count(*) n FROM messages GROUP BY topic",
    "SELECT * FROM anomalies",
    "SELEC frames",
    "SELECT 1",
    "SELECT x FROM frames",
    'SELECT conn_id AS "a b", ts FROM timeline',
)
DECODE_OPTIONS = (
    "--port", "--tls-port", "--max-frame-size", "--max-uncompressed", "--idle-timeout",
    "--payload-preview", "-j", "--series", "--no-merge",
)  # fmt: skip
REMOTE = ("s3:///x", "s3://", "s3://b/k.pcap", "gs:///x", "hdfs:///x", "file:///nonexistent.pcap")
LONG_WORDS = (100, 5000, 20_000, 20_000, 100_000)


def _capture(rng: Random, corpus: Corpus) -> tuple[bytes, str | None]:
    """Capture bytes and, for a TLS session, its key log."""
    kind = rng.random()
    if kind < 0.35:
        seed, donor = rng.choice(corpus.captures), rng.choice(corpus.captures)
        return mu.mutate_capture(rng, seed.records, donor.records, gz=seed.gz)[0], None
    if kind < 0.6:
        return mu.write_pcap(rng, mu.window(rng, rng.choice(corpus.captures).records), [])[0], None
    if kind < 0.8:
        return strings_capture(rng), None
    tls = rng.choice(pool())
    segs = ti.segments(list(tls.wire), 1400)
    pkts = ti.session_packets(Conn(server_port=6651), ti.interleave(segs, "sent", rng))
    return pcap(stamp(pkts)), tls.keylog


def _number(rng: Random, usual: tuple[str, ...]) -> str:
    return rng.choice(NUMBERS) if rng.random() < 0.25 else rng.choice(usual)


def _expression(rng: Random) -> str:
    if rng.random() < 0.3:
        word = "a" * rng.choice(LONG_WORDS)
        return rng.choice((word, f"{word} contains 'x'", f'topic contains "{word}"'))
    return rng.choice(FILTERS)


def _target(rng: Random, files: dict[str, bytes], inputs: list[str], suffix: str) -> str:
    """Where -o or -w writes: often onto an input (spelled otherwise), else somewhere new."""
    roll = rng.random()
    if roll < 0.3 and inputs:
        name = rng.choice(inputs)
        return rng.choice((name, "./" + name, "{dir}/" + name, "link-" + name))
    if roll < 0.4:
        return "{full}"
    if roll < 0.5:
        return rng.choice(("missing/dir/out" + suffix, "outdir/", "-", ""))
    return rng.choice(("out", "o u t", os.fsdecode(b"\xff"), "out.pcap")) + suffix


def make(rng: Random, corpus: Corpus) -> Case:
    sub = rng.choice(SUBCOMMANDS)
    files: dict[str, bytes] = {}
    captures: list[str] = []
    keylogs: list[str] = []
    for _ in range(rng.choice((1, 1, 1, 2))):
        data, keylog = _capture(rng, corpus)
        name = rng.choice(NAMES)
        while name in files:
            name = "x" + name
        files[name] = data
        captures.append(name)
        if keylog is not None:
            files[f"keys{len(keylogs)}.log"] = keylog.encode()
            keylogs.append(f"keys{len(keylogs)}.log")
    args: list[str] = [sub]
    if sub == "fields":
        args += rng.sample(TABLES, rng.choice((0, 1, 2)))
        if rng.random() < 0.2:
            args.append("nope")
        if rng.random() < 0.5:
            args += ["--format", rng.choice(("text", "json"))]
        return Case("cli", 0, [" ".join(args)], args, {"files": files, "text": True})
    shown = list(captures)
    if rng.random() < 0.1:
        shown = [rng.choice(REMOTE)]
    elif rng.random() < 0.1:
        shown = [rng.choice(("*.pcap", ".", "missing.pcap", "{dir}", "keys0.log"))]
    args += [
        c if c.startswith(("{", "s3", "gs", "hdfs", "file", "*", ".")) else "./" + c for c in shown
    ]
    if sub == "sql":
        args.append(rng.choice(QUERIES))
    for _ in range(rng.choice((0, 1, 2, 3))):
        opt = rng.choice(DECODE_OPTIONS)
        if opt == "-j":  # never many: -j N forks N workers, whatever N (the machine is shared)
            args += [opt, rng.choice(JOBS)]
        elif opt == "--series":
            args += [opt, rng.choice(("auto", "digits", "none", "bad"))]
        elif opt == "--no-merge":
            args.append(opt)
        else:
            args += [opt, _number(rng, ("1", "2", "6650", "1000", "0.001"))]
    if keylogs and rng.random() < 0.8:
        args += ["--tls-keylog", rng.choice(keylogs)]
    elif rng.random() < 0.05:
        args += ["--tls-keylog", rng.choice(("missing.log", captures[0], "."))]
    if "-j" not in args:
        args += ["-j", rng.choice(("1", "1", "2"))]
    text = False
    if sub == "read":
        text = _read_options(rng, args, files, captures + keylogs)
    elif sub == "summary":
        fmt = rng.choice(("text", "json"))
        args += ["--format", fmt]
        text = fmt == "text"
        if rng.random() < 0.3:
            args += rng.choice((["--top", _number(rng, ("1", "5"))], ["--all"]))
    elif sub == "sql":
        fmt = rng.choice(FORMATS)
        args += ["--format", fmt]
        text = fmt == "text"
        if fmt != "text" or rng.random() < 0.3:
            args += ["-o", _target(rng, files, captures + keylogs, "." + fmt)]
    else:  # report
        args += ["-o", _target(rng, files, captures + keylogs, rng.choice((".html", ".htm", "")))]
    settings = {"files": files, "text": text, "full": rng.random() < 0.3}
    return Case("cli", sum(map(len, files.values())), [" ".join(args)[:300]], args, settings)


def _read_options(rng: Random, args: list[str], files: dict[str, bytes], inputs: list[str]) -> bool:
    """read's options; whether its standard output is the text view."""
    tables = rng.sample(TABLES, rng.choice((0, 0, 0, 1, 1, 2)))
    for t in tables:
        args += ["--table", t]
    fmt = rng.choice(FORMATS + ("text",))
    if fmt != "text" or rng.random() < 0.3:
        args += ["--format", fmt]
    if rng.random() < 0.35:
        args += ["-o", _target(rng, files, inputs, "." + (fmt if fmt != "text" else "csv"))]
    if rng.random() < 0.15:
        args += ["-w", _target(rng, files, inputs, ".pcap")]
    extra = (
        (["-Y", _expression(rng)], 0.3),
        (["--topic", rng.choice(("a", "persistent://public/default/t", ""))], 0.1),
        (["--command", rng.choice(("SEND", "send", "NOPE", ""))], 0.1),
        (["--conn", _number(rng, ("1", "2"))], 0.1),
        (["--since", rng.choice(TIMES)], 0.1),
        (["--until", rng.choice(TIMES)], 0.1),
        (["--columns", rng.choice(("conn_id,command", "conn_id,conn_id", "nope", ",", "ts"))], 0.1),
        (["-c", _number(rng, ("1", "3"))], 0.15),
        (["-t", rng.choice(("r", "d", "a", "ad", "u", "ud", "e", "x"))], 0.15),
        (["-V"], 0.2),
        (["-x"], 0.1),
        (["--fields"], 0.1),
        (["--show-secrets"], 0.1),
    )
    for option, chance in extra:
        if rng.random() < chance:
            args += option
    plain = not tables and "-o" not in args and fmt == "text"
    return plain and "-w" not in args


# ---------------------------------------------------------------------------- running


def _command() -> list[str]:
    script = Path(sys.executable).with_name("pulsar-dissect")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "dissector.frontends.cli"]


def _snapshot(folder: Path) -> dict[str, str]:
    """Every file under `folder` (hidden ones too) with the hash of its bytes."""
    out = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            if os.path.isfile(path) and not os.path.islink(path) and name != "devfull":
                out[os.path.relpath(path, folder)] = hashlib.sha256(
                    Path(path).read_bytes()
                ).hexdigest()
    return out


def _prepare(case: Case, workdir: Path) -> tuple[Path, list[str]]:
    folder = workdir / "cli"
    if folder.exists():
        subprocess.run(["rm", "-rf", str(folder)], check=True)
    folder.mkdir(parents=True)
    for name, data in case.settings["files"].items():
        (folder / name).write_bytes(data)
        os.symlink(name, folder / f"link-{name}")
    args = [
        a.replace("{dir}", str(folder)).replace("{full}", _full_device(folder)) for a in case.data
    ]
    return folder, args


def _full_device(folder: Path) -> str:
    """A device that is always full: our own node of /dev/full's kind in the scratch folder
    when we may make one (root). Never /dev/full itself then: a tool that writes its output
    beside the target and renames it over (as TableWriter does) would replace the system's
    device node with a regular file."""
    node = folder / "devfull"
    if not node.exists():
        try:
            os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
        except OSError:  # not root: /dev cannot be written to, so using it is safe
            return "/dev/full"
    return str(node)


def _run(args: list[str], folder: Path, stdout: Any) -> tuple[int, bytes, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONWARNINGS", "COLUMNS"))}
    try:
        done = subprocess.run(
            _command() + args,
            cwd=folder,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.PIPE,
            timeout=TIME_LIMIT,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        require(False, "cli_time_limit", f"over {TIME_LIMIT} s: {_shown(args)}")
        raise AssertionError("unreachable") from None
    err = done.stderr.decode("utf-8", "replace")
    return done.returncode, done.stdout if done.stdout is not None else b"", err


def _shown(args: list[str]) -> str:
    return " ".join(a if len(a) < 80 else a[:40] + f"...({len(a)} chars)" for a in args)[:400]


def run(case: Case, workdir: Path) -> Seen:
    folder, args = _prepare(case, workdir)
    before = _snapshot(folder)
    code, out, err = _run(args, folder, subprocess.PIPE)
    after = _snapshot(folder)
    check_run(args, code, out, err, case.settings["text"])
    changed = sorted(n for n, h in before.items() if after.get(n) != h)
    how = " ".join(o for o in ("-o", "-w") if o in args) or args[0]
    detail = f"{changed}: {_shown(args)}; exit {code}: {err[:200]}"
    require(not changed, "cli_changed_input", detail, how)
    hidden = [n for n in after if os.path.basename(n).startswith(".") and n.endswith(".part")]
    require(not hidden, "cli_left_temporary", f"{hidden} after exit {code}: {_shown(args)}")
    if code != 0:
        left = sorted(set(after) - set(before))
        require(not left, "cli_left_output", f"{left} after exit {code}: {_shown(args)}")
    full = _full_device(folder)
    if full != "/dev/full":
        require(
            stat.S_ISCHR(os.lstat(full).st_mode),
            "cli_replaced_device",
            f"the device {full} is now a regular file: {_shown(args)}; exit {code}",
            how,
        )
    for option in ("-w", "-o"):
        if option in args and args[args.index(option) + 1] == full and code == 0:
            # Nothing to write fits on a full device (an empty result: cli:32:229, a query
            # whose result has no row as jsonl): the same command onto a regular file says
            # whether there was anything to write.
            at = args.index(option) + 1
            plain = os.path.join(folder, "full-check.out")
            again, _, _ = _run([*args[:at], plain, *args[at + 1 :]], folder, subprocess.PIPE)
            size = os.path.getsize(plain) if os.path.isfile(plain) else 0
            with contextlib.suppress(FileNotFoundError):
                os.unlink(plain)
            detail = f"{option} {full} gave exit 0 (a file gets {size} bytes): {_shown(args)}"
            require(again != 0 or size == 0, "cli_full_device", detail, option)
    if case.settings.get("full") and code == 0 and out:
        with open("/dev/full", "wb") as device:  # opened, never replaced: safe
            again, _, err2 = _run(args, folder, device)
        check_run(args, again, b"", err2, False)
        detail = f"stdout on /dev/full gave exit 0: {_shown(args)}"
        require(again != 0, "cli_full_device", detail, f"stdout, {args[0]}")
    return Seen()


def _crash_site(err: str) -> str:
    """The exception and the innermost dissector/ frame of a traceback on standard error
    (what tells one crash from another, as the campaign's keys do)."""
    frames = re.findall(r'File "[^"]*?(dissector/[^"]+)", line (\d+), in (\w+)', err)
    last = [ln for ln in err.strip().splitlines() if ln and not ln.startswith(" ")]
    kind = last[-1].split(":")[0] if last else "?"
    return f"{kind} at {':'.join(frames[-1])}" if frames else kind


def check_run(args: list[str], code: int, out: bytes, err: str, text: bool) -> None:
    """The invariants of one run (see the module docstring)."""
    where = _shown(args)
    crashed = "Traceback (most recent call last)" in err
    require(not crashed, "cli_traceback", f"{where}: {err[-600:]}", _crash_site(err))
    require(code in (0, 2), "cli_exit_status", f"exit {code}: {where}: {err[-300:]}", str(code))
    foreign = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("pulsar-dissect")]
    kind = re.sub(r"^.*?(\w+(Warning|Error)):.*$", r"\1", foreign[0]) if foreign else ""
    require(not foreign, "cli_foreign_stderr", f"{where}: {foreign[:3]}", f"{args[0]}: {kind}")
    require(not raw_controls(err), "cli_stderr_controls", f"{where}: {raw_controls(err)}")
    if text:
        shown = raw_controls(out.decode("utf-8", "replace"))
        require(not shown, "cli_text_controls", f"{where}: {shown}", args[0])
    if code == 0 and "jsonl" in args and "-o" not in args and out:
        for line in out.splitlines():
            json.loads(line)
