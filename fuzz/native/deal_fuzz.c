/* Fuzz entry point of the compiled dealer (dissector/_core/deal.c), no Python involved.
 *
 * Input: any bytes. The first byte picks the walk (as walk_fuzz.c: pcap or pcapng and their
 * parameters), the second the shard count (1 to 4) and the bound on remembered connections
 * (0 to 7); the rest is the buffer walked, every row dealt (`pd_deal_row`, `pd_row_end`),
 * then read again as a sequence of connections dealt (`pd_deal`) from small pools of
 * endpoints, against a plain list kept in order of last sight (the reference).
 * Output: nothing; the sanitizers and the checks below report faults: every shard in range
 * (or PD_DEAL_UNKNOWN for a row), every record end inside the buffer and after the record's
 * bytes, every deal the reference's.
 * Rule: libFuzzer calls LLVMFuzzerTestOneInput (clang -fsanitize=fuzzer,address,undefined);
 * without libFuzzer (gcc), `main` runs each file named and random mutations of them.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../dissector/_core/deal.h"

#define ROWS 64
#define MAX_REF 16 /* reference entries: bound 7 + 1 */

static void check(int ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "deal_fuzz: %s\n", what);
        abort();
    }
}

/* The reference: connections in order of last sight (oldest first), as Sharder's dict. */
typedef struct {
    uint8_t key[40];
    int shard;
} ref_entry;

static int ref_deal(ref_entry *ref, int *count, int *next, int n, int capacity,
                    const uint8_t *key) {
    int k, shard;
    for (k = 0; k < *count; k++)
        if (memcmp(ref[k].key, key, 40) == 0) {
            ref_entry hit = ref[k];
            memmove(ref + k, ref + k + 1, (size_t)(*count - k - 1) * sizeof *ref);
            ref[*count - 1] = hit;
            return hit.shard;
        }
    shard = *next;
    *next = (*next + 1) % n;
    memcpy(ref[*count].key, key, 40);
    ref[*count].shard = shard;
    (*count)++;
    if (*count > capacity) {
        memmove(ref, ref + 1, (size_t)(*count - 1) * sizeof *ref);
        (*count)--;
    }
    return shard;
}

/* The ordered key the reference compares: smaller (address, port) first, as deal.c. */
static void ordered(uint8_t *key, const uint8_t *a, uint32_t ap, const uint8_t *b, uint32_t bp,
                    int size) {
    int c = memcmp(a, b, (size_t)size);
    memset(key, 0, 40);
    if (c > 0 || (c == 0 && ap > bp)) {
        const uint8_t *t = a;
        uint32_t p = ap;
        a = b, ap = bp, b = t, bp = p;
    }
    memcpy(key, a, (size_t)size);
    memcpy(key + 16, b, (size_t)size);
    key[32] = (uint8_t)(ap >> 8), key[33] = (uint8_t)ap;
    key[34] = (uint8_t)(bp >> 8), key[35] = (uint8_t)bp;
    key[36] = (uint8_t)size;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int64_t ts[ROWS], off[ROWS], cap[ROWS], orig[ROWS], poff[ROWS], plen[ROWS], miss[ROWS];
    static int32_t link[ROWS], iface[ROWS], kind[ROWS];
    static uint32_t sp[ROWS], dp[ROWS], seq[ROWS], ack[ROWS], fl[ROWS], win[ROWS];
    static uint8_t src[ROWS * 16], dst[ROWS * 16];
    pd_cols c = {ROWS, 0, ts, off, cap, orig, poff, plen, miss, link, iface, kind,
                 sp, dp, seq, ack, fl, win, src, dst};
    pd_iface ifaces[3] = {{1, 0, 1, 1, 0, 1}, {1, 1, 1000000, 1024, 0, 1}, {101, 2, 1, 1000, -5, 1}};
    ref_entry ref[MAX_REF];
    int ref_count = 0, ref_next = 0, n, capacity;
    pd_dealer *dealer, *direct;
    pd_cursor buf;
    int64_t pos = 0, number = 0, last_ts = 0, i, at;
    uint8_t mode, *copy;
    if (size < 2)
        return 0;
    mode = data[0];
    n = 1 + (data[1] & 3);
    capacity = (data[1] >> 2) & 7;
    copy = malloc(size - 2 ? size - 2 : 1);
    memcpy(copy, data + 2, size - 2);
    buf.base = copy;
    buf.len = (int64_t)size - 2;
    dealer = pd_dealer_new(n, capacity);
    direct = pd_dealer_new(n, capacity);
    check(dealer != NULL && direct != NULL, "no dealer");
    for (int round = 0; round < 4 && pos < buf.len; round++) {
        c.n = 0;
        if (mode & 1) {
            pd_pcapng f = {mode & 2, 3, ifaces};
            pos = pd_walk_pcapng(&buf, pos, &f, &c, &number, &last_ts);
        } else {
            pd_pcap f = {mode & 2, mode & 4 ? 1000 : 1, mode & 8 ? 1 : (mode >> 4)};
            pos = pd_walk_pcap(&buf, pos, &f, &c, &number);
        }
        for (i = 0; i < c.n; i++) {
            int32_t shard = pd_deal_row(dealer, &buf, &c, i);
            int64_t end = pd_row_end(&buf, &c, i, mode & 1, mode & 2);
            check(shard == PD_DEAL_UNKNOWN || (shard >= 0 && shard < n), "shard out of range");
            check(end >= off[i] + cap[i] && end <= buf.len, "record end outside the buffer");
        }
        if (c.n < c.cap)
            break;
    }
    /* the bytes as connections: 1 byte each, from pools of 3 addresses and 3 ports */
    for (at = 0; at < buf.len && at < 512; at++) {
        static const uint32_t ports[3] = {1, 6650, 40000};
        uint8_t a[16] = {0}, b[16] = {0}, key[40];
        uint8_t v = copy[at];
        int size = v & 0x80 ? 16 : 4;
        uint32_t ap = ports[(v >> 4) % 3], bp = ports[(v >> 2) % 3];
        a[size - 1] = (uint8_t)(v & 3) % 3;
        b[size - 1] = (uint8_t)((v >> 5) & 3) % 3;
        ordered(key, a, ap, b, bp, size);
        check(pd_deal(direct, a, ap, b, bp, size) ==
                  ref_deal(ref, &ref_count, &ref_next, n, capacity, key),
              "a deal differs from the reference");
    }
    pd_dealer_free(dealer);
    pd_dealer_free(direct);
    free(copy);
    return 0;
}

