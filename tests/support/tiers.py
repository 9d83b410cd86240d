"""Test tiers: what a test needs beyond this checkout and its Python packages.

Input: a collected test: its function, the fixtures it uses (their functions), and what
those name, followed through every function and class of the suite (tests.*) they reach.
Output: `needs(item)`, the tier markers the test must carry: `peers` (pulsar-lite and
pulsar-client), `apache` (Apache Pulsar's own broker, its Java client and our Go peer:
Maven, a JDK, Go), `capture` (root and packet capture), `spark` (a JVM), `tools` (tshark,
tcpdump, mergecap, chromium, moto_server, prometheus-node-exporter, promtool); and `guard`,
an audit hook that fails a test which, without the marker, starts one of those programs or
opens a packet socket.
Rule: a tier is needed when reached code names one of its OBJECTS (a qualified name: a
module, function or class, and what is inside it), one of its NAMES, or holds a string
naming one of its PROGRAMS (exactly, or as the last part of a path); a module-level
constant counts with the strings of the expression that made it (`TSHARK =
shutil.which("tshark")`). A program several tiers start (SHARED: `java`) needs the first of
them only when the reached code needs none of the others already, and the guard lets any of
them start it. `slow` is never inferred: it is written on the tests it concerns.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import os
import socket
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import CodeType, ModuleType
from typing import Any

import pytest

#: Every tier marker, in the order `make check` leaves them out.
TIERS = ("peers", "apache", "capture", "spark", "tools", "slow")

#: tier -> qualified names whose use needs it (a name covers what is inside it).
OBJECTS: dict[str, tuple[str, ...]] = {
    "peers": ("pulsar", "_pulsar"),  # pulsar-client's package and its C++ core
    "capture": ("dissector.capture.packet_socket.PacketSocket",),
    # the broker and the Java client of Apache Pulsar; our Go peer (apache/pulsar-client-go)
    "apache": ("tests.support.apache", "tests.support.gopeer"),
    "spark": ("pyspark.sql.session.SparkSession", "dissector.frontends.spark.session"),
}
#: tier -> names (globals or attributes) whose use needs it.
NAMES: dict[str, tuple[str, ...]] = {"capture": ("AF_PACKET",)}
#: tier -> the programs it runs: a string naming one needs the tier, and so does starting one.
PROGRAMS: dict[str, tuple[str, ...]] = {
    "peers": ("pulsar-lite",),
    "apache": ("mvn", "javac", "go"),
    "capture": ("tcpdump",),  # it sniffs an interface
    "spark": ("spark-submit", "spark-class", "java"),
    "tools": (
        "tshark",
        "tcpdump",
        "mergecap",
        "chromium",
        "chromium-browser",
        "moto_server",
        "prometheus-node-exporter",
        "promtool",
        "prometheus",  # Debian's Prometheus server, scraping `live --metrics`
    ),
}
#: program -> the tiers that start it (a JVM): the first is inferred from a string naming it
#: only when the code needs none of them otherwise, and any of them may start it.
SHARED: dict[str, tuple[str, ...]] = {"java": ("spark", "apache")}
#: `pulsar-dissect` subcommands that need a tier, when reached code also names the command.
SUBCOMMANDS: dict[str, str] = {"spark": "spark"}
CLI_MODULE = "dissector.frontends.cli"
#: Packages whose functions and classes are followed (others are only matched).
FOLLOWED = ("tests.", "benchmarks.", "fuzz.")


class TierError(RuntimeError):
    """A test started what a tier holds without carrying its marker."""


def _within(name: str, prefixes: Iterable[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _qualname(obj: Any) -> str | None:
    if isinstance(obj, ModuleType):
        return obj.__name__
    module, qual = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if isinstance(module, str) and isinstance(qual, str):
        return f"{module}.{qual}"
    return None


def _program(text: str) -> set[str]:
    """The tiers of the program a string names (none if it names none)."""
    base = text.rsplit("/", 1)[-1]
    return {tier for tier, names in PROGRAMS.items() if base in names}


@functools.cache
def _module_constants(module_name: str) -> dict[str, frozenset[str]]:
    """Top-level name -> the strings in the expression assigned to it, for a module of ours."""
    module = sys.modules.get(module_name)
    path = getattr(module, "__file__", None)
    if not path or not path.endswith(".py"):
        return {}
    found: dict[str, frozenset[str]] = {}
    for node in ast.parse(Path(path).read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        texts = frozenset(
            n.value
            for n in ast.walk(value)
            if isinstance(n, ast.Constant) and isinstance(n.value, str)
        )
        for target in targets:
            if isinstance(target, ast.Name):
                found[target.id] = texts
    return found


def _codes(code: CodeType) -> Iterator[CodeType]:
    """A code object and those nested in it (inner functions, lambdas, comprehensions)."""
    yield code
    for const in code.co_consts:
        if isinstance(const, CodeType):
            yield from _codes(const)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, tuple | frozenset):
        for item in value:
            yield from _strings(item)


def _functions(obj: Any) -> Iterator[Any]:
    """The functions behind a function or a class of ours (methods, properties included)."""
    if inspect.isclass(obj):
        for klass in obj.__mro__:
            if _within(klass.__module__, [p.rstrip(".") for p in FOLLOWED]):
                for member in vars(klass).values():
                    if isinstance(member, staticmethod | classmethod):
                        member = member.__func__
                    if isinstance(member, property):
                        yield from (f for f in (member.fget, member.fset) if f is not None)
                    elif inspect.isfunction(member):
                        yield member
    elif inspect.isfunction(obj):
        yield inspect.unwrap(obj)


class _Walk:
    """What a set of functions reaches: qualified names, bare names and strings."""

    def __init__(self) -> None:
        self.qualnames: set[str] = set()
        self.names: set[str] = set()
        self.strings: set[str] = set()
        self._seen: set[int] = set()

    def follow(self, obj: Any) -> None:
        for func in _functions(obj):
            if id(func.__code__) in self._seen:
                continue
            self._seen.add(id(func.__code__))
            for code in _codes(func.__code__):
                self._read(code, func.__globals__)

    def _read(self, code: CodeType, scope: dict[str, Any]) -> None:
        self.names.update(code.co_names)
        for const in code.co_consts:
            self.strings.update(_strings(const))
        constants = _module_constants(scope.get("__name__", ""))
        for name in code.co_names:
            self.strings.update(constants.get(name, ()))
            obj = scope.get(name)
            if obj is None:
                continue
            self._reached(obj)
            if isinstance(obj, ModuleType):  # `module.attribute`: the attribute too
                for attr in code.co_names:
                    if attr != name and hasattr(obj, attr):
                        self._reached(getattr(obj, attr))

    def _reached(self, obj: Any) -> None:
        qual = _qualname(obj)
        if qual is None:
            return
        self.qualnames.add(qual)
        if not isinstance(obj, ModuleType) and qual.startswith(FOLLOWED):
            self.follow(obj)

    def tiers(self) -> set[str]:
        found = {
            tier
            for tier, names in OBJECTS.items()
            if any(_within(q, names) for q in self.qualnames)
        }
        found |= {tier for tier, names in NAMES.items() if self.names & set(names)}
        for text in self.strings:
            shared = SHARED.get(text.rsplit("/", 1)[-1], ())
            if not found.intersection(shared):
                found |= _program(text)
        if CLI_MODULE in self.strings or "tests.support.cli.cli" in self.qualnames:
            found |= {tier for sub, tier in SUBCOMMANDS.items() if sub in self.strings}
        return found


@functools.cache
def _tiers_of(obj: Any) -> frozenset[str]:
    walk = _Walk()
    walk.follow(obj)
    return frozenset(walk.tiers())


def needs(item: pytest.Item) -> set[str]:
    """The tiers a collected test needs, from its code and its fixtures' code."""
    roots = [getattr(item, "function", None)]
    info = getattr(item, "_fixtureinfo", None)
    if info is not None:
        roots += [d.func for defs in info.name2fixturedefs.values() for d in defs]
    return set().union(*(_tiers_of(r) for r in roots if r is not None))


