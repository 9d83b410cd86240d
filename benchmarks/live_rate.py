"""Live capture at broker rates: offer small SEND frames on loopback, count what `live` saw.

Input: rates R (frames/s) and a duration D (seconds) per rate; the client's connections C;
live's processes J (`live -j J`).
Output: per rate, one `RateResult`: frames the client really sent (its own count), frames
the sink received (from its byte count), SEND rows `pulsar-dissect live` printed, and its
summary line (packets, frames, kernel drops, packets still queued at stop), the time it
took to exit after SIGINT and its CPU time; a markdown table of them (`--out FILE` writes
it), and the highest rate that lost nothing.
Rules:
- The sink (a thread here) listens on 127.0.0.1:P, a free port, and reads and discards
  everything, counting bytes. The client is a separate process: C TCP connections (default
  1) with TCP_NODELAY, each an optional CONNECT, then SEND frames of one size, ONE frame per
  send call, the connections in turn,
  paced against time.perf_counter in small bursts (the frames due so far are sent, then it
  sleeps until the next is due, at least BURST_SECONDS: no busy wait), for D seconds at
  most: what it sent in that time is "offered", whatever R asked for.
- `live -i lo --port P --format jsonl --table frames` runs as a subprocess, stdout to a
  file; the client starts only once live said it is listening. About 0.5 s after the
  client finished, live gets SIGINT; the stop time is from SIGINT to its exit.
- A rate is lossless when every frame offered was printed as a row, the kernel dropped
  nothing and nothing was left queued at stop. The rates are tried in the order given.
- `--metrics`: each rate is also run with `live --metrics 127.0.0.1:0` (its cost), a
  scraper thread here GETting /metrics every SCRAPE_SECONDS while the client sends, as a
  busy Prometheus would; the row says how many scrapes were answered and the SEND frames
  the last one counted.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

from dissector import command, encode_frame
from dissector.pulsar.wire import MessageMetadata

SETTLE_SECONDS = 0.5  # after the client is done, before SIGINT
LISTEN_TIMEOUT = 20.0  # for live to say it is listening
STOP_TIMEOUT = 30.0  # for live to exit after SIGINT (then it is killed)
PAYLOAD = b"x" * 64
BURST_SECONDS = 0.001  # the client sleeps at least this long between bursts
SCRAPE_SECONDS = 1.0  # --metrics: the scraper's interval
METRICS_URL = re.compile(r", metrics on (http://\S+/metrics)$")

SUMMARY = re.compile(
    r"^pulsar-dissect: (?P<packets>\d+) packets? captured, (?P<frames>\d+) frames?, "
    r"(?:(?P<messages>\d+) messages?, )?(?P<conversations>\d+) conversations?, "
    r"(?P<anomalies>\d+) anomal(?:y|ies), (?P<dropped>\d+|n/a) dropped by the kernel"
    r"(?:, (?P<more>at least )?(?P<unread>\d+) packets? still queued at stop "
    r"\(not dissected\))?(?:, (?P<skipped>\d+) packets? skipped \(dissection fell behind\))?$"
)


def send_frame() -> bytes:
    """A small SEND frame (command, metadata, 64-byte payload), as benchmarks/synthetic has."""
    meta = MessageMetadata(producer_name="bench", sequence_id=1, publish_time=1700000000000)
    return encode_frame(
        command("SEND", producer_id=1, sequence_id=1), metadata=meta, payload=PAYLOAD
    )


def connect_frame() -> bytes:
    return encode_frame(command("CONNECT", client_version="live-rate", protocol_version=21))


# --------------------------------------------------------------------------- the sink


class Sink:
    """A TCP server on 127.0.0.1 (free port) that reads and discards, counting bytes."""

    def __init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        self.received = 0
        self._conns: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._closed = threading.Event()
        self._accepter = threading.Thread(target=self._accept, daemon=True)
        self._accepter.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            self._conns.append(conn)
            t = threading.Thread(target=self._drain, args=(conn,), daemon=True)
            t.start()
            self._threads.append(t)

    def _drain(self, conn: socket.socket) -> None:
        with conn:
            while True:
                try:
                    data = conn.recv(1 << 20)
                except OSError:
                    return
                if not data:
                    return
                self.received += len(data)

    def wait_quiet(self, timeout: float) -> None:
        """Until every connection ended (the client closes its own), at most `timeout` s."""
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))

    def close(self) -> None:
        self._closed.set()
        self._server.close()
        for conn in self._conns:
            conn.close()


# --------------------------------------------------------------------------- the client


@dataclass(frozen=True, slots=True)
class ClientResult:
    sent: int  # SEND frames sent (one send call each)
    connect: bool  # a CONNECT frame went first
    seconds: float  # from the first SEND to the last
    cpu_seconds: float  # the client's own CPU time
    connections: int = 1  # the frames went over this many connections, in turn

    @property
    def rate(self) -> float:
        return self.sent / self.seconds if self.seconds > 0 else 0.0


def offer(
    port: int, rate: float, seconds: float, connect: bool = True, connections: int = 1
) -> ClientResult:
    """Send SEND frames to 127.0.0.1:port at `rate` frames/s (0: as fast as possible) for
    at most `seconds`; one frame per send call, over `connections` connections in turn."""
    frame = send_frame()
    total = int(rate * seconds) if rate > 0 else sys.maxsize
    cpu0 = time.process_time()
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(connections)]
    try:
        for sock in socks:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if connect:
                sock.sendall(connect_frame())
        sends = [sock.sendall for sock in socks]
        turn = 0
        clock, sleep = time.perf_counter, time.sleep
        sent = 0
        start = clock()
        end = start + seconds
        while sent < total:
            now = clock()
            if now >= end:
                break
            due = total if rate <= 0 else min(total, int((now - start) * rate) + 1)
            burst = min(due - sent, 1000) if rate <= 0 else due - sent
            for _ in range(burst):
                sends[turn](frame)
                turn = turn + 1 if turn + 1 < connections else 0
            sent += burst
            if rate > 0:
                wait = start + sent / rate - clock()
                if wait > 0:  # then the frames due by then go out in one burst
                    sleep(max(wait, BURST_SECONDS))
        elapsed = clock() - start
        for sock in socks:
            sock.shutdown(socket.SHUT_WR)
    finally:
        for sock in socks:
            sock.close()
    return ClientResult(sent, connect, elapsed, time.process_time() - cpu0, connections)


def _client_main(
    port: int, rate: float, seconds: float, connect: bool, connections: int, conn: Connection
) -> None:
    conn.send(offer(port, rate, seconds, connect, connections))
    conn.close()


def offer_in_process(
    port: int, rate: float, seconds: float, connect: bool = True, connections: int = 1
) -> ClientResult:
    """`offer` in a separate process (spawned: no threads or sockets inherited)."""
    ctx = mp.get_context("spawn")
    here, there = ctx.Pipe(duplex=False)
    args = (port, rate, seconds, connect, connections, there)
    proc = ctx.Process(target=_client_main, args=args)
    proc.start()
    there.close()
    try:
        if not here.poll(seconds + 60):
            raise RuntimeError("the client process did not report")
        result: ClientResult = here.recv()
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()
    return result


# --------------------------------------------------------------------------- live


def live_command() -> list[str]:
    """`pulsar-dissect`, from the interpreter's own environment."""
    script = Path(sys.executable).parent / "pulsar-dissect"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "dissector.frontends.cli"]


