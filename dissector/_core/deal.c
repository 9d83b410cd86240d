/* The compiled dealer (see deal.h): a hash table of connections chained through an LRU list.
 *
 * Entries live in one array grown by doubling (indexes, not pointers, link them); a bucket
 * array of twice the entries' room holds the chains. Packet bytes are read through cursor.h.
 */
#include "deal.h"

#include <stdlib.h>
#include <string.h>

#define NIL (-1)
#define ETHERNET 1

typedef struct {
    uint8_t a[16], b[16]; /* the smaller endpoint first */
    uint32_t a_port, b_port;
    int32_t size, shard;
    int32_t prev, next; /* LRU list: head the least recently seen */
    int32_t chain;      /* next entry of its bucket, or the next free entry */
} entry;

struct pd_dealer {
    int32_t n, next_shard;
    int64_t capacity, count, room;
    entry *entries;
    int32_t *buckets; /* 2 * room of them */
    int32_t head, tail, free;
};

pd_dealer *pd_dealer_new(int32_t n, int64_t capacity) {
    pd_dealer *d;
    if (n < 1 || n > PD_DEAL_MAX_SHARDS || capacity < 0 || capacity > PD_DEAL_MAX_CAPACITY)
        return NULL;
    d = calloc(1, sizeof *d);
    if (d == NULL)
        return NULL;
    d->n = n;
    d->capacity = capacity;
    d->head = d->tail = d->free = NIL;
    return d;
}

void pd_dealer_free(pd_dealer *d) {
    if (d == NULL)
        return;
    free(d->entries);
    free(d->buckets);
    free(d);
}

static uint64_t hash(const entry *e) {
    uint64_t h = 1469598103934665603ULL;
    int k;
    for (k = 0; k < e->size; k++)
        h = (h ^ e->a[k]) * 1099511628211ULL;
    for (k = 0; k < e->size; k++)
        h = (h ^ e->b[k]) * 1099511628211ULL;
    h = (h ^ e->a_port) * 1099511628211ULL;
    h = (h ^ e->b_port) * 1099511628211ULL;
    return h ^ (h >> 29);
}

static int same(const entry *x, const entry *y) {
    return x->size == y->size && x->a_port == y->a_port && x->b_port == y->b_port &&
           memcmp(x->a, y->a, (size_t)x->size) == 0 && memcmp(x->b, y->b, (size_t)x->size) == 0;
}

static int64_t slot(const pd_dealer *d, const entry *e) {
    return (int64_t)(hash(e) & (uint64_t)(2 * d->room - 1));
}

/* Double the room (entries and buckets), rechaining every entry; -1 when out of memory. */
static int grow(pd_dealer *d) {
    int64_t room = d->room ? 2 * d->room : 64, k;
    entry *entries = realloc(d->entries, (size_t)room * sizeof(entry));
    int32_t *buckets;
    if (entries == NULL)
        return -1;
    d->entries = entries;
    buckets = malloc((size_t)(2 * room) * sizeof(int32_t));
    if (buckets == NULL)
        return -1;
    free(d->buckets);
    d->buckets = buckets;
    for (k = 0; k < 2 * room; k++)
        buckets[k] = NIL;
    for (k = room - 1; k >= d->room; k--) { /* the new entries are free */
        entries[k].chain = d->free;
        d->free = (int32_t)k;
    }
    d->room = room;
    for (k = d->head; k != NIL; k = entries[k].next) {
        int64_t s = slot(d, &entries[k]);
        entries[k].chain = buckets[s];
        buckets[s] = (int32_t)k;
    }
    return 0;
}

static void unlink_lru(pd_dealer *d, int32_t k) {
    entry *e = &d->entries[k];
    if (e->prev == NIL)
        d->head = e->next;
    else
        d->entries[e->prev].next = e->next;
    if (e->next == NIL)
        d->tail = e->prev;
    else
        d->entries[e->next].prev = e->prev;
}

static void append_lru(pd_dealer *d, int32_t k) {
    entry *e = &d->entries[k];
    e->prev = d->tail;
    e->next = NIL;
    if (d->tail == NIL)
        d->head = k;
    else
        d->entries[d->tail].next = k;
    d->tail = k;
}

/* Forget the least recently seen connection. */
static void evict(pd_dealer *d) {
    int32_t k = d->head, *link;
    entry *e = &d->entries[k];
    for (link = &d->buckets[slot(d, e)]; *link != k; link = &d->entries[*link].chain)
        ;
    *link = e->chain;
    unlink_lru(d, k);
    e->chain = d->free;
    d->free = k;
    d->count--;
}

