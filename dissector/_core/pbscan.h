/* Protobuf scanning against the generated schema (fields.h), through the cursor.
 *
 * Input: a byte range holding one serialized message and the index of its type.
 * Output: whether the Python decoder (upb) is sure to decode it to the same thing, and the
 * values of the fields the frames table reads.
 * Rule: `pd_pb_check` accepts a subset of what upb accepts: every known field with its
 * schema's wire type, every sub-message valid in turn (nesting up to PD_PB_MAX_DEPTH),
 * enum values the schema knows, varints of at most 10 bytes within 64 bits, unknown fields
 * of wire types 0, 1, 2 and 5, and (with utf8) strings that are valid UTF-8 as Python's
 * strict decoder sees it. Anything else (groups, a known field with another wire type,
 * unknown enum values, ...) is refused: the frame is handed back to the Python decoder,
 * which is the reference for every case the scanner does not take.
 */
#ifndef PD_PBSCAN_H
#define PD_PBSCAN_H

#include <stdint.h>

#include "cursor.h"

/* Deepest nesting checked (MessageIdData nests in itself); deeper goes to Python, whose
 * limit (100) is above it. */
#define PD_PB_MAX_DEPTH 32

/* 1 when [at, end) of `c` is a message of type `msg` the scanner vouches for. */
int pd_pb_check(const pd_cursor *c, int64_t at, int64_t end, int msg, int depth, int utf8);

/* One field occurrence found by `pd_pb_find`. */
typedef struct {
    int count;      /* occurrences (with the expected wire type) */
    uint64_t value; /* varint fields: the last occurrence's value */
    int64_t first_at, first_len; /* length-delimited: the first occurrence's bytes */
    int64_t at, len;             /* length-delimited: the last occurrence's bytes */
} pd_pb_hit;

/* Find fields numbers[0..n) of the (already checked) message [at, end): hits[i] for
 * numbers[i] (0: not looked for). Returns 0 if the bytes do not parse (cannot happen after
 * pd_pb_check). */
int pd_pb_find(const pd_cursor *c, int64_t at, int64_t end, const uint32_t *numbers, int n,
               pd_pb_hit *hits);

#endif
