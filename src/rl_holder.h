/* rl_holder: who holds a lock. Each acquisition with the setting
 * holder_info on writes, in the same script as the lock key and with the
 * same PX, a companion key "<key>:holder" (named like the fence counter)
 * with this host, pid, application name (client_name), the wall-clock time
 * of the acquisition and the kind of lock: never the token. A release
 * deletes it with the lock and an extension gives it the lock's new TTL.
 * rl_lock_holder reads both keys from every node and reports the lock only
 * when a quorum holds the same value (compared by SHA1, so no token leaves
 * the nodes).
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef RL_HOLDER_H
#define RL_HOLDER_H

#include <stddef.h>
#include <stdint.h>

#include "rl_client.h"
#include "rl_lock.h"

/* The details as stored: "redlock1" and five fields, separated by 0x1f. */
#define RL_HOLDER_DETAILS_MAX 256
#define RL_HOLDER_TEXT_MAX 64   /* bytes of host and app kept */

/* This process's details, for an acquisition now, into buf; their length. */
size_t rl_holder_details(const rl_client *c, char *buf, size_t buflen);

typedef struct rl_holder {
    int held;               /* a quorum holds the same lock */
    int64_t ttl_ms;         /* the smallest PTTL over those nodes; -1: a key without expiry */
    int nnodes;
    int64_t *node_ids;      /* owned (rl_holder_clear): the nodes that hold it */
    int has_details;        /* the lock was taken with holder details */
    char host[RL_HOLDER_TEXT_MAX + 4];
    char app[RL_HOLDER_TEXT_MAX + 4];
    long long pid;
    long long since_ms;     /* Unix ms of the acquisition */
    char kind[16];
} rl_holder;

void rl_holder_clear(rl_holder *h);

/* Reads who holds res on every node (waiting for each answer or its
 * timeout). RL_OK with out filled (out->held 0: free, or not held on a
 * quorum), RL_NO_QUORUM when fewer than a quorum answered, RL_MISUSE for a
 * bad name or no nodes, RL_NOMEM. Takes c->mu. */
rl_status rl_lock_holder(rl_client *c, const char *res, size_t reslen, rl_holder *out, rl_outcome *o);

#endif