int32_t pd_deal(pd_dealer *d, const uint8_t *a, uint32_t a_port, const uint8_t *b,
                uint32_t b_port, int size) {
    entry key;
    int32_t k;
    int c = memcmp(a, b, (size_t)size);
    memset(&key, 0, sizeof key);
    if (c > 0 || (c == 0 && a_port > b_port)) { /* Python: (a, b) if a <= b else (b, a) */
        const uint8_t *t = a;
        uint32_t p = a_port;
        a = b, a_port = b_port, b = t, b_port = p;
    }
    memcpy(key.a, a, (size_t)size);
    memcpy(key.b, b, (size_t)size);
    key.a_port = a_port;
    key.b_port = b_port;
    key.size = size;
    if (d->room) {
        for (k = d->buckets[slot(d, &key)]; k != NIL; k = d->entries[k].chain)
            if (same(&d->entries[k], &key)) {
                unlink_lru(d, k);
                append_lru(d, k);
                return d->entries[k].shard;
            }
    }
    if (d->free == NIL && grow(d) < 0)
        return PD_DEAL_NO_MEMORY;
    k = d->free;
    d->free = d->entries[k].chain;
    key.shard = d->next_shard;
    d->next_shard = (d->next_shard + 1) % d->n;
    {
        int64_t s = slot(d, &key);
        key.chain = d->buckets[s];
        d->entries[k] = key;
        d->buckets[s] = k;
    }
    append_lru(d, k);
    d->count++;
    if (d->count > d->capacity)
        evict(d);
    return key.shard;
}

/* Sharder.of_raw on the packet's bytes: 1 with the endpoints filled, or 0 (-1 there). */
static int raw_key(const pd_cursor *pkt, uint8_t *a, uint32_t *ap, uint8_t *b, uint32_t *bp,
                   int *size) {
    uint32_t etype;
    if (!pd_need(pkt, 0, 54))
        return 0;
    etype = pd_be16(pkt, 12);
    if (etype == 0x0800) {
        int64_t ihl = (int64_t)(pd_u8(pkt, 14) & 0x0F) * 4, at = 14 + ihl;
        if (pd_u8(pkt, 23) != 6 || ihl < 20 || (pd_u8(pkt, 20) & 0x3F) || pd_u8(pkt, 21))
            return 0;
        if (!pd_need(pkt, at, 4))
            return 0;
        pd_copy(pkt, 26, 4, a);
        pd_copy(pkt, 30, 4, b);
        *ap = pd_be16(pkt, at);
        *bp = pd_be16(pkt, at + 2);
        *size = 4;
        return 1;
    }
    if (etype == 0x86DD) {
        if (pd_u8(pkt, 20) != 6 || !pd_need(pkt, 0, 58))
            return 0;
        pd_copy(pkt, 22, 16, a);
        pd_copy(pkt, 38, 16, b);
        *ap = pd_be16(pkt, 54);
        *bp = pd_be16(pkt, 56);
        *size = 16;
        return 1;
    }
    return 0;
}

int32_t pd_deal_row(pd_dealer *d, const pd_cursor *buf, const pd_cols *c, int64_t i) {
    uint8_t a[16], b[16];
    uint32_t ap, bp;
    int size;
    if (c->linktype[i] == ETHERNET && pd_need(buf, c->data_off[i], c->caplen[i])) {
        pd_cursor pkt = pd_sub(buf, c->data_off[i], c->caplen[i]);
        if (raw_key(&pkt, a, &ap, b, &bp, &size))
            return pd_deal(d, a, ap, b, bp, size);
    }
    if (c->kind[i] == PD_TCP4 || c->kind[i] == PD_TCP6) /* Sharder.of on the segment */
        return pd_deal(d, c->src + 16 * i, c->sport[i], c->dst + 16 * i, c->dport[i],
                       c->kind[i] == PD_TCP4 ? 4 : 16);
    return PD_DEAL_UNKNOWN;
}

int64_t pd_row_end(const pd_cursor *buf, const pd_cols *c, int64_t i, int pcapng, int little) {
    int64_t start = c->data_off[i] - 28; /* an Enhanced Packet Block's header */
    if (!pcapng)
        return c->data_off[i] + c->caplen[i];
    if (start < 0 || !pd_need(buf, start, 8))
        return c->data_off[i] + c->caplen[i]; /* not reached: the walk took the block */
    return start + pd_u32(buf, start + 4, little);
}
