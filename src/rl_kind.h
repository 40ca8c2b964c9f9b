/* rl_kind: what a command sent to a node is. Every reply is matched to its
 * command by a tag carrying one of these (rl_conn.h), and classified by it
 * (rl_vote.h); kept apart so neither needs the client to know them.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef RL_KIND_H
#define RL_KIND_H

enum {
    RL_K_AUTH = 1,    /* connection set-up */
    RL_K_SELECT,
    RL_K_INFO,
    RL_K_ROLE,
    RL_K_ACQUIRE,     /* SET key token NX PX ttl */
    RL_K_ACQUIRE_FENCED, /* the same plus INCR of the fence counter, one script */
    RL_K_RELEASE,     /* compare-and-delete script */
    RL_K_EXTEND,      /* compare-and-pexpire script */
    RL_K_WRITEBACK,   /* raise a lagging fence counter */
    RL_K_CLEANUP,     /* compare-and-delete nobody waits for */
    RL_K_CHECK,       /* compare-and-read-PTTL script: is it still ours, for how long */
    RL_K_ACQUIRE_SHARED, /* add a shared holder (rl_shared.h) */
    RL_K_MARK,        /* writer-waiting marker; nothing is decided on it */
    RL_K_ACQUIRE_MANY, /* several keys set at once, or none (rl_many.h) */
    RL_K_RELEASE_MANY, /* several compare-and-deletes at once, one answer per key */
    RL_K_NODECHECK,   /* connection set-up: INFO memory / INFO cluster (rl_nodecheck.h) */
    RL_K_PING,        /* PING (redlock_ping) */
    RL_K_HOLDER,      /* read lock and holder details (rl_lock_holder.c) */
    RL_K_EXTEND_MANY, /* compare-and-pexpire of many keys, one script: an answer per key */
    RL_K_ACL,         /* connection set-up, the last: which commands the user may run (rl_acl.h) */
    RL_K_FLEET,       /* one SCAN step and what its keys hold, read only (rl_fleet.h) */
    RL_K_QUEUE,       /* a fair waiter's turn: enter or refresh its queue entry (rl_queue.h) */
    RL_K_DETAILS,     /* a connection's holder details, ahead of a lock command (rl_lock_holder.c) */
};

/* 1 for the set-up commands a new connection sends before any lock
 * command, and the holder details: their answers are no votes. */
#define RL_KIND_IS_SETUP(kind) \
    (((kind) >= RL_K_AUTH && (kind) <= RL_K_ROLE) || (kind) == RL_K_NODECHECK || (kind) == RL_K_ACL || \
     (kind) == RL_K_DETAILS)

#endif
