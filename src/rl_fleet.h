/* rl_fleet: what every node holds under the key prefix, read with SCAN:
 * the locks (exclusive, shared, names of a set, other clients' locks) and
 * the waiters (the live entries of a fair queue, writer-waiting markers,
 * subscribers to a name's release channel), for the tables of who holds and who waits across the
 * fleet. Read only: nothing on a node is changed, and no token leaves it
 * (a value is known here by its SHA1, computed on the node).
 *
 * Each node is read in SCAN steps of RL_FLEET_BATCH keys, one script call
 * per step that classifies the keys SCAN returned (RL_SCRIPT_FLEET_SCAN);
 * all nodes are stepped at once, one round per step, each step bounded by
 * the node's timeout. A node stops at the end of its keys, after max_keys
 * keys (the COUNTs of its steps add up to that), or at its first failure;
 * the read is then incomplete and says why. A step's time on the node
 * grows with RL_FLEET_BATCH and RL_FLEET_HOLDERS_MAX: measured on a loaded
 * 2-core machine, 0.15 ms for 100 keys that are no locks, 0.6 ms for 100
 * locks with holder details, 4 to 5 ms for 100 shared locks of 100
 * holders each (20 listed), so a step stays far below the default 50 ms
 * timeout (with 250 keys and 100 holders listed it took 41 ms).
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef RL_FLEET_H
#define RL_FLEET_H

#include <stddef.h>
#include <stdint.h>

#include "rl_client.h"
#include "rl_lock.h"

#define RL_FLEET_BATCH 100              /* SCAN COUNT of one step */
#define RL_FLEET_MAX_KEYS 10000         /* keys looked at per node, by default */
#define RL_FLEET_MAX_KEYS_LIMIT 10000000 /* the largest max_keys taken */
#define RL_FLEET_ENTRIES_MAX 100000     /* what is gathered per read (a lock key, a shared
                                           holder or a waiter trace, on one node) */
#define RL_FLEET_NAMES_MAX (32 << 20)   /* bytes of names gathered per read */
#define RL_FLEET_HOLDERS_MAX 20         /* shared holders, and fair queue entries, listed
                                           per name and node */

typedef enum {
    RL_FLEET_EXCLUSIVE = 1, /* a string holding a token of ours, or of 32 hex digits as node-redlock's */
    RL_FLEET_SET,           /* a token of ours, a name of a set taken at once (redlock_acquire_many) */
    RL_FLEET_SHARED,        /* one holder of a shared lock of ours */
    RL_FLEET_FOREIGN,       /* a string holding a token as other clients write them */
} rl_fleet_kind;

typedef enum {
    RL_FLEET_WRITER = 1,    /* a writer-waiting marker (rl_shared.h) */
    RL_FLEET_SUBSCRIBED,    /* connections subscribed to the name's release channel */
    RL_FLEET_QUEUED,        /* one live entry of the name's fair queue (rl_queue.h) */
} rl_fleet_wait_kind;

/* One holder of one name: the nodes whose key for the name holds the same
 * value (an exclusive lock's token, a shared holder's token), compared by
 * its SHA1. */
typedef struct rl_fleet_lock {
    const char *res;        /* the name, key prefix taken off (owned by the rl_fleet) */
    size_t reslen;
    int kind;               /* rl_fleet_kind */
    int nodes;              /* how many nodes hold it */
    int quorum;             /* how many it needs: a majority, or a shared lock's
                               holder-limit quorum (rl_shared_quorum) */
    int on_quorum;          /* nodes >= quorum */
    int64_t *node_ids;      /* nodes entries (owned by the rl_fleet) */
    int64_t ttl_ms;         /* the least left over those nodes; -1: none read */
    long long holders;      /* shared: live holders of the name (fewest over its
                               nodes); else -1 */
    long long max_holders;  /* shared: its holder limit (0: none); else -1 */
    int has_details;        /* the holder wrote its details (holder_info) */
    rl_holder_entry d;      /* then: host, app, pid, since_ms */
    int holder_id;          /* 1, 2, ...: the same for every row of one token */
} rl_fleet_lock;

/* One trace of waiters on one name, or one waiter of its fair queue: an
 * entry (RL_QUEUE_ID_HEX random hex digits, ':', 'x' or 's'; no token, no
 * secret) live on the nodes listed. The queue's order is by the wall-clock
 * ms each wait began, then by entry, the same on every node; an entry
 * counts in it when it is live on any node. The first RL_FLEET_HOLDERS_MAX
 * of that order are rows: their positions are exact, since every entry
 * ahead of one of them is among the first RL_FLEET_HOLDERS_MAX on each
 * node that holds both. */
typedef struct rl_fleet_waiter {
    const char *res;
    size_t reslen;
    int kind;               /* rl_fleet_wait_kind */
    long long waiters;      /* RL_FLEET_SUBSCRIBED: the most on one node; RL_FLEET_QUEUED:
                               the name's queued waiters, the most live on one node or
                               the entries seen when more; -1: not known */
    int nodes;
    int64_t *node_ids;
    int64_t ttl_ms;         /* RL_FLEET_WRITER: the least left over its nodes; else -1 */
    int position;           /* RL_FLEET_QUEUED: 1 for the head; else 0 */
    int64_t since_ms;       /* RL_FLEET_QUEUED: wall-clock ms its wait began; else -1 */
    char entry[24];         /* RL_FLEET_QUEUED: the entry, "<16 hex>:x" or ":s"; else "" */
    int exclusive;          /* RL_FLEET_QUEUED: it waits for the lock exclusively ('x') */
    int more;               /* RL_FLEET_QUEUED: the name's last row, and waiters are not
                               all listed */
} rl_fleet_waiter;

typedef struct rl_fleet {
    rl_fleet_lock *locks;   /* by name, then holder_id */
    int nlocks;
    rl_fleet_waiter *waiters; /* by name, then kind */
    int nwaiters;
    int complete;           /* every node read to the end of its keys */
    char why[RL_ERR_MAX];   /* when not: which nodes, and why */
    long long keys;         /* keys SCAN returned, over all nodes */
    int nodes_read;         /* nodes read to the end, or to max_keys */
    int cut;                /* some node has more keys than max_keys */
    int64_t max_keys;       /* the limit the read used */
    /* owned storage the rows point into */
    char *names;
    int64_t *ids;
} rl_fleet;

/* Reads every node (max_keys 0: RL_FLEET_MAX_KEYS). RL_OK with out
 * filled, complete or not; RL_NO_QUORUM when no node could be read at all
 * (o->msg names the nodes and why), RL_MISUSE for a max_keys out of range
 * or no nodes, RL_INTERRUPTED when the client's cancel callback said stop
 * between two steps, RL_NOMEM. Takes c->mu for each step, and lets it go
 * between steps. out is to be freed with rl_fleet_free whatever the
 * status. */
rl_status rl_fleet_read(rl_client *c, int64_t max_keys, rl_fleet *out, rl_outcome *o);

void rl_fleet_free(rl_fleet *f);

#endif
