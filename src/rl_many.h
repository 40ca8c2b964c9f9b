/* rl_many: Redlock over several names at once. One token for the set; one
 * script per node sets every key or none, so the whole set costs one round
 * trip per node whatever its size. Quorum, validity, cleanup after a failed
 * attempt, retries and fencing are those of one lock (rl_lock.h): a node
 * counts as a yes only when it set every key; each key is an ordinary lock
 * key holding the token, so every name is released, extended and seen by
 * other Redlock clients as a lock of its own. Stateless, like rl_lock.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef RL_MANY_H
#define RL_MANY_H

#include <stddef.h>
#include <stdint.h>

#include "rl_client.h"
#include "rl_lock.h"
#include "rl_random.h"

/* At most this many names in one call. The script runs atomically on each
 * node, so nothing else is served there while it runs (about a millisecond
 * per thousand names on a 2-core machine); a set larger than this is better
 * protected by one coarser lock name. */
#define RL_MANY_MAX 10000

/* At most this many bytes of keys (key prefix included) in one call, so one
 * command stays a few megabytes on the wire and in each node's buffers. */
#define RL_MANY_MAX_BYTES (4 * 1024 * 1024)

/* Checks a set of names: 1..RL_MANY_MAX names, each as for one lock
 * (rl_lock_check_resource), no name twice, RL_MANY_MAX_BYTES of keys in all,
 * and, for a set to take (to_take) with fencing on, no name that is the
 * counter key of another (name:fence). RL_OK, RL_MISUSE with out->msg, or
 * RL_NOMEM. */
rl_status rl_many_check(const rl_client *c, int n, const char *const *res, const size_t *lens, int to_take,
                        rl_outcome *out);

/* rl_many_acquire and rl_many_release take names that passed
 * rl_many_check (with the same to_take): they do not look for names given
 * twice again. */

/* Takes every name, or none: a fresh token, one script per node, retried
 * after a random delay until wait_ms has passed. On RL_OK token holds the
 * token and, with fencing on, fences[k] each name's fencing number: the
 * set's one number, stored in its fencing floors (rl_floor.h), else 0. RL_REFUSED when a quorum answered but some name is held elsewhere. No
 * key of an attempt that failed is left on any node that answered (one
 * cleanup script per node). Caller must not hold c->mu. */
rl_status rl_many_acquire(rl_client *c, int n, const char *const *res, const size_t *lens, int64_t ttl_ms,
                          int64_t wait_ms, char token[RL_TOKEN_LEN + 1], long long *fences, rl_outcome *out);

/* Deletes, in one script per node, each name's key where it still holds
 * toks[k] (toklens[k] bytes). released[k] becomes 1 when name k was deleted
 * on a quorum, else 0. RL_OK when every name is decided (deleted, or not
 * ours on enough nodes to rule a quorum out); RL_NO_QUORUM when some name
 * is not (too few nodes answered), out->msg naming the failing nodes; the
 * flags of the decided names are set all the same. With wait_all, every
 * node's answer is waited for (each bounded by its timeout), so that each
 * name gets every vote it can; without, the call ends once a quorum of the
 * nodes has answered, as one lock's release does (the others' answers are
 * read later), for a caller that does not need each name's count. */
rl_status rl_many_release(rl_client *c, int n, const char *const *res, const size_t *lens, const char *const *toks,
                          const size_t *toklens, int wait_all, unsigned char *released, rl_outcome *out);

#endif
