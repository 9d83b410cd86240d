/* The compiled stage: record walk and header parse (see walk.h for the contract).
 *
 * Every packet byte is read through cursor.h after a pd_need check; what the checks refuse
 * becomes a PD_RAW row (the Python path parses it) or stops the walk (the Python reader
 * takes the record). The conditions mirror dissector/capture/pcap.py, pcapng.py and
 * dissector/net/headers.py line by line; tests/core/ runs both on the same inputs.
 */
#include "walk.h"

#include <string.h>

#define ETH_IPV4 0x0800
#define ETH_IPV6 0x86DD
#define PROTO_TCP 6
#define EPB 6

static int is_vlan(uint32_t etype) {
    return etype == 0x8100 || etype == 0x88A8 || etype == 0x9100 || etype == 0x9200;
}

/* The TCP header at `off` of `pkt`; the IP packet ends at `ip_end` on the wire. */
static void tcp(const pd_cursor *pkt, int64_t base, int64_t off, int64_t ip_end,
                int64_t orig_len, pd_cols *out, int64_t i, int32_t kind) {
    int64_t captured = pkt->len, start;
    if (!pd_need(pkt, off, 20))
        return;
    start = off + (int64_t)(pd_u8(pkt, off + 12) >> 4) * 4;
    if (start < off + 20 || start > ip_end || captured < start)
        return;
    out->sport[i] = pd_be16(pkt, off);
    out->dport[i] = pd_be16(pkt, off + 2);
    out->seq[i] = pd_be32(pkt, off + 4);
    out->ack[i] = pd_be32(pkt, off + 8);
    out->flags[i] = pd_u8(pkt, off + 13);
    out->window[i] = pd_be16(pkt, off + 14);
    out->pay_off[i] = base + start;
    if (captured >= ip_end) {
        out->pay_len[i] = ip_end - start;
        out->missing[i] = 0;
    } else {
        int64_t wire = ip_end < orig_len ? ip_end : orig_len;
        out->pay_len[i] = captured - start;
        out->missing[i] = wire > captured ? wire - captured : 0;
    }
    out->kind[i] = kind;
}

static void ipv4(const pd_cursor *pkt, int64_t base, int64_t off, int64_t orig_len,
                 pd_cols *out, int64_t i) {
    uint32_t vihl, total, ihl;
    if (!pd_need(pkt, off, 20))
        return;
    vihl = pd_u8(pkt, off);
    total = pd_be16(pkt, off + 2);
    ihl = (vihl & 0x0F) * 4;
    if (vihl >> 4 != 4 || ihl < 20 || pd_u8(pkt, off + 9) != PROTO_TCP)
        return;
    if (pd_be16(pkt, off + 6) & 0x3FFF) /* a fragment */
        return;
    if (!pd_need(pkt, off, ihl))
        return;
    memset(out->src + 16 * i, 0, 16);
    memset(out->dst + 16 * i, 0, 16);
    pd_copy(pkt, off + 12, 4, out->src + 16 * i);
    pd_copy(pkt, off + 16, 4, out->dst + 16 * i);
    if (total == 0) /* segmentation offload: up to the wire length */
        tcp(pkt, base, off + ihl, orig_len, orig_len, out, i, PD_TCP4);
    else if (total >= ihl)
        tcp(pkt, base, off + ihl, off + total, orig_len, out, i, PD_TCP4);
}

static void ipv6(const pd_cursor *pkt, int64_t base, int64_t off, int64_t orig_len,
                 pd_cols *out, int64_t i) {
    uint32_t plen;
    int64_t end;
    if (!pd_need(pkt, off, 40))
        return;
    if (pd_u8(pkt, off) >> 4 != 6 || pd_u8(pkt, off + 6) != PROTO_TCP)
        return; /* extension headers and other protocols: the Python path */
    plen = pd_be16(pkt, off + 4);
    end = plen ? off + 40 + plen : orig_len; /* 0: jumbogram or segmentation offload */
    if (off + 40 > end)
        return;
    pd_copy(pkt, off + 8, 16, out->src + 16 * i);
    pd_copy(pkt, off + 24, 16, out->dst + 16 * i);
    tcp(pkt, base, off + 40, end, orig_len, out, i, PD_TCP6);
}

