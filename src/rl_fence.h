/* rl_fence: the write-back that makes fencing numbers strictly increasing.
 * Each fenced acquire increments a counter on every node and takes the
 * highest answer of the quorum; every node that answered yes with a lower
 * number, in time or late, gets its counter raised to that highest number.
 * The number may be handed out only once a quorum stores it (then any later
 * majority overlaps one of them and draws a larger one); the caller checks
 * that with how many nodes confirm the write-back round rl_lock runs with
 * the command made here; replies that come late are written back from
 * rl_round through rl_fence_late_yes.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef RL_FENCE_H
#define RL_FENCE_H

#include <stddef.h>
#include <stdint.h>

#include "rl_client.h"

/* The write-back command for counter fkey (EVAL script 1 fkey ttl fence);
 * argv points into the struct and at fkey, which must outlive it. */
#define RL_FENCE_ARGC 6
typedef struct rl_fence_cmd {
    const char *argv[RL_FENCE_ARGC];
    size_t lens[RL_FENCE_ARGC];
    char num[32], ttl[32];
} rl_fence_cmd;

void rl_fence_cmd_make(rl_fence_cmd *w, const char *fkey, size_t fkeylen, long long fence, int64_t fence_ttl_ms);

/* Remembers fenced acquisition op (its counter key, number and counter
 * TTL) among the client's last RL_RECENT_FENCED, so a late yes to it is
 * written back too. On OOM only late write-backs are lost. */
void rl_fence_remember(rl_client *c, uint64_t op, const char *fkey, size_t fkeylen, long long fence,
                       int64_t fence_ttl_ms);

/* A late yes (value) to fenced acquisition op from node: queues the
 * write-back when value is below that acquisition's number. */
void rl_fence_late_yes(rl_client *c, rl_node *node, uint64_t op, long long value);

#endif
