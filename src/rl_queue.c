/* rl_queue: fair, herd-free waiting on a name (see rl_queue.h).
 * SPDX-License-Identifier: BSD-3-Clause */
#include "rl_queue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_clock.h"
#include "rl_random.h"
#include "rl_round.h"
#include "rl_wait.h"

int rl_queue_start(rl_client *c, rl_queue *q, const char *key, size_t keylen, int shared,
                   int64_t wait_ms) {
    memset(q, 0, sizeof *q);
    if (!c->set.fair || wait_ms <= 0) return 0;
    _Static_assert(RL_QUEUE_ID_HEX % 2 == 0, "an entry id of whole bytes");
    /* Without random bytes the attempt's own token fails too, and says so. */
    if (rl_random_hex(q->member, RL_QUEUE_ID_HEX / 2) != 0) return 0;
    q->member[RL_QUEUE_ID_HEX] = ':';
    q->member[RL_QUEUE_ID_HEX + 1] = shared ? 's' : 'x';
    q->member[RL_QUEUE_ID_HEX + 2] = '\0';
    int64_t wall = rl_clock_wall_ms();
    snprintf(q->since, sizeof q->since, "%lld", (long long)(wall > 0 ? wall : 0));
    size_t ql = sizeof RL_QUEUE_SUFFIX - 1, ll = sizeof RL_QUEUE_LEASE_SUFFIX - 1;
    size_t ml = strlen(q->member);
    q->qlen = keylen + ql;
    q->llen = keylen + ll;
    q->chanlen = q->qlen + 1 + ml;
    if (!(q->names = malloc(q->qlen + 1 + q->llen + 1 + q->chanlen + 1))) return -1;
    q->qkey = q->names;
    q->lkey = q->qkey + q->qlen + 1;
    q->chan = q->lkey + q->llen + 1;
    memcpy(q->qkey, key, keylen);
    memcpy(q->qkey + keylen, RL_QUEUE_SUFFIX, ql + 1);
    memcpy(q->lkey, key, keylen);
    memcpy(q->lkey + keylen, RL_QUEUE_LEASE_SUFFIX, ll + 1);
    memcpy(q->chan, q->qkey, q->qlen);
    q->chan[q->qlen] = ':';
    memcpy(q->chan + q->qlen + 1, q->member, ml + 1);
    q->key = key;
    q->keylen = keylen;
    q->on = 1;
    return 0;
}

/* Sends the entry's removal to every node with a connection, without
 * waiting (a cleanup: kept until answered, as a failed attempt's is);
 * wake: it leaves without the lock, so the waiters at the head are told. */
static void leave(rl_client *c, const rl_queue *q, int wake) {
    const char *argv[] = {"EVAL", RL_SCRIPT_QUEUE_LEAVE, "3", q->qkey, q->lkey,
                          q->key, q->member, wake ? "1" : "0"};
    size_t lens[] = {4, sizeof RL_SCRIPT_QUEUE_LEAVE - 1, 1, q->qlen, q->llen,
                     q->keylen, strlen(q->member), 1};
    rl_round_cleanup_connected(c, 8, argv, lens);
}

int rl_queue_may_try(rl_client *c, rl_queue *q, rl_vote *votes) {
    if (!q->on) return 1;
    int64_t lease_us = c->set.queue_lease_ms * 1000;
    if (q->head && rl_now_us() - q->turn_us < lease_us / 4) return 1;
    char lease[24];
    snprintf(lease, sizeof lease, "%lld", (long long)c->set.queue_lease_ms);
    const char *argv[] = {"EVAL", RL_SCRIPT_QUEUE_TURN, "2", q->qkey, q->lkey,
                          q->member, q->since, lease};
    size_t lens[] = {4, sizeof RL_SCRIPT_QUEUE_TURN - 1, 1, q->qlen, q->llen, strlen(q->member),
                     strlen(q->since), strlen(lease)};
    int quorum = rl_client_quorum(c);
    rl_round r = {.kind = RL_K_QUEUE, .argc = 8, .argv = argv, .lens = lens, .quorum = quorum,
                  .votes = votes};
    rl_round_run(c, &r);
    q->entered = 1;
    q->turns++;
    q->turn_us = r.start_us; /* the leases were renewed after this */
    q->ahead = 0;
    for (int i = 0; i < c->n; i++)
        if (votes[i].state == RL_V_NO && (q->ahead == 0 || votes[i].value < q->ahead))
            q->ahead = votes[i].value;
    q->fallback = 0;
    q->head = r.yes >= quorum;
    if (q->head || r.yes + r.no >= quorum) return q->head;
    /* The entry is on too few nodes to keep an order by: it leaves them
     * again, so that it holds up nobody behind it there, and this attempt
     * goes ahead as one of a waiter that does not queue. The next turn
     * tries to enter again, at the same place. */
    q->fallback = 1;
    leave(c, q, 1);
    return 1;
}

int rl_queue_pause(rl_client *c, rl_queue *q, int64_t now, int64_t deadline) {
    int deaf = 0;
    if (q->subscribed != 1) {
        q->subscribed = 1;
        int confirmed = rl_wait_subscribe_channel(c, q->chan, q->chanlen, deadline);
        if (confirmed < 0) return -1;
        /* No node confirmed in time (a loaded host, nodes down): no turn
         * handed to it would be heard. It asks again at its next pause,
         * and meanwhile looks as often as the head does. */
        deaf = confirmed == 0;
        if (deaf) q->subscribed = 2;
        /* A turn handed to it before the subscription was heard by nobody
         * (the waiters ahead may all have had theirs meanwhile, as fast as
         * hand-offs go, or while this process was not running): it looks
         * again at once, now that it would hear the next. */
        if (confirmed > 0 && !q->fallback) return 0;
        now = rl_now_us();
    }
    int64_t lease_us = c->set.queue_lease_ms * 1000, d;
    if (q->head || q->fallback || deaf) {
        d = rl_random_between(c->set.retry_delay_ms - c->set.retry_jitter_ms,
                              c->set.retry_delay_ms + c->set.retry_jitter_ms) * 1000;
        /* the head's lease is renewed at its tries: they come well within it */
        if (d > lease_us / 2) d = lease_us / 2;
    } else {
        /* Behind the head, the turns are the entry's keep-alive; spread
         * out, so that waiters that came together do not stay in step. */
        d = rl_random_between(lease_us / 5, lease_us / 4);
    }
    if (d < 0) d = 0;
    if (now + d > deadline) d = deadline - now;
    int woken = rl_wait_pause(c, q->chan, q->chanlen, 1, now + d); /* drops c->mu while it waits */
    if (woken < 0) return -1;
    /* A waiter woken behind the head takes its turn now: the head may have
     * left, or have handed the lock on. */
    return woken;
}

void rl_queue_end(rl_client *c, rl_queue *q, int got) {
    if (q->on && q->entered && !q->fallback) leave(c, q, !got);
    if (q->subscribed) rl_wait_unsubscribe(c);
    free(q->names);
    q->names = NULL;
    q->on = 0;
}