# --------------------------------------------------------------------------- the guard

#: The markers of the test running now (None between tests: nothing is checked).
_running: list[frozenset[str]] = []


@contextlib.contextmanager
def running(markers: Iterable[str]) -> Iterator[None]:
    """While inside, what a tier holds may be started only if its marker is in `markers`."""
    _running.append(frozenset(markers))
    try:
        yield
    finally:
        _running.pop()


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if not _running or event not in ("subprocess.Popen", "socket.__new__"):
        return
    if event == "subprocess.Popen":  # (executable, args, cwd, env): argv[0] if no executable
        what = os.fsdecode(args[0])
        needed = _program(what)
        if _running[-1].intersection(SHARED.get(what.rsplit("/", 1)[-1], ())):
            needed = set()
    else:  # (socket, family, type, proto)
        what = "a packet socket"
        needed = {"capture"} if args[1] == getattr(socket, "AF_PACKET", None) else set()
    missing = sorted(needed - _running[-1])
    if missing:
        raise TierError(
            f"this test starts {what} without the marker {', '.join(missing)}: name what it "
            "uses where tests/support/tiers.py can see it, or mark it (@pytest.mark.TIER)"
        )


@functools.cache
def guard() -> None:
    """Install the audit hook once per process (audit hooks cannot be removed)."""
    sys.addaudithook(_audit)
