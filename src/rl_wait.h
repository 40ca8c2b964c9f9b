/* rl_wait: waiting for a lock to be given back without polling.
 *
 * While an acquire waits, each node's pub/sub connection subscribes to the
 * lock's release channel (<key>:released, published by our release script)
 * and to its keyspace channel (__keyspace@<db>__:<key>, which Redis feeds
 * only when notify-keyspace-events is on, so expiries wake us too there). A
 * message on either wakes the waiter at once. The random retry delay stays
 * the bound on every wait, so a release that publishes nothing (another
 * client's, or a plain expiry) costs at most one delay, as with polling.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef RL_WAIT_H
#define RL_WAIT_H

#include <stddef.h>
#include <stdint.h>

#include "rl_client.h"

#define RL_RELEASED_SUFFIX ":released"

/* Subscribes every reachable node to the channels of key (keylen bytes)
 * and waits for the confirmations: at most each node's timeout, never past
 * until_us (the caller's own deadline, rl_now_us() time), not for a node
 * that answered with an error, and no longer once a release was announced
 * on a confirmed one (the nodes still to confirm then are kept, and
 * confirm while rl_wait_for_release waits). Returns how many nodes
 * confirmed, or -1 when the client's cancel callback ended the wait.
 * Caller holds c->mu. */
int rl_wait_subscribe(rl_client *c, const char *key, size_t keylen, int64_t until_us);

/* Waits up to wait_us for a release message on key's channels. Drops
 * c->mu while it waits. Returns 1 when woken by a message, -1 when the
 * client's cancel callback said stop (asked every RL_CANCEL_PERIOD_US),
 * else 0. */
int rl_wait_for_release(rl_client *c, const char *key, size_t keylen, int64_t wait_us);

/* The same for a fair waiter (rl_queue.h): only its own channel chan
 * (chanlen bytes), which the name's releases publish to when its turn may
 * have come. */
int rl_wait_subscribe_channel(rl_client *c, const char *chan, size_t chanlen, int64_t until_us);
int rl_wait_for_channel(rl_client *c, const char *chan, size_t chanlen, int64_t wait_us);

/* A release message proves nothing (anyone allowed to PUBLISH on the
 * channel can send one), so the early attempts messages bring about are
 * counted out: RL_WAKE_BURST at once, then one per RL_WAKE_GAP_US, for
 * each client. Takes one at t (rl_now_us()) when there is one left and
 * returns 1, else 0. Caller holds c->mu. */
#define RL_WAKE_BURST 8
#define RL_WAKE_GAP_US 2000
int rl_wait_take_early(rl_client *c, int64_t t);

/* A waiting acquire's pause until until_us, ended early by a whole
 * wake-up message when an early attempt is left to take
 * (rl_wait_take_early): on key's release channels (own 0,
 * rl_wait_for_release), or on a fair waiter's own channel (own 1,
 * rl_wait_for_channel). Bytes that are only part of a message end a wait
 * early and must not end the pause. Drops c->mu while it waits. Returns 1
 * when woken, 0 when the pause ran out, -1 when the client's cancel
 * callback said stop. */
int rl_wait_pause(rl_client *c, const char *name, size_t len, int own, int64_t until_us);

/* Unsubscribes every node without waiting. Caller holds c->mu. */
void rl_wait_unsubscribe(rl_client *c);

#endif
