/* The recent bytes of one TCP direction (recent.h has the Input, Output and Rule).
 *
 * Each step mirrors dissector/flow/recent.py's: `add` and `_drop` piece by piece, the same
 * block boundaries (a small piece joins the last block while it fits), `differs` by
 * bisection over the block starts with the same budget. No byte is read but inside a
 * block's [0, len) or the caller's [0, n).
 */
#include "recent.h"

#include <stdlib.h>
#include <string.h>

void pd_recent_init(pd_recent *r, pd_release_fn release) {
    memset(r, 0, sizeof *r);
    r->end = -1;
    r->release = release;
}

static void drop_block(pd_recent *r, pd_block *b) {
    free(b->buf);
    free(b->cuts);
    if (b->owner != NULL && r->release != NULL)
        r->release(b->owner);
    memset(b, 0, sizeof *b);
}

void pd_recent_clear(pd_recent *r) {
    for (int64_t k = r->first; k < r->nblocks; k++)
        drop_block(r, &r->blocks[k]);
    r->first = r->nblocks = 0;
    r->head = r->count = r->kept = 0;
    r->end = -1;
}

void pd_recent_free(pd_recent *r) {
    pd_recent_clear(r);
    free(r->blocks);
    r->blocks = NULL;
    r->cap = 0;
}

/* Room for one more block at the end: the dropped ones before `first` go first when they
 * are at least half of the array (each block is then moved at most once per doubling). */
static int room(pd_recent *r) {
    if (r->nblocks < r->cap)
        return 0;
    if (r->first > 0 && 2 * r->first >= r->nblocks) {
        memmove(r->blocks, r->blocks + r->first,
                (size_t)(r->nblocks - r->first) * sizeof(pd_block));
        r->nblocks -= r->first;
        r->first = 0;
        return 0;
    }
    int64_t cap = r->cap ? 2 * r->cap : 16;
    pd_block *grown = realloc(r->blocks, (size_t)cap * sizeof(pd_block));
    if (grown == NULL)
        return -1;
    r->blocks = grown;
    r->cap = cap;
    return 0;
}

static int add_cut(pd_block *b, int64_t offset) {
    if (b->ncuts == b->cutcap) {
        int32_t cap = b->cutcap ? 2 * b->cutcap : 8;
        int64_t *grown = realloc(b->cuts, (size_t)cap * sizeof(int64_t));
        if (grown == NULL)
            return -1;
        b->cuts = grown;
        b->cutcap = cap;
    }
    b->cuts[b->ncuts++] = offset;
    return 0;
}

/* recent.py `_drop`: the oldest pieces go while the others hold `keep` bytes, or while
 * there are too many; the newest always stays. */
static void drop(pd_recent *r, int64_t keep) {
    int64_t most = keep / PD_MIN_PIECE_BYTES;
    while (r->count > 1) {
        pd_block *b = &r->blocks[r->first];
        int64_t size;
        if (b->cuts != NULL) {
            int64_t stop = r->head + 1 < b->ncuts ? b->cuts[r->head + 1] : b->start + b->len;
            size = stop - b->cuts[r->head];
        } else {
            size = b->len;
        }
        if (r->kept - size < keep && r->count <= most)
            break;
        r->kept -= size;
        r->count -= 1;
        if (b->cuts != NULL && r->head + 1 < b->ncuts) {
            r->head += 1;
        } else {
            drop_block(r, b);
            r->first += 1;
            r->head = 0;
        }
    }
}

