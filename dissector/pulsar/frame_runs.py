"""Frame runs: which frames reads of the frames and entities tables take as columns.

Input: nothing (declarations).
Output: `RUN_TYPES` (the command types a run may hold, as the compiled scan's type mask),
the run block's layout (`NCOLS`, the `C_*` column indices and `HAS_*` bits, from
dissector._core.layout) and `unsigned` (a uint64 field as protobuf gives it, from the
block's int64).
Rule: a run holds only frames the compiled scan took whole (no anomaly of any kind, no bad
checksum) of the commands whose effect on a connection's state `ConversationState.observe_run`
applies from the scanned columns alone: SEND, SEND_RECEIPT, MESSAGE, and ACK of one message
id with no request id and, individual, no ack set (frames.c run_frame), the bulk of any
capture. Any other frame (FLOW reads permits the scan does not take; other ACKs ack sets or
several ids; PRODUCER, SUBSCRIBE and the rest change entities or pair by request id) is
decoded by Python into a `Frame`, as without runs. Runs are made only when nothing reads
pairs, messages, frame bytes or the fields column (dissector.pipeline.Pipeline(
frame_runs=True)), and only once a connection's roles and protocol are known (a decoder
made before is switched to runs then: `FrameDecoder.use_runs`), so a run's rows and state
are all that read needs; tests/core/test_frame_runs.py compares the tables made with
runs to the pure-Python ones.
"""

from __future__ import annotations

from typing import Final

from dissector._core.layout import (
    C_CHECKSUM,
    C_CONSUMER_ID,
    C_CRC_COMPUTED,
    C_CRC_EXPECTED,
    C_ENTRY_ID,
    C_ENTRY_INDEX,
    C_ENTRY_TS,
    C_LEDGER_ID,
    C_NUM_MESSAGES,
    C_OFFSET,
    C_PAYLOAD_LEN,
    C_PRESENT,
    C_PRODUCER_ID,
    C_REQUEST_ID,
    C_SEQUENCE_ID,
    C_TOTAL,
    C_TYPE,
    NCOLS,
    Has,
)
from dissector.pulsar.wire import COMMAND_TYPES

#: The command types a run may hold.
RUN_COMMANDS: Final = ("SEND", "SEND_RECEIPT", "MESSAGE", "ACK")
SEND: Final = COMMAND_TYPES["SEND"]
ACK: Final = COMMAND_TYPES["ACK"]
SEND_RECEIPT: Final = COMMAND_TYPES["SEND_RECEIPT"]
MESSAGE: Final = COMMAND_TYPES["MESSAGE"]
#: The same as the compiled scan's `only_types` mask (bit t: type t).
RUN_TYPES: Final = sum(1 << COMMAND_TYPES[name] for name in RUN_COMMANDS)

# The block's layout (columns C_*, NCOLS) comes from dissector._core.layout, declared once
# with the C core; the present bits as plain ints for the compiled state machine.
HAS_REQUEST_ID: Final = int(Has.REQUEST_ID)
HAS_PRODUCER_ID: Final = int(Has.PRODUCER_ID)
HAS_CONSUMER_ID: Final = int(Has.CONSUMER_ID)
HAS_SEQUENCE_ID: Final = int(Has.SEQUENCE_ID)
HAS_MESSAGE_ID: Final = int(Has.MESSAGE_ID)
HAS_NUM_MESSAGES: Final = int(Has.NUM_MESSAGES)
HAS_ENTRY_TS: Final = int(Has.ENTRY_TS)
HAS_ENTRY_INDEX: Final = int(Has.ENTRY_INDEX)
HAS_PAYLOAD: Final = int(Has.PAYLOAD)
HAS_SEND_COUNT: Final = int(Has.SEND_COUNT)
HAS_CUMULATIVE: Final = int(Has.CUMULATIVE)
HAS_ACK_SET: Final = int(Has.ACK_SET)

__all__ = [
    "ACK",
    "C_CHECKSUM",
    "C_CONSUMER_ID",
    "C_CRC_COMPUTED",
    "C_CRC_EXPECTED",
    "C_ENTRY_ID",
    "C_ENTRY_INDEX",
    "C_ENTRY_TS",
    "C_LEDGER_ID",
    "C_NUM_MESSAGES",
    "C_OFFSET",
    "C_PAYLOAD_LEN",
    "C_PRESENT",
    "C_PRODUCER_ID",
    "C_REQUEST_ID",
    "C_SEQUENCE_ID",
    "C_TOTAL",
    "C_TYPE",
    "HAS_ACK_SET",
    "HAS_CONSUMER_ID",
    "HAS_CUMULATIVE",
    "HAS_ENTRY_INDEX",
    "HAS_ENTRY_TS",
    "HAS_MESSAGE_ID",
    "HAS_NUM_MESSAGES",
    "HAS_PAYLOAD",
    "HAS_PRODUCER_ID",
    "HAS_REQUEST_ID",
    "HAS_SEND_COUNT",
    "HAS_SEQUENCE_ID",
    "MESSAGE",
    "NCOLS",
    "RUN_COMMANDS",
    "RUN_TYPES",
    "SEND",
    "SEND_RECEIPT",
    "unsigned",
]  # fmt: skip

_U64: Final = 1 << 64


def unsigned(value: int) -> int:
    """A uint64 field as protobuf gives it, from the int64 the block holds."""
    return value + _U64 if value < 0 else value
