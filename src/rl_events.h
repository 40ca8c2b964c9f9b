/* rl_events: what the engine tells its owner happened, for operators'
 * logs: a node marked down or back up, a lock lost by auto-extension, an
 * acquisition that failed for lack of a quorum, a node refused by the
 * checks of rl_nodecheck. The owner installs one callback per client; it
 * may be called on the caller's thread or on the keeper thread, with c->mu
 * or the session's mutex held, so it must not call back into the engine.
 * No callback: nothing.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef RL_EVENTS_H
#define RL_EVENTS_H

#include "rl_client.h"

typedef enum {
    RL_EVENT_NODE_DOWN = 1,
    RL_EVENT_NODE_UP,
    RL_EVENT_LOCK_LOST,
    RL_EVENT_NO_QUORUM,
    RL_EVENT_NODE_REFUSED,
} rl_event_kind;

/* Installs fn (NULL: none); set once, before the client is used. */
void rl_client_set_events(rl_client *c, void (*fn)(void *ctx, int kind, const char *msg), void *ctx);

/* Reports an event (msg: one line, valid UTF-8, no secret). */
void rl_event(const rl_client *c, rl_event_kind kind, const char *msg);

#endif