#ifndef PD_LIBFUZZER
/* gcc: run every file named, then `PD_FUZZ_RUNS` random mutations (default 100000, or no
 * limit with a time budget) or as many as `PD_FUZZ_SECONDS` allow, whichever ends first. */
int main(int argc, char **argv) {
    uint8_t *seeds[256];
    size_t sizes[256];
    int n = 0;
    const char *budget = getenv("PD_FUZZ_SECONDS");
    long runs = getenv("PD_FUZZ_RUNS") ? atol(getenv("PD_FUZZ_RUNS")) : budget ? -1 : 100000;
    time_t stop = budget ? time(NULL) + atol(budget) : 0;
    long executions = 0, r;
    uint64_t state = 39;
    for (int a = 1; a < argc && n < 256; a++) {
        FILE *f = fopen(argv[a], "rb");
        long len;
        if (f == NULL)
            continue;
        fseek(f, 0, SEEK_END);
        len = ftell(f);
        fseek(f, 0, SEEK_SET);
        if (len > (1 << 16))
            len = 1 << 16;
        seeds[n] = malloc((size_t)len + 2);
        sizes[n] = fread(seeds[n] + 2, 1, (size_t)len, f) + 2;
        fclose(f);
        for (int m = 0; m < 16; m++) {
            seeds[n][0] = (uint8_t)(m | 8 | (seeds[n][2] == 0x0a ? 1 : 0));
            seeds[n][1] = (uint8_t)(m * 17);
            LLVMFuzzerTestOneInput(seeds[n], sizes[n]);
            executions++;
        }
        n++;
    }
    for (r = 0; (runs < 0 || r < runs) && n > 0; r++) {
        if (stop && (r & 4095) == 0 && time(NULL) >= stop)
            break;
        size_t k, size, flips;
        uint8_t *m;
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        k = (size_t)(state >> 33) % (size_t)n;
        size = sizes[k] > 4096 ? 64 + (size_t)(state >> 20) % 4096 : sizes[k];
        m = malloc(size);
        memcpy(m, seeds[k], size);
        flips = 1 + (state >> 40) % 8;
        for (size_t j = 0; j < flips; j++) {
            state = state * 6364136223846793005ULL + 1442695040888963407ULL;
            m[(state >> 33) % size] ^= (uint8_t)(1u << ((state >> 29) % 8));
        }
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        LLVMFuzzerTestOneInput(m, size - (size_t)(state >> 33) % (size / 4 + 1));
        free(m);
    }
    for (int j = 0; j < n; j++)
        free(seeds[j]);
    printf("deal_fuzz: %d seeds, %ld mutations, %ld executions, no fault\n", n, r, executions + r);
    return 0;
}
#endif
