"""Captures whose strings an attacker chose: control characters and terminal escapes in the
client version, the topic, the producer name and an error message.

Input: a folder and the hostile text. Output: a pcap of one crafted connection (CONNECT,
CONNECTED, PRODUCER, PRODUCER_SUCCESS, SEND, SEND_RECEIPT, ERROR) carrying that text.
Rule: the text is put in by the test; what a view must show of it is computed from it (the
escape of each character), never read from the dissector.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.crafted import B2C, C2B, Session, msg, write_pcap

RECEIPT_ID = {"ledgerId": 1, "entryId": 0}
RECEIPT_ID = {"ledgerId": 1, "entryId": 0}
#: ESC [31m (red), OSC 0 ; title BEL (retitles a terminal), CR, a bidi override, DEL, CSI.
HOSTILE = "a\x1b[31mRED\x1b[0m\x1b]0;owned\x07\rz\u202e\x7f\x9b"


def hostile_capture(path: Path, text: str = HOSTILE) -> Path:
    """One connection whose strings hold `text`."""
    topic = f"persistent://public/default/{text}"
    s = Session()
    s.handshake()
    s.exchange(
        [
            msg(C2B, "CONNECT", client_version=text, protocol_version=21),
            msg(B2C, "CONNECTED", server_version=text, protocol_version=21),
            msg(C2B, "PRODUCER", topic=topic, producer_id=1, request_id=1),
            msg(B2C, "PRODUCER_SUCCESS", request_id=1, producer_name=text),
            msg(C2B, "SEND", producer_id=1, sequence_id=0, payload=b"x"),
            msg(B2C, "SEND_RECEIPT", producer_id=1, sequence_id=0, message_id=RECEIPT_ID),
            msg(C2B, "CLOSE_PRODUCER", producer_id=1, request_id=2),
            msg(B2C, "ERROR", request_id=2, error=0, message=text),
        ]
    )
    s.close()
    write_pcap(path, s.segs)
    return path