@dataclass(frozen=True, slots=True)
class LiveResult:
    returncode: int
    stop_seconds: float  # SIGINT to exit
    cpu_seconds: float  # user + system time of the live process
    send_rows: int  # frames rows printed with command SEND
    frame_rows: int  # frames rows printed, all commands
    commands: dict[str, int]
    summary: dict[str, int | None] | None  # the summary line's numbers, None: no summary
    unread_more: bool  # the summary said "at least" unread
    stderr: str


class LiveProcess:
    """`pulsar-dissect live -i lo --port P --format jsonl --table frames`, stdout to a file;
    the constructor returns once it said it is listening."""

    def __init__(self, port: int, out: Path, extra: tuple[str, ...] = ()) -> None:
        argv = live_command() + [
            "live",
            "-i",
            "lo",
            "--port",
            str(port),
            "--format",
            "jsonl",
            "--table",
            "frames",
            *extra,
        ]
        self.out = out
        self._stdout = out.open("wb")
        self.proc = subprocess.Popen(
            argv, stdout=self._stdout, stderr=subprocess.PIPE, text=True, bufsize=1
        )
        self.err: list[str] = []
        self._listening = threading.Event()
        self._pump = threading.Thread(target=self._read_err, daemon=True)
        self._pump.start()
        deadline = time.monotonic() + LISTEN_TIMEOUT
        while not self._listening.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"live did not start listening: {''.join(self.err)}")
        found = METRICS_URL.search(self.err[0].rstrip("\n")) if self.err else None
        self.metrics_url = found[1] if found else None  # --metrics: where it serves

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.err.append(line)
            if "listening on" in line:
                self._listening.set()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._stdout.close()

    def stop(self) -> LiveResult:
        """SIGINT, wait for the exit (its rusage too), then read what it printed."""
        start = time.perf_counter()
        self.proc.send_signal(signal.SIGINT)
        deadline = start + STOP_TIMEOUT
        status, usage = 0, None
        while True:
            pid, status, usage = os.wait4(self.proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                self.proc.kill()
                pid, status, usage = os.wait4(self.proc.pid, 0)
                break
            time.sleep(0.005)
        stop_seconds = time.perf_counter() - start
        returncode = os.waitstatus_to_exitcode(status)
        self.proc.returncode = returncode  # reaped here: Popen must not wait again
        self._pump.join(10)
        self._stdout.close()
        stderr = "".join(self.err)
        commands = count_commands(self.out)
        summary, more = parse_summary(stderr)
        return LiveResult(
            returncode=returncode,
            stop_seconds=stop_seconds,
            cpu_seconds=usage.ru_utime + usage.ru_stime if usage is not None else 0.0,
            send_rows=commands.get("SEND", 0),
            frame_rows=sum(commands.values()),
            commands=commands,
            summary=summary,
            unread_more=more,
            stderr=stderr,
        )


def count_commands(path: Path) -> dict[str, int]:
    """Frames rows per command in a `live --format jsonl` output file."""
    counts: dict[str, int] = {}
    with path.open("rb") as f:
        for line in f:
            row = json.loads(line)
            if row.get("table") != "frames":
                continue
            name = str(row.get("command"))
            counts[name] = counts.get(name, 0) + 1
    return counts


def parse_summary(stderr: str) -> tuple[dict[str, int | None] | None, bool]:
    """The numbers of live's last summary line (dropped None: n/a; unread 0 when not said),
    and whether unread was "at least"."""
    for line in reversed(stderr.splitlines()):
        m = SUMMARY.match(line.strip())
        if m is None:
            continue
        numbers: dict[str, int | None] = {}
        for key in ("packets", "frames", "messages", "conversations", "anomalies"):
            value = m.group(key)
            numbers[key] = None if value is None else int(value)
        dropped = m.group("dropped")
        numbers["dropped"] = None if dropped == "n/a" else int(dropped)
        numbers["unread"] = int(m.group("unread") or 0)
        numbers["skipped"] = int(m.group("skipped") or 0)
        return numbers, m.group("more") is not None
    return None, False


class Scraper:
    """GETs a metrics URL every `every` seconds on a thread until `stop()`: how many were
    answered, and the SEND frames the last answer counted."""

    def __init__(self, url: str, every: float = SCRAPE_SECONDS) -> None:
        self.url, self.every = url, every
        self.answered = self.failed = 0
        self.sends = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import urllib.request

        from prometheus_client.parser import text_string_to_metric_families

        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        while not self._stop.is_set():
            try:
                with opener.open(self.url, timeout=10) as answer:
                    text = answer.read().decode()
            except OSError:
                self.failed += 1
            else:
                self.answered += 1
                for family in text_string_to_metric_families(text):
                    for sample in family.samples:
                        if sample.name.endswith("frames_total") and sample.labels == {
                            "command": "SEND",
                            "direction": "client_to_broker",
                        }:
                            self.sends = int(sample.value)
            self._stop.wait(self.every)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)


