/* rl_shared: shared locks and holder limits over a client's nodes.
 *
 * A shared lock lives on the same key name as the exclusive lock, as a
 * sorted set of holders (token -> expiry on the node's own clock), so a
 * plain `SET key token NX` of any Redlock client fails on it and our
 * shared acquire refuses a key that holds a string: the two kinds exclude
 * each other both ways. Each node admits at most max_holders live holders;
 * a holder counts once it is in on rl_shared_quorum nodes, the least q with
 * (k+1)·q > k·N, so k+1 holders can never all be counted. An exclusive
 * acquirer that waits leaves a short-lived marker (<key>:writer-waiting)
 * that makes nodes refuse new shared holders while it lives.
 * Stateless, as rl_lock: rl_session keeps what an owner holds.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef RL_SHARED_H
#define RL_SHARED_H

#include <stdint.h>

#include "rl_lock.h"


/* Yes votes a shared hold with max_holders k (0: no limit) needs on n
 * nodes: a majority for k <= 1 or no limit, else k*n/(k+1) + 1. */
int rl_shared_quorum(int n, int64_t k);

/* The same for this client: unsafe_test_quorum, when set, wins. */
int rl_shared_client_quorum(const rl_client *c, int64_t k);

/* Takes a shared hold: a fresh token added on every node at once, retried
 * after a random delay (or a release message) until wait_ms has passed.
 * RL_OK with token set; RL_REFUSED when a quorum answered but the name is
 * held exclusively, full, or an exclusive acquirer waits; RL_NO_QUORUM
 * with the nodes' errors otherwise (a max_holders other than the current
 * holders' is such an error). Caller must not hold c->mu. */
rl_status rl_shared_acquire(rl_client *c, const char *res, size_t reslen, int64_t ttl_ms, int64_t wait_ms,
                            int64_t max_holders, char token[RL_TOKEN_LEN + 1], rl_outcome *out);

/* Gives the hold a new expiry ttl_ms from now on each node where it is
 * still live; never brings back an expired one. As rl_lock_extend. */
rl_status rl_shared_extend(rl_client *c, const char *res, size_t reslen, const char *token, size_t toklen,
                           int64_t ttl_ms, int64_t max_holders, rl_outcome *out);

#endif
