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
#include "layout.h" /* columns, present bits, stop reasons, verdicts: generated */

/* A frame batch: the columns PD_FC_* of layout.h, all int64; absent values are 0 with their
 * PD_HAS_* bit clear. */

/* `only_types` of a scan that takes every frame it can vouch for (any type, any checksum). */
#define PD_ANY_TYPE UINT64_MAX

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