# --------------------------------------------------------------------------- one rate


@dataclass(frozen=True, slots=True)
class RateResult:
    rate: float  # asked for
    seconds: float  # asked for
    client: ClientResult
    sink_frames: int  # SEND frames the sink received (bytes, less the CONNECT, / frame size)
    live: LiveResult
    scrapes: int | None = None  # --metrics: scrapes answered (None: no --metrics)
    scraped_sends: int = 0  # --metrics: SEND frames the last scrape counted

    @property
    def offered(self) -> int:
        return self.client.sent

    @property
    def dropped(self) -> int:
        s = self.live.summary
        return 0 if s is None or s["dropped"] is None else s["dropped"]

    @property
    def captured(self) -> int:
        """Packets live's capturing process took from the kernel."""
        s = self.live.summary
        return 0 if s is None or s["packets"] is None else s["packets"]

    @property
    def packets(self) -> int:
        """Packets live dissected (captured, less those unread at stop or skipped)."""
        return self.captured - self.unread - self.skipped

    @property
    def skipped(self) -> int:
        s = self.live.summary
        return 0 if s is None or s["skipped"] is None else s["skipped"]

    @property
    def unread(self) -> int:
        s = self.live.summary
        return 0 if s is None or s["unread"] is None else s["unread"]

    @property
    def lossless(self) -> bool:
        return (
            self.live.returncode == 0
            and self.live.summary is not None
            and self.live.send_rows == self.offered == self.sink_frames
            and self.dropped == 0
            and self.unread == 0
            and self.skipped == 0
        )


