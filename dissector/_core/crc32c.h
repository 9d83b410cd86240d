/* CRC32C (Castagnoli), the checksum of Pulsar payload frames.
 *
 * Input: a byte range read through the cursor. Output: its CRC32C (the value the
 * `crc32c` package gives). Rule: SSE4.2's crc32 instruction where the CPU has it (checked
 * once at run time; three streams at once on long ranges, joined by shift tables), else a
 * software slicing-by-8 table; both give the same value
 * (tests/core/test_frames_differential.py compares them with the package).
 */
#ifndef PD_CRC32C_H
#define PD_CRC32C_H

#include <stdint.h>

#include "cursor.h"

/* CRC32C of [at, at + n) of `c`, or 0 with *ok = 0 when the range is not inside it. */
uint32_t pd_crc32c(const pd_cursor *c, int64_t at, int64_t n, int *ok);

/* Force the software path (1) or let the CPU decide (0): for tests and the fuzz harness. */
void pd_crc32c_software(int on);

/* 1 when the hardware path is in use. */
int pd_crc32c_hardware(void);

#endif
