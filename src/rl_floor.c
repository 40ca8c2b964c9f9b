/* rl_floor: the keys of the fencing floors (see rl_floor.h).
 * SPDX-License-Identifier: BSD-3-Clause */
#include "rl_floor.h"

#include <stdlib.h>
#include <string.h>

#include "rl_nameindex.h"

size_t rl_floor_key(const char *prefix, size_t prefixlen, const char *key, size_t keylen, char *out) {
    size_t n = 0;
    memcpy(out, prefix, prefixlen);
    n += prefixlen;
    memcpy(out + n, RL_FLOOR_NAME, sizeof RL_FLOOR_NAME - 1);
    n += sizeof RL_FLOOR_NAME - 1;
    /* Redis Cluster hashes the text between the first '{' and the first '}'
     * after it, when that text is not empty; else the whole key. */
    const char *open = memchr(key, '{', keylen);
    if (!open) return n;
    size_t from = (size_t)(open - key) + 1;
    const char *close = memchr(key + from, '}', keylen - from);
    if (!close || close == key + from) return n;
    size_t taglen = (size_t)(close - (key + from));
    out[n++] = '{';
    memcpy(out + n, key + from, taglen);
    n += taglen;
    out[n++] = '}';
    return n;
}

static const char *floor_at(const void *items, int i, size_t *len) {
    const rl_floors *f = items;
    *len = f->len[i];
    return f->key[i];
}

void rl_floors_free(rl_floors *f) {
    free(f->buf);
    free(f->key);
    free(f->len);
    memset(f, 0, sizeof *f);
}

int rl_floors_make(rl_floors *f, const char *prefix, const char *const *keys, const size_t *keylens, int n) {
    memset(f, 0, sizeof *f);
    size_t pl = strlen(prefix), total = 0;
    for (int i = 0; i < n; i++) total += RL_FLOOR_KEY_MAX(pl, keylens[i]);
    size_t un = n > 0 ? (size_t)n : 1;
    f->buf = malloc(total ? total : 1);
    f->key = malloc(un * sizeof *f->key);
    f->len = malloc(un * sizeof *f->len);
    if (!f->buf || !f->key || !f->len) {
        rl_floors_free(f);
        return -1;
    }
    rl_nameindex x = {0};
    char *p = f->buf;
    for (int i = 0; i < n; i++) {
        size_t len = rl_floor_key(prefix, pl, keys[i], keylens[i], p);
        if (rl_nameindex_find(&x, f, f->m, floor_at, p, len) >= 0) continue;
        f->key[f->m] = p;
        f->len[f->m++] = len;
        rl_nameindex_appended(&x, f, f->m, floor_at);
        p += len;
    }
    rl_nameindex_free(&x);
    return 0;
}