int pd_recent_add(pd_recent *r, int64_t offset, const uint8_t *data, int64_t n, int64_t keep,
                  void *owner) {
    int kept_as_came = 0;
    if (n <= 0)
        return 0;
    pd_block *last = r->nblocks > r->first ? &r->blocks[r->nblocks - 1] : NULL;
    if (last != NULL && offset == r->end && (n < PD_SMALL_PIECE || last->len < PD_SMALL_PIECE)
        && last->len + n <= PD_BLOCK_BYTES) {
        if (last->buf == NULL) { /* a piece as it came becomes a block of several */
            uint8_t *buf = malloc(PD_BLOCK_BYTES);
            int64_t *cuts = malloc(8 * sizeof(int64_t));
            if (buf == NULL || cuts == NULL) {
                free(buf);
                free(cuts);
                return -1;
            }
            memcpy(buf, last->data, (size_t)last->len);
            if (last->owner != NULL && r->release != NULL)
                r->release(last->owner);
            last->owner = NULL;
            last->buf = buf;
            last->data = buf;
            last->cuts = cuts;
            last->cutcap = 8;
            last->cuts[0] = last->start;
            last->ncuts = 1;
        }
        if (add_cut(last, offset) < 0)
            return -1;
        memcpy(last->buf + last->len, data, (size_t)n);
        last->len += n;
    } else {
        if (room(r) < 0)
            return -1;
        pd_block *b = &r->blocks[r->nblocks++];
        memset(b, 0, sizeof *b);
        b->start = offset;
        b->len = n;
        b->data = data;
        b->owner = owner;
        kept_as_came = 1;
    }
    r->end = offset + n;
    r->count += 1;
    r->kept += n;
    if (r->kept >= keep + n || r->count > keep / PD_MIN_PIECE_BYTES)
        drop(r, keep);
    return kept_as_came;
}

/* recent.py `_piece_at`: the piece of block k holding stream offset `at`, clipped. */
static void piece_at(const pd_recent *r, int64_t k, int64_t at, int64_t offset, int64_t stop,
                     int64_t *lo, int64_t *hi) {
    const pd_block *b = &r->blocks[k];
    int64_t a = b->start, z = b->start + b->len;
    if (b->cuts != NULL) {
        int32_t l = 0, h = b->ncuts; /* bisect_right(cuts, at) */
        while (l < h) {
            int32_t mid = l + (h - l) / 2;
            if (at < b->cuts[mid])
                h = mid;
            else
                l = mid + 1;
        }
        int32_t i = l - 1;
        a = b->cuts[i];
        if (i + 1 < b->ncuts)
            z = b->cuts[i + 1];
    }
    *lo = a > offset ? a : offset;
    *hi = z < stop ? z : stop;
}

int pd_recent_differs(pd_recent *r, int64_t offset, const uint8_t *data, int64_t n,
                      int64_t *lo, int64_t *hi) {
    if (r->count == 0 || n <= 0)
        return 0;
    const pd_block *head = &r->blocks[r->first];
    int64_t base = r->head ? head->cuts[r->head] : head->start;
    int64_t stop = offset + n;
    int64_t at = offset > base ? offset : base; /* bytes before the first piece: dropped */
    int64_t l = r->first, h = r->nblocks;       /* bisect_right(starts, at, first) */
    while (l < h) {
        int64_t mid = l + (h - l) / 2;
        if (at < r->blocks[mid].start)
            h = mid;
        else
            l = mid + 1;
    }
    int64_t k = l - 1 > r->first ? l - 1 : r->first;
    int budget = PD_MAX_BLOCKS_COMPARED;
    for (; k < r->nblocks && budget; k++) {
        const pd_block *b = &r->blocks[k];
        if (b->start >= stop)
            break;
        int64_t a = b->start > at ? b->start : at;
        int64_t z = b->start + b->len < stop ? b->start + b->len : stop;
        if (a >= z)
            continue;
        budget -= 1;
        r->compared += 1;
        const uint8_t *old = b->data + (a - b->start), *new = data + (a - offset);
        if (memcmp(old, new, (size_t)(z - a)) != 0) {
            int64_t j = 0;
            while (old[j] == new[j])
                j++;
            piece_at(r, k, a + j, offset, stop, lo, hi);
            return 1;
        }
    }
    return 0;
}
