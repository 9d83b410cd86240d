"""Captures whose strings attack what shows them: terminal escapes, HTML, invalid UTF-8.

Input: a `random.Random`.
Output: `strings_capture`: pcap bytes of one Pulsar conversation (CONNECT, CONNECTED, LOOKUP,
PRODUCER, SEND, SUBSCRIBE, ERROR, ...) whose client and server versions, topics, names,
subscription, error message and message properties are hostile strings (EVIL); and the
checks of what a viewer shows: `raw_controls` (control characters a terminal obeys) and
`injected_markup` (a tag or attribute of MARK that reached an HTML page unescaped).
Rule: every hostile string carries MARK (in its tag or attribute names) or a control
character, so a check looks for the marker, never for the dissector's own markup.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from random import Random

from dissector.pulsar.encoder import command, encode_frame
from dissector.pulsar.wire import MessageMetadata
from fuzz.packets import B2C, C2B, Conn, pcap, stamp

MARK = "pdxss"
EVIL = (
    "\x1b]0;pdtitle\x07",  # OSC: sets the terminal's title
    "\x1b[31mRED\x1b[0m",  # SGR colours
    "\x1b[2J\x1b[H",  # clears the screen
    "bell\x07\x07",
    "back\x08\x08\x08over",
    "cr\rover",
    "nul\x00byte",
    "del\x7f",
    "c1\x9b31m",  # CSI as one C1 character
    f"<{MARK}>",
    f"</td><{MARK} on{MARK}=1>",
    f"<script>{MARK}()</script>",
    f'" on{MARK}="1',
    f"'><img src=x on{MARK}=1>",
    f"<!--{MARK}-->",
    "persistent://t/n/" + "x" * 300,
    "ünïcödé ✓",
)
#: Characters a terminal acts on: C0 controls but tab and newline, DEL, C1 controls.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f\x80-\x9f]")


def _evil(rng: Random) -> str:
    return "".join(rng.choice(EVIL) for _ in range(rng.choice((1, 1, 2, 3))))


def _frames(rng: Random) -> list[tuple[int, bytes]]:
    e = _evil
    topic, name = e(rng), e(rng)

    def meta(seq: int) -> MessageMetadata:
        m = MessageMetadata(producer_name=name, sequence_id=seq, publish_time=1_700_000_000_000)
        prop = m.properties.add()
        prop.key, prop.value = e(rng), e(rng)
        return m

    out = [
        (C2B, encode_frame(command("CONNECT", client_version=e(rng), protocol_version=21))),
        (B2C, encode_frame(command("CONNECTED", server_version=e(rng), protocol_version=21))),
        (C2B, encode_frame(command("LOOKUP", topic=e(rng), request_id=1))),
        (
            C2B,
            encode_frame(
                command("PRODUCER", topic=topic, producer_id=1, request_id=2, producer_name=name)
            ),
        ),
        (B2C, encode_frame(command("PRODUCER_SUCCESS", request_id=2, producer_name=name))),
    ]
    for seq in range(rng.choice((1, 3, 6))):
        send = command("SEND", producer_id=1, sequence_id=seq)
        out.append((C2B, encode_frame(send, metadata=meta(seq), payload=b"\x1b[31m" * 4)))
        receipt = {"ledgerId": 1, "entryId": seq}
        receipt_cmd = command("SEND_RECEIPT", producer_id=1, sequence_id=seq, message_id=receipt)
        out.append((B2C, encode_frame(receipt_cmd)))
    sub = command(
        "SUBSCRIBE",
        topic=topic,
        subscription=e(rng),
        subType=0,
        consumer_id=2,
        request_id=3,
        consumer_name=e(rng),
    )
    out += [
        (C2B, encode_frame(sub)),
        (B2C, encode_frame(command("SUCCESS", request_id=3))),
        (C2B, encode_frame(command("FLOW", consumer_id=2, messagePermits=100))),
    ]
    for seq in range(rng.choice((1, 3))):
        msg = command("MESSAGE", consumer_id=2, message_id={"ledgerId": 1, "entryId": seq})
        out.append((B2C, encode_frame(msg, metadata=meta(seq), payload=b"\x07", checksum=False)))
    out.append((B2C, encode_frame(command("ERROR", request_id=4, error=1, message=e(rng)))))
    return out


def strings_capture(rng: Random, port: int = 6650) -> bytes:
    """A capture of one conversation full of hostile strings (see the module docstring)."""
    conn = Conn(client_port=rng.randrange(30000, 60000), server_port=port)
    pkts = conn.handshake()
    for direction, frame in _frames(rng):
        pkts += conn.send(direction, frame)
    return pcap(stamp(pkts + conn.close()))


def raw_controls(text: str) -> list[str]:
    """The control characters a terminal would obey in `text` (tab and newline aside)."""
    return sorted({repr(c) for c in _CONTROLS.findall(text)})


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if MARK in tag or any(MARK in name for name, _ in attrs):
            self.found.append(f"<{tag} {attrs}>")

    def handle_comment(self, data: str) -> None:
        if MARK in data:
            self.found.append(f"<!--{data}-->")

    def handle_data(self, data: str) -> None:
        pass


def injected_markup(page: str) -> list[str]:
    """Tags, attributes or comments of MARK in an HTML page (none when strings are escaped),
    and MARK inside a script element."""
    parser = _Tags()
    parser.feed(page)
    scripts = re.findall(r"<script\b[^>]*>(.*?)</script>", page, re.S | re.I)
    inside = re.compile(rf"<\s*/?\s*(script|{MARK})|<!--", re.I)
    return parser.found + [f"script: {s[:80]!r}" for s in scripts if inside.search(s)]
