/* rl_random: tokens and jitter from getrandom(2) (see rl_random.h).
 * SPDX-License-Identifier: BSD-3-Clause */
#include "rl_random.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/random.h>

#include "rl_proc.h"

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

/* Bytes from getrandom taken a block at a time, so a token costs no system
 * call: one getrandom per 32 tokens. The pool lives in memory a forked
 * child sees as zeros (its mutex unlocked, nothing left), so parent and
 * child never hand out the same bytes; bytes are wiped once given out.
 * Where the kernel cannot wipe on fork, every token calls getrandom. */
typedef struct pool {
    pthread_mutex_t mu; /* all-zero bytes: an unlocked default mutex on glibc */
    size_t left;        /* unused bytes, at the end of bytes[] */
    unsigned char bytes[RL_TOKEN_BYTES * 32];
} pool;

static pool *the_pool;
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;

static void pool_setup(void) {
    pool *p = rl_proc_wiped_on_fork(sizeof(pool) > 4096 ? sizeof(pool) : 4096);
    if (p && pthread_mutex_init(&p->mu, NULL) != 0) p = NULL;
    the_pool = p;
}

static int token_bytes(unsigned char raw[RL_TOKEN_BYTES]) {
    pthread_once(&pool_once, pool_setup);
    pool *p = the_pool;
    if (!p) return fill_random(raw, RL_TOKEN_BYTES);
    int rc = 0;
    pthread_mutex_lock(&p->mu);
    if (p->left < RL_TOKEN_BYTES) {
        rc = fill_random(p->bytes, sizeof p->bytes);
        p->left = rc == 0 ? sizeof p->bytes : 0;
    }
    if (rc == 0) {
        unsigned char *src = p->bytes + sizeof p->bytes - p->left;
        memcpy(raw, src, RL_TOKEN_BYTES);
        memset(src, 0, RL_TOKEN_BYTES);
        p->left -= RL_TOKEN_BYTES;
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

static const char hex[] = "0123456789abcdef";

static void to_hex(char *out, const unsigned char *raw, size_t n) {
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
}

int rl_token_new(char out[RL_TOKEN_LEN + 1], const char *pub) {
    unsigned char raw[RL_TOKEN_BYTES];
    out[0] = '\0';
    if (token_bytes(raw) != 0) return -1;
    memcpy(out, pub, RL_TOKEN_PUBLIC_LEN);
    to_hex(out + RL_TOKEN_PUBLIC_LEN, raw, sizeof raw);
    out[RL_TOKEN_LEN] = '\0';
    return 0;
}

int rl_random_hex(char *out, size_t n) {
    unsigned char raw[32];
    while (n > 0) {
        size_t k = n < sizeof raw ? n : sizeof raw;
        if (fill_random(raw, k) != 0) return -1;
        to_hex(out, raw, k);
        out += 2 * k;
        n -= k;
    }
    return 0;
}

int64_t rl_random_between(int64_t lo, int64_t hi) {
    uint64_t r;
    if (hi <= lo || fill_random(&r, sizeof r) != 0) return lo;
    return lo + (int64_t)(r % (uint64_t)(hi - lo + 1));
}
