/* The compiled dealer: connections to shards, exactly as dissector.flow.shard.Sharder deals.
 *
 * Input: per packet, the two endpoints of its connection (address bytes, 4 or 16, and port),
 * or a row of the record walk (walk.h) whose endpoints it reads itself.
 * Output: the connection's shard, 0 <= k < n.
 * Rule: connections are dealt in turn in the order their first packet appears, both
 * directions together (the key is the ordered pair of endpoints, the smaller first as
 * Python compares (bytes, port) tuples); the `capacity` most recently seen connections are
 * remembered (least recently seen forgotten first, after the new one is added), as the
 * Python Sharder's OrderedDict does. `pd_deal_row` keys a row as the Python pipeline would
 * (`Sharder.of_raw` on the packet's bytes, else the C-parsed segment's endpoints) and says
 * PD_DEAL_UNKNOWN for a packet only the Python stages can key (tunnels, fragments, other
 * link types, damaged headers): the caller then leaves the dealing to Python.
 * Memory: at most capacity + 1 entries (PD_DEAL_MAX_CAPACITY), grown as connections come.
 */
#ifndef PD_DEAL_H
#define PD_DEAL_H

#include <stdint.h>

#include "cursor.h"
#include "walk.h"

/* Largest number of connections a dealer remembers (dissector.flow.tcp.MAX_OPEN_FLOWS is
 * 100,000). */
#define PD_DEAL_MAX_CAPACITY (1 << 20)
/* Shards a dealer deals to at most. */
#define PD_DEAL_MAX_SHARDS 4096

enum { PD_DEAL_UNKNOWN = -1, PD_DEAL_NO_MEMORY = -2 };

typedef struct pd_dealer pd_dealer;

/* A dealer to n shards remembering `capacity` connections; NULL when out of memory or out
 * of bounds (1 <= n <= PD_DEAL_MAX_SHARDS, 0 <= capacity <= PD_DEAL_MAX_CAPACITY). */
pd_dealer *pd_dealer_new(int32_t n, int64_t capacity);
void pd_dealer_free(pd_dealer *d);

/* The shard of the connection between endpoints (a, a_port) and (b, b_port), addresses of
 * `size` bytes (4 or 16); PD_DEAL_NO_MEMORY when it cannot grow. */
int32_t pd_deal(pd_dealer *d, const uint8_t *a, uint32_t a_port, const uint8_t *b,
                uint32_t b_port, int size);

/* The shard of row `i` of `c` (its packet at c->data_off[i] in `buf`), or PD_DEAL_UNKNOWN,
 * or PD_DEAL_NO_MEMORY. */
int32_t pd_deal_row(pd_dealer *d, const pd_cursor *buf, const pd_cols *c, int64_t i);

/* The position after row i's record (its pcap record or pcapng block) in `buf`, for a walk
 * that stops after it. */
int64_t pd_row_end(const pd_cursor *buf, const pd_cols *c, int64_t i, int pcapng, int little);

#endif
