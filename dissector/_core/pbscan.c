/* Protobuf scanning against the generated schema (see pbscan.h). */
#include "pbscan.h"

#include "fields.h"

/* 1 when [at, end) is valid UTF-8 as Python's strict decoder sees it (no overlong forms,
 * no surrogates, nothing above U+10FFFF). */
static int utf8_ok(const pd_cursor *c, int64_t at, int64_t end) {
    while (at < end) {
        uint32_t b = pd_u8(c, at), lo = 0x80, hi = 0xbf;
        int more;
        if (b < 0x80) {
            at++;
            continue;
        }
        if (b >= 0xc2 && b <= 0xdf)
            more = 1;
        else if (b >= 0xe0 && b <= 0xef) {
            more = 2;
            if (b == 0xe0)
                lo = 0xa0;
            else if (b == 0xed)
                hi = 0x9f;
        } else if (b >= 0xf0 && b <= 0xf4) {
            more = 3;
            if (b == 0xf0)
                lo = 0x90;
            else if (b == 0xf4)
                hi = 0x8f;
        } else
            return 0;
        if (end - at <= more)
            return 0;
        for (int k = 1; k <= more; k++) {
            uint32_t t = pd_u8(c, at + k);
            if (t < lo || t > hi)
                return 0;
            lo = 0x80;
            hi = 0xbf;
        }
        at += more + 1;
    }
    return 1;
}

static int enum_known(int e, uint64_t v) {
    int32_t x = (int32_t)(uint32_t)v;
    const pd_enum *en = &pd_enums[e];
    uint32_t lo = 0, hi = en->count;
    if ((uint64_t)(int64_t)x != v)
        return 0; /* not a canonical int32: leave it to Python */
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (en->values[mid] == x)
            return 1;
        if (en->values[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return 0;
}

/* One tag at `at`: its length (0 if refused), number and wire type. */
static int read_tag(const pd_cursor *c, int64_t at, int64_t end, uint32_t *number,
                    uint32_t *wire) {
    uint64_t tag;
    pd_cursor lim = {c->base, end};
    int k = pd_varint(&lim, at, 5, &tag);
    if (!k || tag > 0xffffffffu || (tag >> 3) == 0)
        return 0;
    *number = (uint32_t)(tag >> 3);
    *wire = (uint32_t)(tag & 7);
    return k;
}

/* The value part of a field at `at` (wire type `wire`): its length, 0 if refused; for wire
 * type 2, *vat and *vlen are the bytes; for wire type 0, *v the value. */
static int64_t read_value(const pd_cursor *c, int64_t at, int64_t end, uint32_t wire,
                          uint64_t *v, int64_t *vat, int64_t *vlen) {
    pd_cursor lim = {c->base, end};
    int k;
    switch (wire) {
    case 0:
        k = pd_varint(&lim, at, 10, v);
        return k;
    case 1:
        return pd_need(&lim, at, 8) ? 8 : 0;
    case 5:
        return pd_need(&lim, at, 4) ? 4 : 0;
    case 2:
        k = pd_varint(&lim, at, 5, v);
        if (!k || !pd_need(&lim, at + k, (int64_t)*v))
            return 0;
        *vat = at + k;
        *vlen = (int64_t)*v;
        return k + *vlen;
    default:
        return 0; /* groups (3, 4) and the invalid types 6, 7 */
    }
}

int pd_pb_check(const pd_cursor *c, int64_t at, int64_t end, int msg, int depth, int utf8) {
    const pd_message *m = &pd_messages[msg];
    if (depth > PD_PB_MAX_DEPTH || !pd_need(c, at, end - at))
        return 0;
    while (at < end) {
        uint32_t number, wire;
        uint64_t v = 0;
        int64_t vat = 0, vlen = 0, k;
        const pd_field *f = 0;
        int t = read_tag(c, at, end, &number, &wire);
        if (!t)
            return 0;
        at += t;
        if (number <= m->max_number && m->slot[number])
            f = &m->fields[m->slot[number] - 1];
        if (f && f->wire != wire)
            return 0; /* upb would keep it as an unknown field: Python decides */
        k = read_value(c, at, end, wire, &v, &vat, &vlen);
        if (!k)
            return 0;
        at += k;
        if (!f)
            continue;
        if (f->kind == PD_K_ENUM && !enum_known(f->sub, v))
            return 0;
        if (f->kind == PD_K_STRING && utf8 && !utf8_ok(c, vat, vat + vlen))
            return 0;
        if (f->kind == PD_K_MESSAGE && !pd_pb_check(c, vat, vat + vlen, f->sub, depth + 1, utf8))
            return 0;
    }
    return 1;
}

int pd_pb_find(const pd_cursor *c, int64_t at, int64_t end, const uint32_t *numbers, int n,
               pd_pb_hit *hits) {
    for (int i = 0; i < n; i++) {
        pd_pb_hit z = {0, 0, -1, 0, -1, 0};
        hits[i] = z;
    }
    while (at < end) {
        uint32_t number, wire;
        uint64_t v = 0;
        int64_t vat = -1, vlen = 0, k;
        int t = read_tag(c, at, end, &number, &wire);
        if (!t)
            return 0;
        at += t;
        k = read_value(c, at, end, wire, &v, &vat, &vlen);
        if (!k)
            return 0;
        at += k;
        for (int i = 0; i < n; i++) {
            pd_pb_hit *h = &hits[i];
            if (numbers[i] != number)
                continue;
            if (h->count == 0) {
                h->first_at = vat;
                h->first_len = vlen;
            }
            h->count++;
            h->value = v;
            h->at = vat;
            h->len = vlen;
        }
    }
    return 1;
}
