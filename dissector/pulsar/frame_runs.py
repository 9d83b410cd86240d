"""Frame runs: which frames reads of the frames and entities tables take as columns.

Input: nothing (declarations).
Output: `RUN_TYPES` (the command types a run may hold, as the compiled scan's type mask),
the run block's layout (`NCOLS`, the `C_*` column indices and `HAS_*` bits of frames.h) and
`unsigned` (a uint64 field as protobuf gives it, from the block's int64).
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

from dissector.pulsar.wire import COMMAND_TYPES

#: The command types a run may hold.
RUN_COMMANDS: Final = ("SEND", "SEND_RECEIPT", "MESSAGE", "ACK")
SEND: Final = COMMAND_TYPES["SEND"]
ACK: Final = COMMAND_TYPES["ACK"]
SEND_RECEIPT: Final = COMMAND_TYPES["SEND_RECEIPT"]
MESSAGE: Final = COMMAND_TYPES["MESSAGE"]
#: The same as the compiled scan's `only_types` mask (bit t: type t).
RUN_TYPES: Final = sum(1 << COMMAND_TYPES[name] for name in RUN_COMMANDS)

# The block's columns (frames.h PD_FC_*; tests/core/test_frame_runs.py checks the order
# against the extension's COLUMNS).
NCOLS: Final = 23
C_OFFSET: Final = 0
C_TOTAL: Final = 1
C_TYPE: Final = 3
C_PRESENT: Final = 4
C_REQUEST_ID: Final = 5
C_PRODUCER_ID: Final = 6
C_CONSUMER_ID: Final = 7
C_SEQUENCE_ID: Final = 8
C_LEDGER_ID: Final = 11
C_ENTRY_ID: Final = 12
C_NUM_MESSAGES: Final = 13
C_CHECKSUM: Final = 14
C_CRC_EXPECTED: Final = 15
C_CRC_COMPUTED: Final = 16
C_ENTRY_TS: Final = 17
C_ENTRY_INDEX: Final = 18
C_PAYLOAD_LEN: Final = 22

# The present column's bits (frames.h PD_HAS_*).
HAS_REQUEST_ID: Final = 1
HAS_PRODUCER_ID: Final = 2
HAS_CONSUMER_ID: Final = 4
HAS_SEQUENCE_ID: Final = 8
HAS_MESSAGE_ID: Final = 32
HAS_NUM_MESSAGES: Final = 64
HAS_ENTRY_TS: Final = 128
HAS_ENTRY_INDEX: Final = 256
HAS_PAYLOAD: Final = 512
HAS_SEND_COUNT: Final = 1024
HAS_CUMULATIVE: Final = 2048
HAS_ACK_SET: Final = 4096

_U64: Final = 1 << 64


def unsigned(value: int) -> int:
    """A uint64 field as protobuf gives it, from the int64 the block holds."""
    return value + _U64 if value < 0 else value
