/* rl_floor: the keys of the fencing floors. A set of names taken at once
 * (rl_many) draws one fencing number for all its names and stores it in a
 * floor instead of in each name's counter <key>:fence; every fenced
 * acquisition of a name then takes the larger of its counter + 1 and its
 * floor + 1, so a name's numbers still only grow, and a set of n names
 * writes one key on a node instead of n. Names share a floor by hash tag,
 * so that a floor is in its keys' Redis Cluster slot, as their counters
 * are: a key with a hash tag {t} in its name has the floor
 * <key_prefix>RL_FLOOR_NAME{t}; a key whose tag is in the key prefix has
 * <key_prefix>RL_FLOOR_NAME, as every key without a tag has; and a key
 * whose tag begins in the prefix (a '{' the prefix leaves open) has its
 * own text up to the tag's '}', then RL_FLOOR_NAME.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef RL_FLOOR_H
#define RL_FLOOR_H

#include <stddef.h>

#define RL_FLOOR_NAME "redlock-fence-floor"

/* Room enough for the floor key of a key of keylen bytes under a prefix of
 * prefixlen bytes (at most the longer of the key and prefix + tag, plus
 * the floor's name). */
#define RL_FLOOR_KEY_MAX(prefixlen, keylen) ((prefixlen) + sizeof RL_FLOOR_NAME + (keylen) + 2)

/* Writes the floor key of key (prefix + name) to out, which has room for
 * RL_FLOOR_KEY_MAX(prefixlen, keylen) bytes; returns its length (no NUL is
 * written). */
size_t rl_floor_key(const char *prefix, size_t prefixlen, const char *key, size_t keylen, char *out);

/* 1 when the key prefix + res would be its own floor key (rl_floor_key),
 * which only a prefix that leaves a '{' open allows (name "t}"
 * RL_FLOOR_NAME under the prefix "p{"), else 0; -1 when out of memory.
 * Under any other prefix only names starting with RL_FLOOR_NAME would be,
 * and those are not looked at: the caller refuses them itself. */
int rl_floor_is_own(const char *prefix, size_t prefixlen, const char *res, size_t reslen);

/* The distinct floor keys of n keys, in the order first met: key[i],
 * len[i] for i < m. One owner: rl_floors_free. */
typedef struct rl_floors {
    int m;
    char *buf;
    const char **key;
    size_t *len;
} rl_floors;

/* 0, or -1 when out of memory (f is then empty). */
int rl_floors_make(rl_floors *f, const char *prefix, const char *const *keys, const size_t *keylens, int n);

void rl_floors_free(rl_floors *f);

#endif