def measure(
    rate: float,
    seconds: float,
    *,
    connect: bool = True,
    workdir: Path | None = None,
    extra: tuple[str, ...] = (),
    connections: int = 1,
) -> RateResult:
    """One run: sink, live, client at `rate` for `seconds`, then SIGINT."""
    frame = len(send_frame())
    hello = len(connect_frame()) * connections if connect else 0
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        sink = Sink()
        try:
            live = LiveProcess(sink.port, Path(tmp) / "live.jsonl", extra)
            scraper = None if live.metrics_url is None else Scraper(live.metrics_url)
            try:
                client = offer_in_process(sink.port, rate, seconds, connect, connections)
                sink.wait_quiet(10)
                time.sleep(SETTLE_SECONDS)
            except BaseException:
                live.kill()
                raise
            finally:
                if scraper is not None:
                    scraper.stop()
            result = live.stop()
        finally:
            sink.close()
    sink_frames = (sink.received - hello) // frame
    if scraper is None:
        return RateResult(rate, seconds, client, sink_frames, result)
    return RateResult(rate, seconds, client, sink_frames, result, scraper.answered, scraper.sends)


# --------------------------------------------------------------------------- report

HEADER = (
    "| asked frames/s | offered (client sent) | client frames/s | sink got | seen by live "
    "| packets captured | packets dissected | dropped by kernel (packets) "
    "| unread at stop (packets) | skipped (packets) | stop s "
    "| live CPU s | client CPU s | all seen |\n"
    "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|\n"
)


def row(r: RateResult) -> str:
    more = "≥" if r.live.unread_more else ""
    seen = "yes" if r.lossless else "**no**"
    summary = "" if r.live.summary is not None else " (no summary line)"
    return (
        f"| {r.rate:,.0f} | {r.offered:,} | {r.client.rate:,.0f} | {r.sink_frames:,} "
        f"| {r.live.send_rows:,} | {r.captured:,} | {r.packets:,} | {r.dropped:,} "
        f"| {more}{r.unread:,} | {r.skipped:,} | {r.live.stop_seconds:.2f} "
        f"| {r.live.cpu_seconds:.2f} | {r.client.cpu_seconds:.2f} | {seen}{summary} |\n"
    )


def scraped(r: RateResult) -> str:
    """--metrics: what the scraper saw, one line."""
    return f"{r.scrapes} scrapes answered, the last counted {r.scraped_sends:,} SEND frames"


def best_rate(results: list[RateResult]) -> RateResult | None:
    """The highest rate lossless in the order tried, up to the first that lost frames."""
    best = None
    for r in results:
        if not r.lossless:
            break
        best = r
    return best


