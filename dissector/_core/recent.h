/* The bytes one TCP direction delivered lately, kept to compare retransmissions with (C).
 *
 * Input: pd_recent_add(offset, bytes, keep) for every piece of stream delivered, in stream
 * order (offsets only grow; a jump is bytes never captured); pd_recent_differs(offset,
 * bytes) for retransmitted or overlapping bytes below the next one expected.
 * Output: differs gives the stream range of the first kept piece whose bytes the
 * retransmission contradicts (clipped to it), or nothing; count (pieces kept), kept (their
 * bytes) and compared (blocks compared, all calls together).
 * Rule: the same state, step for step, as dissector/flow/recent.py (the reference; its
 * docstring has the rules): whole pieces, the newest, at least `keep` bytes of them and at
 * most keep / PD_MIN_PIECE_BYTES pieces; pieces smaller than PD_SMALL_PIECE copied into the
 * block before them (blocks up to PD_BLOCK_BYTES, the same block boundaries as Python),
 * larger ones kept as they came (borrowed from their owner, released when dropped); one
 * segment compared with at most PD_MAX_BLOCKS_COMPARED blocks. tests/core/test_recent.py
 * runs both on the same operations. Bounds: keep <= PD_RECENT_MAX_KEEP (blocks kept are then
 * at most keep / PD_MIN_PIECE_BYTES + 1, each merged block PD_BLOCK_BYTES bytes and pieces).
 */
#ifndef PD_RECENT_H
#define PD_RECENT_H

#include <stdint.h>

#define PD_SMALL_PIECE 1024
#define PD_BLOCK_BYTES 4096
#define PD_MIN_PIECE_BYTES 32
#define PD_MAX_BLOCKS_COMPARED 256
/* The largest `keep` taken (dissector/flow/reassembly.py keeps at most 256 KiB). */
#define PD_RECENT_MAX_KEEP (1 << 30)

/* Releases the owner of a borrowed piece (the binding: a Python bytes object). */
typedef void (*pd_release_fn)(void *owner);

typedef struct {
    int64_t start;       /* stream offset of the block's first byte */
    int64_t len;         /* bytes in the block (of dropped pieces too, in the first one) */
    const uint8_t *data; /* its bytes: `buf` (merged) or borrowed from `owner` */
    uint8_t *buf;        /* PD_BLOCK_BYTES owned bytes of a block of several pieces */
    void *owner;         /* the borrowed piece's owner, or NULL */
    int64_t *cuts;       /* merged: its pieces' stream offsets (ncuts of them) */
    int32_t ncuts, cutcap;
} pd_block;

typedef struct {
    pd_block *blocks;    /* blocks [first, nblocks) kept, in stream order */
    int64_t first, nblocks, cap;
    int64_t head;        /* pieces of the first block already dropped (a merged block) */
    int64_t count;       /* pieces kept */
    int64_t kept;        /* bytes in the pieces kept */
    int64_t end;         /* stream offset past the last piece (-1: none since clear) */
    int64_t compared;    /* blocks compared, all calls together */
    pd_release_fn release;
} pd_recent;

void pd_recent_init(pd_recent *r, pd_release_fn release);
/* Drop every piece (`compared` stays); the state after init. */
void pd_recent_clear(pd_recent *r);
/* clear, and free the block array. */
void pd_recent_free(pd_recent *r);
/* Keep `n` bytes at stream `offset`, then drop the oldest past `keep` (0 <= keep <=
 * PD_RECENT_MAX_KEEP). 1: the piece is kept as it came (`owner` is now the block's, released
 * when dropped), 0: copied (or empty: the caller keeps `owner`), -1: out of memory (nothing
 * changed). */
int pd_recent_add(pd_recent *r, int64_t offset, const uint8_t *data, int64_t n, int64_t keep,
                  void *owner);
/* 1 and the range [*lo, *hi) when kept bytes differ from data[0, n) at stream `offset`. */
int pd_recent_differs(pd_recent *r, int64_t offset, const uint8_t *data, int64_t n,
                      int64_t *lo, int64_t *hi);

#endif
