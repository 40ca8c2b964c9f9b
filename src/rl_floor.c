/* rl_floor: the keys of the fencing floors (see rl_floor.h).
 * SPDX-License-Identifier: BSD-3-Clause */
#include "rl_floor.h"

#include <stdlib.h>
#include <string.h>

#include "rl_nameindex.h"

size_t rl_floor_key(const char *prefix, size_t prefixlen, const char *key, size_t keylen, char *out) {
    /* Redis Cluster hashes the text between the first '{' and the first '}'
     * after it, when that text is not empty; else the whole key. */
    const char *open = memchr(key, '{', keylen), *close = NULL;
    if (open) close = memchr(open + 1, '}', keylen - (size_t)(open + 1 - key));
    if (open && close == open + 1) close = NULL; /* an empty tag: the whole key is hashed */
    size_t n = 0;
    if (close && (size_t)(open - key) < prefixlen && (size_t)(close - key) >= prefixlen) {
        /* The tag starts in the prefix and ends in the name: the key up to
         * the tag's end, then the floor's name, has the same tag. */
        n = (size_t)(close - key) + 1;
        memcpy(out, key, n);
    } else {
        memcpy(out, prefix, prefixlen);
        n = prefixlen;
    }
    memcpy(out + n, RL_FLOOR_NAME, sizeof RL_FLOOR_NAME - 1);
    n += sizeof RL_FLOOR_NAME - 1;
    if (close && (size_t)(open - key) >= prefixlen) {
        /* A tag in the name (the prefix has no '{'): appended as it is. */
        size_t taglen = (size_t)(close - open) + 1;
        memcpy(out + n, open, taglen);
        n += taglen;
    }
    /* A tag inside the prefix is the floor's too. */
    return n;
}

int rl_floor_is_own(const char *prefix, size_t prefixlen, const char *res, size_t reslen) {
    /* Under any other prefix a floor key is the prefix, RL_FLOOR_NAME and
     * maybe a tag, so only a name starting with RL_FLOOR_NAME can be its
     * own floor: the callers refuse those anyway, and skip this work. */
    const char *open = memchr(prefix, '{', prefixlen);
    if (!open || memchr(open + 1, '}', prefixlen - (size_t)(open + 1 - prefix))) return 0;
    size_t keylen = prefixlen + reslen, room = keylen + RL_FLOOR_KEY_MAX(prefixlen, keylen);
    char small[512], *key = room <= sizeof small ? small : malloc(room);
    if (!key) return -1;
    memcpy(key, prefix, prefixlen);
    memcpy(key + prefixlen, res, reslen);
    char *floor = key + keylen;
    size_t n = rl_floor_key(prefix, prefixlen, key, keylen, floor);
    int own = n == keylen && memcmp(floor, key, n) == 0;
    if (key != small) free(key);
    return own;
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
