/* Fuzz entry point of the compiled stage (dissector/_core/walk.c), no Python involved.
 *
 * Input: any bytes. The first byte picks the walk (pcap or pcapng) and its parameters (byte
 * order, resolution, link type, interface rules); the rest is the buffer walked.
 * Output: nothing; the sanitizers (address, undefined) and the checks below report faults:
 * every row's byte ranges must lie inside the buffer and the walk must stop inside it.
 * Rule: libFuzzer calls LLVMFuzzerTestOneInput (clang -fsanitize=fuzzer,address,undefined);
 * without libFuzzer (gcc), `main` runs each file named and N random mutations of them, so the
 * same harness runs under gcc's sanitizers where clang is not installed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../dissector/_core/walk.h"

#define ROWS 64

static void check(int ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "walk_fuzz: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int64_t ts[ROWS], off[ROWS], cap[ROWS], orig[ROWS], poff[ROWS], plen[ROWS], miss[ROWS];
    static int32_t link[ROWS], iface[ROWS], kind[ROWS];
    static uint32_t sp[ROWS], dp[ROWS], seq[ROWS], ack[ROWS], fl[ROWS], win[ROWS];
    static uint8_t src[ROWS * 16], dst[ROWS * 16];
    pd_cols c = {ROWS, 0, ts, off, cap, orig, poff, plen, miss, link, iface, kind,
                 sp, dp, seq, ack, fl, win, src, dst};
    pd_iface ifaces[3] = {{1, 0, 1, 1, 0, 1}, {1, 1, 1000000, 1024, 0, 1}, {101, 2, 1, 1000, -5, 1}};
    pd_cursor buf;
    int64_t pos = 0, number = 0, last_ts = 0, i;
    uint8_t mode;
    uint8_t *copy;
    if (size < 1)
        return 0;
    mode = data[0];
    /* a copy of exactly the bytes walked: reads past it are caught by the address sanitizer */
    copy = malloc(size - 1 ? size - 1 : 1);
    memcpy(copy, data + 1, size - 1);
    buf.base = copy;
    buf.len = (int64_t)size - 1;
    for (int round = 0; round < 4 && pos < buf.len; round++) {
        int64_t before = pos;
        c.n = 0;
        if (mode & 1) {
            pd_pcapng f = {mode & 2, 3, ifaces};
            pos = pd_walk_pcapng(&buf, pos, &f, &c, &number, &last_ts);
        } else {
            pd_pcap f = {mode & 2, mode & 4 ? 1000 : 1, mode & 8 ? 1 : (mode >> 4)};
            pos = pd_walk_pcap(&buf, pos, &f, &c, &number);
        }
        check(pos >= before && pos <= buf.len, "walk stopped outside the buffer");
        for (i = 0; i < c.n; i++) {
            check(off[i] >= 0 && cap[i] >= 0 && off[i] + cap[i] <= buf.len, "record outside");
            if (kind[i] != PD_RAW)
                check(poff[i] >= off[i] && plen[i] >= 0 && poff[i] + plen[i] <= off[i] + cap[i],
                      "payload outside its record");
        }
        if (c.n < c.cap)
            break;
    }
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
    uint64_t state = 27;
    for (int a = 1; a < argc && n < 256; a++) {
        FILE *f = fopen(argv[a], "rb");
        long len;
        if (f == NULL)
            continue;
        fseek(f, 0, SEEK_END);
        len = ftell(f);
        fseek(f, 0, SEEK_SET);
        if (len > (1 << 20))
            len = 1 << 20; /* a prefix: the walks are per record */
        seeds[n] = malloc((size_t)len + 1);
        seeds[n][0] = 0;
        sizes[n] = fread(seeds[n] + 1, 1, (size_t)len, f) + 1;
        fclose(f);
        for (int m = 0; m < 16; m++) {
            seeds[n][0] = (uint8_t)(m | 8 | (seeds[n][1] == 0x0a ? 1 : 0));
            LLVMFuzzerTestOneInput(seeds[n], sizes[n]);
            executions++;
        }
        n++;
    }
    for (r = 0; (runs < 0 || r < runs) && n > 0; r++) {
        if (stop && (r & 4095) == 0 && time(NULL) >= stop)
            break; /* the time budget is spent */
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
    printf("walk_fuzz: %d seeds, %ld mutations, %ld executions, no fault\n", n, r, executions + r);
    return 0;
}
#endif
