/* Fuzz entry point of the compiled framing stage (dissector/_core/frames.c), no Python.
 *
 * Input: any bytes. The first byte picks the frame size limit (the default or a small one),
 * the batch size and the CRC32C path (SSE4.2 or the software table); the rest is a stream.
 * Output: nothing; the sanitizers (address, undefined) and the checks below report faults:
 * the scan stops inside the buffer and never goes back, each frame starts where the last
 * ended and lies inside the buffer with its topic, metadata and payload inside it, and the
 * checksum both CRC32C paths compute is the same.
 * Rule: as walk_fuzz.c: libFuzzer calls LLVMFuzzerTestOneInput; with gcc, `main` runs each
 * file named and PD_FUZZ_RUNS random mutations of them. After a frame handed back to
 * Python the scan resumes one byte further, as a resync may, so every offset gets scanned.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../dissector/_core/crc32c.h"
#include "../../dissector/_core/fields.h"
#include "../../dissector/_core/frames.h"

#define ROWS 64

static void check(int ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "frames_fuzz: %s\n", what);
        abort();
    }
}

static int inside(int64_t at, int64_t len, int64_t lo, int64_t hi) {
    return at >= lo && len >= 0 && at + len <= hi;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int64_t cols[PD_FC_NCOLS][ROWS];
    pd_frames out;
    pd_cursor buf;
    int64_t pos = 0, max_size, rows;
    uint8_t mode, *copy;
    uint64_t only;
    if (size < 1)
        return 0;
    mode = data[0];
    max_size = mode & 1 ? 8 + (mode >> 2) * 4 : 5 * 1024 * 1024 + 10 * 1024;
    rows = 1 + (mode >> 3) % ROWS;
    pd_crc32c_software(mode & 2);
    copy = malloc(size - 1 ? size - 1 : 1); /* exactly the bytes scanned (ASan sees past it) */
    memcpy(copy, data + 1, size - 1);
    buf.base = copy;
    buf.len = (int64_t)size - 1;
    for (int k = 0; k < PD_FC_NCOLS; k++)
        out.col[k] = cols[k];
    out.cap = rows;
    /* odd sizes: the frame runs' scan (SEND, SEND_RECEIPT, MESSAGE, ACK; frames.c run_frame) */
    only = size & 1 ? (1ull << PD_CMD_SEND | 1ull << PD_CMD_SEND_RECEIPT | 1ull << PD_CMD_MESSAGE |
                       1ull << PD_CMD_ACK)
                    : PD_ANY_TYPE;
    for (int round = 0; round < 4096 && pos <= buf.len; round++) {
        int stop = -1;
        int64_t before = pos, end = pos;
        out.n = 0;
        pos = pd_scan_frames(&buf, pos, max_size, only, &out, &stop);
        check(pos >= before && pos <= buf.len, "scan stopped outside the buffer");
        check(stop >= PD_STOP_END && stop <= PD_STOP_FULL, "stop reason");
        for (int64_t i = 0; i < out.n; i++) {
            int64_t at = cols[PD_FC_OFFSET][i], fend = at + 4 + cols[PD_FC_TOTAL_SIZE][i];
            check(at == end && fend <= buf.len, "frame not where the last ended");
            check(cols[PD_FC_TOTAL_SIZE][i] <= max_size, "frame above the limit");
            check(only == PD_ANY_TYPE || (only >> cols[PD_FC_COMMAND_TYPE][i] & 1 &&
                                          cols[PD_FC_CHECKSUM][i] != PD_CHECKSUM_INVALID),
                  "a run's scan took a frame outside its types, or a bad checksum");
            check(only == PD_ANY_TYPE || cols[PD_FC_COMMAND_TYPE][i] != PD_CMD_ACK ||
                      (!(cols[PD_FC_PRESENT][i] & PD_HAS_REQUEST_ID) &&
                       cols[PD_FC_NUM_MESSAGES][i] == 1 &&
                       (cols[PD_FC_PRESENT][i] & PD_HAS_CUMULATIVE ||
                        !(cols[PD_FC_PRESENT][i] & PD_HAS_ACK_SET))),
                  "a run's scan took an ACK its state rule does not apply");
            if (cols[PD_FC_PRESENT][i] & PD_HAS_TOPIC)
                check(inside(cols[PD_FC_TOPIC_AT][i], cols[PD_FC_TOPIC_LEN][i], at, fend),
                      "topic outside its frame");
            if (cols[PD_FC_PRESENT][i] & PD_HAS_PAYLOAD)
                check(inside(cols[PD_FC_META_AT][i], cols[PD_FC_META_LEN][i], at, fend) &&
                          inside(cols[PD_FC_PAYLOAD_AT][i], cols[PD_FC_PAYLOAD_LEN][i], at, fend),
                      "metadata or payload outside its frame");
            if (cols[PD_FC_CHECKSUM][i] >= PD_CHECKSUM_VALID) {
                int ok, other = !(mode & 2);
                int64_t from = cols[PD_FC_META_AT][i] - 4;
                uint32_t again;
                pd_crc32c_software(other);
                again = pd_crc32c(&buf, from, fend - from, &ok);
                pd_crc32c_software(mode & 2);
                check(ok && again == (uint32_t)cols[PD_FC_CRC_COMPUTED][i], "CRC32C paths differ");
            }
            end = fend;
        }
        check(pos == end, "scan position is not the last frame's end");
        if (stop == PD_STOP_END || stop == PD_STOP_MORE)
            break;
        if (stop == PD_STOP_PYTHON)
            pos++; /* as a resync may: try the next offset */
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
        if (len > (1 << 16))
            len = 1 << 16;
        seeds[n] = malloc((size_t)len + 1);
        seeds[n][0] = 0;
        sizes[n] = fread(seeds[n] + 1, 1, (size_t)len, f) + 1;
        fclose(f);
        for (int m = 0; m < 256; m += 17) {
            seeds[n][0] = (uint8_t)m;
            LLVMFuzzerTestOneInput(seeds[n], sizes[n]);
            executions++;
        }
        n++;
    }
    for (r = 0; (runs < 0 || r < runs) && n > 0; r++) {
        if (stop && (r & 4095) == 0 && time(NULL) >= stop)
            break; /* the time budget is spent */
        size_t k, size, start, flips;
        uint8_t *m;
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        k = (size_t)(state >> 33) % (size_t)n;
        /* a window of the seed (from byte 1: byte 0 is the mode), up to 2 KiB */
        start = sizes[k] > 2 ? 1 + (size_t)(state >> 17) % (sizes[k] - 1) : 1;
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        size = 1 + (size_t)(state >> 33) % 2048;
        if (start + size - 1 > sizes[k])
            size = sizes[k] - start + 1;
        m = malloc(size);
        m[0] = (uint8_t)(state >> 24);
        memcpy(m + 1, seeds[k] + start, size - 1);
        flips = size > 1 ? (state >> 40) % 6 : 0;
        for (size_t j = 0; j < flips; j++) {
            state = state * 6364136223846793005ULL + 1442695040888963407ULL;
            m[1 + (state >> 33) % (size - 1)] ^= (uint8_t)(1u << ((state >> 29) % 8));
        }
        LLVMFuzzerTestOneInput(m, size);
        free(m);
    }
    for (int j = 0; j < n; j++)
        free(seeds[j]);
    printf("frames_fuzz: %d seeds, %ld mutations, %ld executions, no fault\n", n, r,
           executions + r);
    return 0;
}
#endif
