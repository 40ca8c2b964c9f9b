/* rl_random: tokens and jitter from getrandom(2) (see rl_random.h).
 * SPDX-License-Identifier: BSD-3-Clause */
#include "rl_random.h"

#include <errno.h>
#include <sys/random.h>

static int fill_random(void *buf, size_t len) {
    unsigned char *p = buf;
    while (len > 0) {
        ssize_t n = getrandom(p, len, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int rl_token_new(char out[RL_TOKEN_LEN + 1]) {
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[RL_TOKEN_BYTES];
    out[0] = '\0';
    if (fill_random(raw, sizeof raw) != 0) return -1;
    for (size_t i = 0; i < sizeof raw; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[RL_TOKEN_LEN] = '\0';
    return 0;
}

int64_t rl_random_between(int64_t lo, int64_t hi) {
    uint64_t r;
    if (hi <= lo || fill_random(&r, sizeof r) != 0) return lo;
    return lo + (int64_t)(r % (uint64_t)(hi - lo + 1));
}
