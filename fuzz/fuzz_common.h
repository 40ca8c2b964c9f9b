/* fuzz_common: what every fuzz target shares: the libFuzzer entry point's
 * prototype and a hard failure that names the broken invariant.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef FUZZ_COMMON_H
#define FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An invariant that does not hold is a finding: report it and abort, so
 * libFuzzer keeps the input as a crash file. */
#define FUZZ_CHECK(cond, ...)                                                   \
    do {                                                                        \
        if (!(cond)) {                                                          \
            fprintf(stderr, "fuzz invariant failed at %s:%d: %s: ", __FILE__,  \
                    __LINE__, #cond);                                           \
            fprintf(stderr, __VA_ARGS__);                                       \
            fputc('\n', stderr);                                                \
            abort();                                                            \
        }                                                                       \
    } while (0)

/* A small reader of fuzz input, in the spirit of FuzzedDataProvider. */
typedef struct fuzz_in {
    const uint8_t *p;
    size_t n;
} fuzz_in;

static inline unsigned fuzz_byte(fuzz_in *in) {
    if (!in->n) return 0;
    in->n--;
    return *in->p++;
}

static inline uint64_t fuzz_u64(fuzz_in *in) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | fuzz_byte(in);
    return v;
}

/* Takes up to want bytes (fewer when the input runs out). */
static inline const uint8_t *fuzz_bytes(fuzz_in *in, size_t want, size_t *got) {
    const uint8_t *p = in->p;
    *got = want < in->n ? want : in->n;
    in->p += *got;
    in->n -= *got;
    return p;
}

#endif
