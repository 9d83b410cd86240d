/* The Python type of the compiled dealer (_dealer.c), in dissector._core._walk.
 *
 * Input: Dealer(n, mine, capacity, clock): deal to n shards, this worker's shard `mine`,
 * remembering `capacity` connections; `clock`: the walk tells runs of skipped packets (their
 * last packet and time, and the latest time) for the idle-timeout clock.
 * Output: the type; `deal(a, a_port, b, b_port)` -> the shard (the Python Sharder's `_deal`);
 * the walks take a Dealer to deal packets themselves (_walkmodule.c).
 */
#ifndef PD_DEALER_TYPE_H
#define PD_DEALER_TYPE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "deal.h"

typedef struct {
    PyObject_HEAD
    pd_dealer *dealer;
    int32_t mine;
    int clock;
} pd_dealer_object;

/* The Dealer type (readied), or NULL with an exception set. */
PyTypeObject *pd_dealer_type(void);

#endif
