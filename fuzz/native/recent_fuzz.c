/* libFuzzer entry point of the compiled recent bytes (dissector/_core/recent.c).
 *
 * Input: any bytes: byte 0 picks `keep`; then operations, each an opcode byte and its
 * arguments from the input: add a piece (its length, maybe a jump before it, its bytes
 * taken from the input), compare bytes at an offset from the input, clear.
 * Output: nothing; abort() when a check fails (libFuzzer keeps the input).
 * Rule: recent.c must agree with a plain model of recent.py's rules kept here (the newest
 * pieces, whole, at least `keep` bytes of them and at most keep / 32 of them; the first kept
 * piece whose bytes differ, clipped): pieces and bytes kept after every operation, and every
 * `differs` answer while fewer than PD_MAX_BLOCKS_COMPARED pieces are kept (past it recent.c
 * stops comparing by design). With gcc, `main` runs each file named and PD_FUZZ_RUNS random
 * mutations of them (as walk_fuzz.c).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../dissector/_core/recent.h"

#define MODEL_PIECES 8192

typedef struct {
    int64_t start, len;
    const uint8_t *data;
} piece;

static piece model[MODEL_PIECES];
static uint8_t copy[0x2000];

static void check(int ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "recent_fuzz: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const int64_t keeps[8] = {0, 1, 32, 100, 1000, 4096, 5000, 65536};
    pd_recent r;
    size_t at = 1;
    int64_t first = 0, n = 0, kept = 0, offset = 0;
    if (size < 1)
        return 0;
    int64_t keep = keeps[data[0] & 7];
    pd_recent_init(&r, NULL);
    while (at + 3 <= size) {
        uint8_t op = data[at];
        int64_t len = (data[at + 1] | data[at + 2] << 8) & 0x1fff; /* up to 8 KiB */
        at += 3;
        if (op < 160) { /* add */
            if (op & 2) /* a small piece: joins the block before it */
                len &= 0x7f;
            if (len > (int64_t)(size - at))
                len = (int64_t)(size - at);
            if (op & 1)
                offset += op; /* a jump: bytes never captured */
            if (len == 0)
                continue;
            if (n == MODEL_PIECES)
                break;
            check(pd_recent_add(&r, offset, data + at, len, keep, NULL) >= 0, "add failed");
            model[n++] = (piece){offset, len, data + at};
            kept += len;
            if (kept >= keep + len || n - first > keep / PD_MIN_PIECE_BYTES) {
                while (n - first > 1) {
                    int64_t s = model[first].len;
                    if (kept - s < keep && n - first <= keep / PD_MIN_PIECE_BYTES)
                        break;
                    kept -= s;
                    first++;
                }
            }
            offset += len;
            at += (size_t)len;
        } else if (op < 250) { /* differs, at an offset up to 8 KiB back */
            if (len > (int64_t)(size - at))
                len = (int64_t)(size - at);
            int64_t back = (int64_t)(op - 160) * 97, lo = 0, hi = 0;
            int64_t where = offset - back, stop = where + len;
            const uint8_t *bytes = data + at;
            if (op & 1) { /* the kept bytes themselves, one of them changed when op & 2 */
                memcpy(copy, data + at, (size_t)len);
                for (int64_t k = first; k < n; k++)
                    for (int64_t j = 0; j < model[k].len; j++)
                        if (model[k].start + j >= where && model[k].start + j < stop)
                            copy[model[k].start + j - where] = model[k].data[j];
                if ((op & 2) && len > 0)
                    copy[(data[at - 2] * 31 + data[at - 1]) % len] ^= 1;
                bytes = copy;
            }
            int got = pd_recent_differs(&r, where, bytes, len, &lo, &hi);
            check(!got || (lo >= where && lo < hi && hi <= stop), "range outside the bytes");
            if (n - first < PD_MAX_BLOCKS_COMPARED) {
                int want = 0;
                int64_t wlo = 0, whi = 0;
                for (int64_t k = first; k < n && !want && len > 0; k++) {
                    int64_t a = model[k].start > where ? model[k].start : where;
                    int64_t z = model[k].start + model[k].len < stop
                                    ? model[k].start + model[k].len : stop;
                    if (a < z && memcmp(model[k].data + (a - model[k].start),
                                        bytes + (a - where), (size_t)(z - a)) != 0) {
                        want = 1;
                        wlo = a;
                        whi = z;
                    }
                }
                check(got == want && lo == wlo && hi == whi, "differs disagrees with the model");
            }
            at += (size_t)len;
        } else { /* clear */
            pd_recent_clear(&r);
            first = n;
            kept = 0;
        }
        check(r.count == n - first && r.kept == kept, "pieces or bytes kept differ");
    }
    pd_recent_free(&r);
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
    long r;
    uint64_t state = 27;
    for (int a = 1; a < argc && n < 256; a++) {
        FILE *f = fopen(argv[a], "rb");
        long len;
        if (f == NULL)
            continue;
        fseek(f, 0, SEEK_END);
        len = ftell(f);
        fseek(f, 0, SEEK_SET);
        if (len > (1 << 15))
            len = 1 << 15;
        seeds[n] = malloc((size_t)len + 1);
        sizes[n] = fread(seeds[n], 1, (size_t)len, f);
        fclose(f);
        LLVMFuzzerTestOneInput(seeds[n], sizes[n]);
        n++;
    }
    for (r = 0; (runs < 0 || r < runs) && n > 0; r++) {
        if (stop && (r & 4095) == 0 && time(NULL) >= stop)
            break; /* the time budget is spent */
        size_t k, size, start, flips;
        uint8_t *m;
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        k = (size_t)(state >> 33) % (size_t)n;
        start = sizes[k] > 1 ? (size_t)(state >> 17) % (sizes[k] - 1) : 0;
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        size = 1 + (size_t)(state >> 33) % 4096;
        if (start + size > sizes[k])
            size = sizes[k] > start ? sizes[k] - start : 0;
        if (size == 0)
            continue;
        m = malloc(size);
        memcpy(m, seeds[k] + start, size);
        flips = (state >> 40) % 6;
        for (size_t j = 0; j < flips; j++) {
            state = state * 6364136223846793005ULL + 1442695040888963407ULL;
            m[(state >> 33) % size] ^= (uint8_t)(1u << ((state >> 29) % 8));
        }
        LLVMFuzzerTestOneInput(m, size);
        free(m);
    }
    for (int j = 0; j < n; j++)
        free(seeds[j]);
    printf("recent_fuzz: %d seeds, %ld mutations, %ld executions, no fault\n", n, r, n + r);
    return 0;
}
#endif