void pd_parse_packet(const pd_cursor *buf, int64_t at, int64_t caplen, int32_t linktype,
                     int64_t orig_len, pd_cols *out, int64_t i) {
    pd_cursor pkt;
    uint32_t etype;
    int64_t off = 14;
    out->kind[i] = PD_RAW;
    if (linktype != 1 || !pd_need(buf, at, caplen))
        return;
    pkt = pd_sub(buf, at, caplen);
    if (!pd_need(&pkt, 0, 14))
        return;
    etype = pd_be16(&pkt, 12);
    while (is_vlan(etype)) {
        if (!pd_need(&pkt, off, 4))
            return;
        etype = pd_be16(&pkt, off + 2);
        off += 4;
    }
    if (etype == ETH_IPV4)
        ipv4(&pkt, at, off, orig_len, out, i);
    else if (etype == ETH_IPV6)
        ipv6(&pkt, at, off, orig_len, out, i);
}

static int64_t add_row(const pd_cursor *buf, pd_cols *out, int64_t ts, int64_t at,
                       int64_t caplen, int64_t orig_len, int32_t linktype, int32_t iface) {
    int64_t i = out->n++;
    out->ts[i] = ts;
    out->data_off[i] = at;
    out->caplen[i] = caplen;
    out->orig_len[i] = orig_len;
    out->linktype[i] = linktype;
    out->interface[i] = iface;
    pd_parse_packet(buf, at, caplen, linktype, orig_len, out, i);
    return i;
}

int64_t pd_walk_pcap(const pd_cursor *buf, int64_t pos, const pd_pcap *f, pd_cols *out,
                     int64_t *number) {
    while (out->n < out->cap && pd_need(buf, pos, 16)) {
        int64_t sec = pd_u32(buf, pos, f->little), frac = pd_u32(buf, pos + 4, f->little);
        int64_t incl = pd_u32(buf, pos + 8, f->little), orig = pd_u32(buf, pos + 12, f->little);
        if (incl > PD_MAX_RECORD_SIZE || !pd_need(buf, pos + 16, incl))
            break; /* damaged, or not all in the buffer: the Python reader */
        *number += 1;
        add_row(buf, out, sec * 1000000 + frac / f->frac_div, pos + 16, incl, orig,
                f->linktype, 0);
        pos += 16 + incl;
    }
    return pos;
}

int64_t pd_walk_pcapng(const pd_cursor *buf, int64_t pos, const pd_pcapng *f, pd_cols *out,
                       int64_t *number, int64_t *last_ts) {
    while (out->n < out->cap && pd_need(buf, pos, 12)) {
        int little = f->little;
        int64_t length = pd_u32(buf, pos + 4, little), ifid, caplen, orig;
        __int128 ts;
        const pd_iface *iface;
        if (pd_u32(buf, pos, little) != EPB)
            break; /* section and interface headers, other blocks: the Python reader */
        if (length < 32 || length % 4 || length > PD_MAX_RECORD_SIZE || !pd_need(buf, pos, length))
            break;
        if (pd_u32(buf, pos + length - 4, little) != (uint32_t)length)
            break;
        ifid = pd_u32(buf, pos + 8, little);
        caplen = pd_u32(buf, pos + 20, little);
        orig = pd_u32(buf, pos + 24, little);
        if (caplen > length - 32 || ifid >= f->count || !f->ifaces[ifid].usable)
            break;
        iface = &f->ifaces[ifid];
        ts = (__int128)((uint64_t)pd_u32(buf, pos + 12, little) << 32 |
                        pd_u32(buf, pos + 16, little));
        ts = ts * iface->mul / iface->div + iface->offset;
        if (ts < 0 || ts > PD_MAX_TS_US)
            break; /* capture.bad_timestamp: the Python reader */
        *number += 1;
        *last_ts = (int64_t)ts;
        add_row(buf, out, (int64_t)ts, pos + 28, caplen, orig, iface->linktype, iface->position);
        pos += length;
    }
    return pos;
}
