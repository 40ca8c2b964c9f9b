/* rl_queue: fair, herd-free waiting on a name (the setting `fair`).
 *
 * A waiting acquire of a fair connection puts an entry for itself in the
 * name's queue on every node at once (RL_SCRIPT_QUEUE_TURN, rl_scripts.h),
 * ordered by the wall-clock time its wait began and a random id, so every
 * node that holds the entries puts them in the same order. It tries to
 * take the lock (the plain acquire, on a quorum, exactly as without a
 * queue: the queue only says who may try) when it is at the head (a shared
 * waiter: no exclusive one ahead) on a majority of the nodes, or when its
 * entry reached fewer than a majority: then it leaves the queue again and
 * waits as a waiter that does not queue. Otherwise it waits for a message
 * on its own channel, which a fair release publishes to only for the
 * waiters at the head, so a release wakes the next waiter and no other.
 * Each turn renews the entry's lease (queue_lease_ms); a waiter that
 * stops taking turns (killed, stopped, cut off) is dropped by the next
 * turn or release that reads the queue once its lease has ended, and the
 * waiters behind it find that at their next turn: a waiter not at the
 * head takes one every queue_lease_ms / 5 to / 4, the head every retry
 * delay.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef RL_QUEUE_H
#define RL_QUEUE_H

#include <stddef.h>
#include <stdint.h>

#include "rl_client.h"
#include "rl_scripts.h"
#include "rl_vote.h"

typedef struct rl_queue {
    int on;                 /* this wait queues: fair on, a wait (wait_ms > 0) */
    int head;               /* the last turn let it try, on a majority */
    int fallback;           /* the last turn reached fewer than a majority */
    int entered;            /* a turn went out: the entry may be on a node */
    int subscribed;         /* 1: its channel was subscribed to (rl_wait); 2: asked, but no
                               node confirmed: asked again at the next pause */
    long long ahead;        /* the least count of entries ahead at the last turn (0: the head) */
    int64_t turn_us;        /* when the last turn ran (rl_now_us) */
    int turns;              /* turns taken (rounds run) */
    char member[RL_QUEUE_ID_HEX + 3]; /* the entry: random hex, ':', 'x' or 's' */
    char since[24];         /* the wall-clock ms its wait began, as digits */
    /* the lock key (the caller's), the queue's two keys and the channel,
     * one allocation (names) */
    const char *key;
    size_t keylen;
    char *names, *qkey, *lkey, *chan;
    size_t qlen, llen, chanlen;
} rl_queue;

/* Starts the queue state of one acquire of key (keylen bytes, kept by the
 * caller for the call): it queues (q->on) when fair is on and wait_ms > 0;
 * shared: a shared hold's waiter, else an exclusive one. Returns 0, or -1
 * on OOM or without random bytes (q->on is then 0). Caller holds c->mu. */
int rl_queue_start(rl_client *c, rl_queue *q, const char *key, size_t keylen, int shared,
                   int64_t wait_ms);

/* Whether the waiter may try now: 1 when it does not queue, when the head
 * of the last turn is still fresh (taken less than queue_lease_ms / 4
 * ago), or after a turn (one round, votes of c->n) that let it try or
 * reached fewer than a majority; 0 when it must wait. Caller holds c->mu. */
int rl_queue_may_try(rl_client *c, rl_queue *q, rl_vote *votes);

/* The pause of a queued waiter, from now until deadline at most: first
 * its channel is subscribed to (after which it returns at once: its turn
 * may have come before the subscription),
 * then it waits for a message there (RL_WAKE_BURST, RL_WAKE_GAP_US as for
 * any release message) or until its next turn is due: the retry delay at
 * the head or without a queue, queue_lease_ms / 4 behind it. Returns 1
 * when a message woke it, 0 when the time ran out, -1 when the client's
 * cancel callback said stop. Caller holds c->mu, dropped while it waits. */
int rl_queue_pause(rl_client *c, rl_queue *q, int64_t now, int64_t deadline);

/* Ends the wait: the entry leaves the queue on every node with a
 * connection (without waiting for answers; got: the lock was taken, else
 * the waiters now at the head are told), the channel is unsubscribed and
 * the names freed. Safe on a state that does not queue. Caller holds c->mu. */
void rl_queue_end(rl_client *c, rl_queue *q, int got);

#endif
