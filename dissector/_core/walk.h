/* The compiled stage: capture records and packet headers -> column batches (no Python).
 *
 * Input: a buffer holding capture records (pcap records or pcapng blocks), the position of
 * the next record, the format's parameters (byte order, timestamp rule, link types).
 * Output: per record, one row of the columns in `pd_cols`: packet number order, time,
 * where the captured bytes are, and for a plain TCP segment (Ethernet with VLAN tags or not,
 * IPv4 without fragmentation or IPv6 without extension headers) its addresses, ports,
 * sequence numbers, flags, window and where its payload is. Every other packet is a row of
 * kind PD_RAW: the Python stages (dissector.net.headers) parse it, so that tunnels, fragments,
 * other link types and damaged headers keep their one implementation.
 * Rule: a walk stops before the first record it does not take as it is: incomplete in the
 * buffer, damaged, a block that changes the reader's state (pcapng section or interface
 * headers, other block types), a timestamp out of range. The Python reader handles that
 * record, then calls the walk again. The rows a walk gives are exactly those the Python
 * reader + dissector.net.headers.parse_layers give (tests/core/).
 */
#ifndef PD_WALK_H
#define PD_WALK_H

#include <stdint.h>

#include "cursor.h"
#include "layout.h"

/* layout.h (generated): PD_MAX_RECORD_SIZE, the largest record the readers accept;
 * PD_MAX_TS_US, the last microsecond of 9999-12-31; the row kinds PD_RAW, PD_TCP4, PD_TCP6. */

/* One batch of rows, column by column; `cap` rows allocated by the caller. */
typedef struct {
    int64_t cap, n;
    int64_t *ts, *data_off, *caplen, *orig_len; /* the record */
    int64_t *pay_off, *pay_len, *missing;       /* TCP payload (offsets into the buffer) */
    int32_t *linktype, *interface, *kind;
    uint32_t *sport, *dport, *seq, *ack, *flags, *window;
    uint8_t *src, *dst; /* 16 bytes a row: IPv4 in the first 4 */
} pd_cols;

typedef struct {
    int little;      /* byte order of the record headers */
    int64_t frac_div; /* 1 (microseconds) or 1000 (nanoseconds) */
    int32_t linktype;
} pd_pcap;

typedef struct {
    int32_t linktype, position;
    int64_t mul, div, offset; /* microseconds = raw * mul / div + offset */
    int usable;               /* 0: its timestamp rule does not fit 64 bits: Python */
} pd_iface;

typedef struct {
    int little;
    int64_t count;
    const pd_iface *ifaces;
} pd_pcapng;

/* Walk pcap records from `pos`; returns where the walk stopped. `*number` is the number of
 * the last packet given (incremented per row). */
int64_t pd_walk_pcap(const pd_cursor *buf, int64_t pos, const pd_pcap *f, pd_cols *out,
                     int64_t *number);

/* Walk pcapng Enhanced Packet Blocks from `pos`; `*last_ts` is the previous packet's time. */
int64_t pd_walk_pcapng(const pd_cursor *buf, int64_t pos, const pd_pcapng *f, pd_cols *out,
                       int64_t *number, int64_t *last_ts);

/* Parse the headers of one packet (`pkt` is its captured bytes, at `at` in the buffer) into
 * row `i`: its kind, and for a TCP segment its fields. */
void pd_parse_packet(const pd_cursor *buf, int64_t at, int64_t caplen, int32_t linktype,
                     int64_t orig_len, pd_cols *out, int64_t i);

#endif