def report(
    runs: dict[str, list[RateResult]],
    seconds: float,
    client_max: ClientResult | None,
    connections: int = 1,
) -> str:
    """The markdown: one table per way of running live (runs: its flags, e.g. `-j 2
    --metrics`, -> its results, in the order tried)."""
    lines = [
        f"Live capture on loopback: small SEND frames ({len(send_frame())} bytes each, one "
        f"per send(), TCP_NODELAY) offered over {connections} connection"
        f"{'s' if connections > 1 else ''} for {seconds:g} s per rate to a sink on a broker "
        "port while `pulsar-dissect live -i lo --port P --format jsonl --table frames [-j J]` "
        f"runs; SIGINT {SETTLE_SECONDS} s after the client is done. {os.cpu_count()} CPUs. "
        "Kernel drops and unread are packets, not frames: the sink's ACKs are packets too, "
        "and at high rates TCP puts several frames in one segment.\n",
    ]
    for flags, results in runs.items():
        lines += [f"\n`live {flags}`:\n\n", HEADER, *(row(r) for r in results), "\n"]
        for r in results:
            if r.scrapes is not None:
                lines.append(f"- {r.rate:,.0f} frames/s: {scraped(r)}\n")
        best = best_rate(results)
        if best is None:
            lines.append("No rate tried was lossless.\n")
        else:
            lines.append(
                f"Highest rate with no loss: {best.rate:,.0f} frames/s asked, "
                f"{best.client.rate:,.0f} frames/s sent.\n"
            )
    if client_max is not None:
        lines.append(
            f"\nClient alone (no live running, unpaced): {client_max.rate:,.0f} frames/s "
            f"({client_max.sent:,} in {client_max.seconds:.1f} s).\n"
        )
    return "".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--rates", default="5000,20000,50000,100000", help="frames/s, comma-separated"
    )
    parser.add_argument("--seconds", type=float, default=5.0, help="per rate")
    parser.add_argument("--out", type=Path, help="also write the markdown table here")
    parser.add_argument("--no-connect", action="store_true", help="SEND frames only")
    parser.add_argument(
        "--client-max", action="store_true", help="first measure the unpaced client, no live"
    )
    parser.add_argument("--connections", type=int, default=1, help="the client's, in turn")
    parser.add_argument(
        "--jobs", default="1", help="live's processes (-j), comma-separated: a table each"
    )
    parser.add_argument(
        "--metrics",
        action="store_true",
        help=f"also run each with `live --metrics 127.0.0.1:0`, scraped every "
        f"{SCRAPE_SECONDS:g} s (a table each)",
    )
    parser.add_argument("--metrics-only", action="store_true", help="only the runs with --metrics")
    args = parser.parse_args(argv)
    rates = [float(r) for r in args.rates.split(",") if r.strip()]
    connect, connections = not args.no_connect, args.connections
    client_max = None
    if args.client_max:
        sink = Sink()
        try:
            client_max = offer_in_process(sink.port, 0, args.seconds, connect, connections)
            sink.wait_quiet(10)
        finally:
            sink.close()
        print(f"client alone: {client_max.rate:,.0f} frames/s", file=sys.stderr)
    runs: dict[str, list[RateResult]] = {}
    metrics = [True] if args.metrics_only else [False, True] if args.metrics else [False]
    for jobs in (int(j) for j in args.jobs.split(",") if j.strip()):
        for with_metrics in metrics:
            extra: tuple[str, ...] = ("-j", str(jobs)) if jobs > 1 else ()
            extra += ("--metrics", "127.0.0.1:0") if with_metrics else ()
            flags = f"-j {jobs}" + (" --metrics" if with_metrics else "")
            for rate in rates:
                r = measure(
                    rate, args.seconds, connect=connect, extra=extra, connections=connections
                )
                more = f"  ({scraped(r)})\n" if r.scrapes is not None else ""
                print(f"{flags}: {row(r)}{more}", end="", file=sys.stderr)
                runs.setdefault(flags, []).append(r)
    text = report(runs, args.seconds, client_max, connections)
    print(text)
    if args.out is not None:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
