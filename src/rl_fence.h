/* rl_fence: the write-back that makes fencing numbers strictly increasing.
 * Each fenced acquire increments a counter on every node and takes the
 * highest answer of the quorum; every node that answered yes with a lower
 * number, in time or late, gets its counter raised to that highest number.
 * The number may be handed out only once a quorum stores it (then any later
 * majority overlaps one of them and draws a larger one); the caller checks
 * that with the count rl_fence_writeback returns.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef RL_FENCE_H
#define RL_FENCE_H

#include <stddef.h>
#include <stdint.h>

#include "rl_client.h"
#include "rl_round.h"

/* After a successful fenced round r: raises lagging counters of the nodes
 * that said yes (waiting, bounded by their timeouts) and remembers the
 * round so late yes replies get the same. Returns how many nodes are known
 * to store fence now (said yes with it, or confirmed the write-back); when
 * a write-back failed, why describes it. Caller holds c->mu. */
int rl_fence_writeback(rl_client *c, const rl_round *r, const char *fkey, size_t fkeylen, long long fence,
                       int64_t fence_ttl_ms, char *why, size_t whylen);

/* A late yes (value) to fenced acquisition op from node: queues the
 * write-back when value is below that acquisition's number. */
void rl_fence_late_yes(rl_client *c, rl_node *node, uint64_t op, long long value);

#endif
