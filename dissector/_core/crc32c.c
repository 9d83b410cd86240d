/* CRC32C: software slicing-by-8 and the SSE4.2 instruction (see crc32c.h). */
#include "crc32c.h"

#define POLY 0x82f63b78u /* Castagnoli, reflected */

static uint32_t table[8][256];
static int ready;    /* table filled */
static int hardware = -1; /* -1: not checked yet, 0: software, 1: SSE4.2 */
static int forced_software;

static void init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t crc = i;
        for (int k = 0; k < 8; k++)
            crc = crc & 1 ? (crc >> 1) ^ POLY : crc >> 1;
        table[0][i] = crc;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
    ready = 1;
}

static uint32_t software(const pd_cursor *c, int64_t at, int64_t n, uint32_t crc) {
    while (n >= 8) {
        uint64_t w = pd_le64(c, at) ^ crc;
        crc = table[7][w & 0xff] ^ table[6][(w >> 8) & 0xff] ^ table[5][(w >> 16) & 0xff] ^
              table[4][(w >> 24) & 0xff] ^ table[3][(w >> 32) & 0xff] ^
              table[2][(w >> 40) & 0xff] ^ table[1][(w >> 48) & 0xff] ^ table[0][w >> 56];
        at += 8;
        n -= 8;
    }
    while (n-- > 0)
        crc = (crc >> 8) ^ table[0][(crc ^ pd_u8(c, at++)) & 0xff];
    return crc;
}

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#define PD_HAVE_SSE42 1

/* The SSE4.2 instruction takes 3 cycles and can start one a cycle: three streams at once
 * (LANE bytes each, then SHORT_LANE) keep it busy, and the three CRCs are joined by
 * shifting one over the next stream's length (multiplying by x^(8 * lane) mod P with the
 * tables below: the GF(2) matrix method of zlib's crc32_combine). */
#define LANE 8192
#define SHORT_LANE 256
static uint32_t shift_long[4][256], shift_short[4][256];
static int shifts_ready;

static uint32_t gf2_times(const uint32_t *mat, uint32_t vec) {
    uint32_t sum = 0;
    for (; vec; vec >>= 1, mat++)
        if (vec & 1)
            sum ^= *mat;
    return sum;
}

static void gf2_square(uint32_t *square, const uint32_t *mat) {
    for (int n = 0; n < 32; n++)
        square[n] = gf2_times(mat, mat[n]);
}

/* The operator appending `len` zero bytes to a CRC register (len a power of two >= 1). */
static void zeros_op(uint32_t *even, int64_t len) {
    uint32_t odd[32], row = 1;
    odd[0] = POLY; /* one zero bit */
    for (int n = 1; n < 32; n++, row <<= 1)
        odd[n] = row;
    gf2_square(even, odd); /* 2 zero bits */
    gf2_square(odd, even); /* 4 zero bits */
    for (;;) {
        gf2_square(even, odd); /* 8, 32, ... zero bits: len counts bytes from here */
        len >>= 1;
        if (len == 0)
            return;
        gf2_square(odd, even);
        len >>= 1;
        if (len == 0)
            break;
    }
    for (int n = 0; n < 32; n++)
        even[n] = odd[n];
}

static void zeros_table(uint32_t zeros[4][256], int64_t len) {
    uint32_t op[32];
    zeros_op(op, len);
    for (uint32_t n = 0; n < 256; n++)
        for (int k = 0; k < 4; k++)
            zeros[k][n] = gf2_times(op, n << (8 * k));
}

static uint32_t shift(uint32_t zeros[4][256], uint32_t crc) {
    return zeros[0][crc & 0xff] ^ zeros[1][(crc >> 8) & 0xff] ^ zeros[2][(crc >> 16) & 0xff] ^
           zeros[3][crc >> 24];
}

/* Three streams of `lane` bytes from `*at`, joined into crc. */
__attribute__((target("sse4.2"))) static uint32_t sse42_lanes(const pd_cursor *c, int64_t *at,
                                                                int64_t lane, uint32_t crc,
                                                                uint32_t zeros[4][256]) {
    uint64_t c0 = crc, c1 = 0, c2 = 0;
    int64_t p = *at, end = p + lane;
    for (; p < end; p += 8) {
        c0 = __builtin_ia32_crc32di(c0, pd_le64(c, p));
        c1 = __builtin_ia32_crc32di(c1, pd_le64(c, p + lane));
        c2 = __builtin_ia32_crc32di(c2, pd_le64(c, p + 2 * lane));
    }
    *at += 3 * lane;
    crc = shift(zeros, (uint32_t)c0) ^ (uint32_t)c1;
    return shift(zeros, crc) ^ (uint32_t)c2;
}

__attribute__((target("sse4.2"))) static uint32_t sse42(const pd_cursor *c, int64_t at,
                                                          int64_t n, uint32_t crc) {
    uint64_t crc64;
    if (n >= 3 * SHORT_LANE) {
        if (!shifts_ready) {
            zeros_table(shift_long, LANE);
            zeros_table(shift_short, SHORT_LANE);
            shifts_ready = 1;
        }
        for (; n >= 3 * LANE; n -= 3 * LANE)
            crc = sse42_lanes(c, &at, LANE, crc, shift_long);
        for (; n >= 3 * SHORT_LANE; n -= 3 * SHORT_LANE)
            crc = sse42_lanes(c, &at, SHORT_LANE, crc, shift_short);
    }
    crc64 = crc;
    while (n >= 8) {
        crc64 = __builtin_ia32_crc32di(crc64, pd_le64(c, at));
        at += 8;
        n -= 8;
    }
    crc = (uint32_t)crc64;
    while (n-- > 0)
        crc = __builtin_ia32_crc32qi(crc, (unsigned char)pd_u8(c, at++));
    return crc;
}
#endif

int pd_crc32c_hardware(void) {
    if (hardware < 0) {
#ifdef PD_HAVE_SSE42
        __builtin_cpu_init();
        hardware = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#else
        hardware = 0;
#endif
    }
    return hardware && !forced_software;
}

void pd_crc32c_software(int on) { forced_software = on; }

uint32_t pd_crc32c(const pd_cursor *c, int64_t at, int64_t n, int *ok) {
    if (!pd_need(c, at, n)) {
        *ok = 0;
        return 0;
    }
    *ok = 1;
#ifdef PD_HAVE_SSE42
    if (pd_crc32c_hardware())
        return ~sse42(c, at, n, 0xffffffffu);
#else
    (void)pd_crc32c_hardware();
#endif
    if (!ready)
        init();
    return ~software(c, at, n, 0xffffffffu);
}
