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
__attribute__((target("sse4.2"))) static uint32_t sse42(const pd_cursor *c, int64_t at,
                                                          int64_t n, uint32_t crc) {
    uint64_t crc64 = crc;
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
