/* The compiled Pulsar framing stage: frames of one direction's byte stream, as columns.
 *
 * Input: a buffer holding the stream from a frame boundary (the Python FrameDecoder is in
 * sync there), the frame size limit.
 * Output: per frame (up to the batch's capacity) its offset, sizes, command type, the
 * checksum verdict and the scanned fields the frames table reads; and why the scan
 * stopped.
 * Rule: the scan takes a frame only when the Python decoder (dissector/pulsar/framing.py,
 * frame_events.py, sections.py) would emit it whole with no anomaly but a bad checksum
 * (a verdict column here); it stops BEFORE the first frame it cannot give exactly as Python
 * does (impossible header, command the scanner does not vouch for, missing body, trailing
 * bytes, any fault of the payload section, invalid UTF-8 in the command), and that frame
 * and any resync stay with Python. Every byte is read through cursor.h.
 */
#ifndef PD_FRAMES_H
#define PD_FRAMES_H

#include <stdint.h>

#include "cursor.h"

/* Column indices of a frame batch (all int64; absent values are 0 with their bit clear). */
enum {
    PD_FC_OFFSET,       /* frame start, from the buffer's start */
    PD_FC_TOTAL,        /* totalSize (the frame is 4 + totalSize bytes) */
    PD_FC_CSIZE,        /* commandSize */
    PD_FC_TYPE,         /* BaseCommand.type */
    PD_FC_PRESENT,      /* PD_HAS_* bits */
    PD_FC_REQUEST_ID,
    PD_FC_PRODUCER_ID,
    PD_FC_CONSUMER_ID,
    PD_FC_SEQUENCE_ID,
    PD_FC_TOPIC_AT,     /* the body's topic string: offset and length in the buffer */
    PD_FC_TOPIC_LEN,
    PD_FC_LEDGER_ID,    /* the (first) message id */
    PD_FC_ENTRY_ID,
    PD_FC_NUM_MESSAGES, /* as the frames table counts them */
    PD_FC_CHECKSUM,     /* PD_CHECKSUM_* */
    PD_FC_CRC_EXPECTED,
    PD_FC_CRC_COMPUTED,
    PD_FC_ENTRY_TS,     /* broker entry metadata */
    PD_FC_ENTRY_INDEX,
    PD_FC_META_AT,      /* MessageMetadata bytes */
    PD_FC_META_LEN,
    PD_FC_PAYLOAD_AT,   /* payload bytes after the metadata */
    PD_FC_PAYLOAD_LEN,
    PD_FC_NCOLS
};

enum {
    PD_HAS_REQUEST_ID = 1,
    PD_HAS_PRODUCER_ID = 2,
    PD_HAS_CONSUMER_ID = 4,
    PD_HAS_SEQUENCE_ID = 8,
    PD_HAS_TOPIC = 16,
    PD_HAS_MESSAGE_ID = 32,
    PD_HAS_NUM_MESSAGES = 64,
    PD_HAS_ENTRY_TS = 128,
    PD_HAS_ENTRY_INDEX = 256,
    PD_HAS_PAYLOAD = 512, /* a SEND/MESSAGE frame: metadata and payload columns set */
    PD_HAS_SEND_COUNT = 1024, /* a SEND whose body sets num_messages (NUM_MESSAGES holds it) */
    PD_HAS_CUMULATIVE = 2048, /* an ACK of type Cumulative */
    PD_HAS_ACK_SET = 4096     /* an ACK whose first message id carries an ack_set */
};

/* `only_types` of a scan that takes every frame it can vouch for (any type, any checksum). */
#define PD_ANY_TYPE UINT64_MAX

/* Checksum verdicts (dissector.events.Checksum; 0: not a payload frame). */
enum { PD_CHECKSUM_NONE, PD_CHECKSUM_ABSENT, PD_CHECKSUM_VALID, PD_CHECKSUM_INVALID };

/* Why a scan stopped. */
enum {
    PD_STOP_END,    /* at the end of the buffer, on a frame boundary */
    PD_STOP_MORE,   /* a frame starts here but its bytes are not all present */
    PD_STOP_PYTHON, /* the frame here is for the Python decoder */
    PD_STOP_FULL    /* the batch is full */
};

/* Largest frame size limit taken (the Python decoder's max_frame_size may be any int):
 * offsets stay far inside int64 and a larger limit goes to Python. */
#define PD_MAX_FRAME_LIMIT ((int64_t)1 << 31)

typedef struct {
    int64_t cap;               /* rows the columns hold (the batch bound: memory per call) */
    int64_t n;                 /* rows filled */
    int64_t *col[PD_FC_NCOLS]; /* each `cap` long */
} pd_frames;

/* Scan frames of `buf` from `pos` (a frame boundary) with size limit `max_size`; append
 * rows to `out`; return the position where it stopped and set *stop to the reason.
 * only_types: PD_ANY_TYPE, or a bit mask of command types (bit t: type t < 64) outside
 * which the scan stops (PD_STOP_PYTHON), as it does then before a bad checksum and an ACK
 * other than of one message id, without request id or (individual) ack set: the frame
 * runs of dissector.pulsar.frame_runs take only frames their state rules know. */
int64_t pd_scan_frames(const pd_cursor *buf, int64_t pos, int64_t max_size, uint64_t only_types,
                       pd_frames *out, int *stop);

#endif
