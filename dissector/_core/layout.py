"""What the compiled core and the Python stages share, declared once: the C header is made from it.

Input: nothing (declarations).
Output: the frame scan's columns (`FRAME_COLUMNS`, their indices `C_*`), the bits of its
`present` column (`Has`), why a scan stops (`Stop`), its checksum verdicts (`Verdict`), the
walk's row kinds (`Kind`), and `c_constants()`: every one of them as the (name, value,
comment) triples scripts/gen_core_headers.py writes to dissector/_core/layout.h, with the
bounds the Python stages own (record size, timestamp range, address cache, command size,
section magics), which it reads from their owners.
Rule: no constant the C and the Python sides both read is typed twice: C includes layout.h,
Python imports this module; tests/core/test_layout_header.py fails when layout.h is stale.
"""

from __future__ import annotations

from enum import IntEnum, IntFlag
from typing import Final

#: The frame scan's int64 columns, in order (the C enum PD_FC_*; the run block's layout).
FRAME_COLUMNS: Final = (
    "offset",  # frame start, from the buffer's start
    "total_size",  # totalSize (the frame is 4 + totalSize bytes)
    "command_size",
    "command_type",  # BaseCommand.type
    "present",  # Has bits
    "request_id",
    "producer_id",
    "consumer_id",
    "sequence_id",
    "topic_at",  # the body's topic string: offset and length in the buffer
    "topic_len",
    "ledger_id",  # the (first) message id
    "entry_id",
    "num_messages",  # as the frames table counts them
    "checksum",  # Verdict
    "crc_expected",
    "crc_computed",
    "entry_ts",  # broker entry metadata
    "entry_index",
    "meta_at",  # MessageMetadata bytes
    "meta_len",
    "payload_at",  # payload bytes after the metadata
    "payload_len",
)
NCOLS: Final = len(FRAME_COLUMNS)
C_OFFSET: Final = FRAME_COLUMNS.index("offset")
C_TOTAL: Final = FRAME_COLUMNS.index("total_size")
C_TYPE: Final = FRAME_COLUMNS.index("command_type")
C_PRESENT: Final = FRAME_COLUMNS.index("present")
C_REQUEST_ID: Final = FRAME_COLUMNS.index("request_id")
C_PRODUCER_ID: Final = FRAME_COLUMNS.index("producer_id")
C_CONSUMER_ID: Final = FRAME_COLUMNS.index("consumer_id")
C_SEQUENCE_ID: Final = FRAME_COLUMNS.index("sequence_id")
C_LEDGER_ID: Final = FRAME_COLUMNS.index("ledger_id")
C_ENTRY_ID: Final = FRAME_COLUMNS.index("entry_id")
C_NUM_MESSAGES: Final = FRAME_COLUMNS.index("num_messages")
C_CHECKSUM: Final = FRAME_COLUMNS.index("checksum")
C_CRC_EXPECTED: Final = FRAME_COLUMNS.index("crc_expected")
C_CRC_COMPUTED: Final = FRAME_COLUMNS.index("crc_computed")
C_ENTRY_TS: Final = FRAME_COLUMNS.index("entry_ts")
C_ENTRY_INDEX: Final = FRAME_COLUMNS.index("entry_index")
C_PAYLOAD_LEN: Final = FRAME_COLUMNS.index("payload_len")


class Has(IntFlag):
    """Bits of the `present` column (C: PD_HAS_*)."""

    REQUEST_ID = 1
    PRODUCER_ID = 2
    CONSUMER_ID = 4
    SEQUENCE_ID = 8
    TOPIC = 16
    MESSAGE_ID = 32
    NUM_MESSAGES = 64
    ENTRY_TS = 128
    ENTRY_INDEX = 256
    PAYLOAD = 512  # a SEND/MESSAGE frame: metadata and payload columns set
    SEND_COUNT = 1024  # a SEND whose body sets num_messages (NUM_MESSAGES holds it)
    CUMULATIVE = 2048  # an ACK of type Cumulative
    ACK_SET = 4096  # an ACK whose first message id carries an ack_set


class Stop(IntEnum):
    """Why a scan stopped (C: PD_STOP_*)."""

    END = 0  # at the end of the buffer, on a frame boundary
    MORE = 1  # a frame starts here but its bytes are not all present
    PYTHON = 2  # the frame here is for the Python decoder
    FULL = 3  # the batch is full: call again from pos


class Verdict(IntEnum):
    """The `checksum` column (C: PD_CHECKSUM_*; dissector.events.Checksum, NONE: no payload)."""

    NONE = 0
    ABSENT = 1
    VALID = 2
    INVALID = 3


class Kind(IntEnum):
    """A walk row's kind (C: PD_RAW, PD_TCP4, PD_TCP6)."""

    RAW = 0  # for dissector.net.headers
    TCP4 = 4
    TCP6 = 6


def c_constants() -> list[tuple[str, int, str]]:
    """This module's constants as (C name, value, comment), in the header's order."""
    out = [(f"PD_FC_{name.upper()}", k, "") for k, name in enumerate(FRAME_COLUMNS)]
    out.append(("PD_FC_NCOLS", NCOLS, "columns of a frame row"))
    out += [(f"PD_HAS_{bit.name}", int(bit), "") for bit in Has]
    out += [(f"PD_STOP_{stop.name}", int(stop), "") for stop in Stop]
    out += [(f"PD_CHECKSUM_{v.name}", int(v), "") for v in Verdict]
    out += [(f"PD_{kind.name}", int(kind), "") for kind in Kind]
    return out
