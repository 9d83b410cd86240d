/* The one bounds-checked reader of the compiled core.
 *
 * Input: a byte range [base, base + len) that the caller owns (a Python bytes buffer).
 * Output: big- or little-endian integers and sub-ranges, read at explicit offsets.
 * Rule: every read goes through `pd_need` first; a read that would leave the range is
 * refused (the function returns 0 and the caller hands the record to the Python path).
 * No other code of the core does pointer arithmetic on packet bytes: it holds offsets
 * (int64) and asks the cursor for values. Offsets are signed 64-bit so that sums of
 * 32-bit lengths from the file never wrap.
 */
#ifndef PD_CURSOR_H
#define PD_CURSOR_H

#include <stdint.h>
#include <string.h>

typedef struct {
    const uint8_t *base; /* first byte of the range */
    int64_t len;         /* bytes in the range */
} pd_cursor;

/* 1 if [at, at + n) lies inside the range (n >= 0), else 0. */
static inline int pd_need(const pd_cursor *c, int64_t at, int64_t n) {
    return at >= 0 && n >= 0 && at <= c->len && n <= c->len - at;
}

/* The readers below are only called after pd_need(c, at, width) succeeded. */
static inline uint32_t pd_u8(const pd_cursor *c, int64_t at) { return c->base[at]; }

static inline uint32_t pd_be16(const pd_cursor *c, int64_t at) {
    return (uint32_t)c->base[at] << 8 | c->base[at + 1];
}

static inline uint32_t pd_be32(const pd_cursor *c, int64_t at) {
    return (uint32_t)c->base[at] << 24 | (uint32_t)c->base[at + 1] << 16 |
           (uint32_t)c->base[at + 2] << 8 | c->base[at + 3];
}

static inline uint32_t pd_le32(const pd_cursor *c, int64_t at) {
    return (uint32_t)c->base[at + 3] << 24 | (uint32_t)c->base[at + 2] << 16 |
           (uint32_t)c->base[at + 1] << 8 | c->base[at];
}

static inline uint32_t pd_u32(const pd_cursor *c, int64_t at, int little) {
    return little ? pd_le32(c, at) : pd_be32(c, at);
}

/* Copy [at, at + n) to `dst` (pd_need checked by the caller). */
static inline void pd_copy(const pd_cursor *c, int64_t at, int64_t n, uint8_t *dst) {
    memcpy(dst, c->base + at, (size_t)n);
}

/* A sub-range [at, at + n) as its own cursor (pd_need checked by the caller). */
static inline pd_cursor pd_sub(const pd_cursor *c, int64_t at, int64_t n) {
    pd_cursor s = {c->base + at, n};
    return s;
}

/* Little-endian 64 bits at `at` (bulk readers: CRC32C 8 bytes at a time). */
static inline uint64_t pd_le64(const pd_cursor *c, int64_t at) {
    uint64_t v;
    memcpy(&v, c->base + at, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

/* A protobuf varint at `at` of at most `max` bytes (10 for values, 5 for tags and lengths).
 * Returns its length (1..max) and sets *v, or 0 when it runs past the range or is longer;
 * a 10-byte varint whose last byte is above 1 (beyond 64 bits) is refused as well. */
static inline int pd_varint(const pd_cursor *c, int64_t at, int max, uint64_t *v) {
    uint64_t r = 0;
    for (int i = 0; i < max; i++) {
        uint32_t b;
        if (!pd_need(c, at + i, 1))
            return 0;
        b = pd_u8(c, at + i);
        if (i == 9 && b > 1)
            return 0;
        r |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *v = r;
            return i + 1;
        }
    }
    return 0;
}

#endif
