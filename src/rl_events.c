/* rl_events: the owner's event callback (see rl_events.h).
 * SPDX-License-Identifier: BSD-3-Clause */
#include "rl_events.h"

void rl_client_set_events(rl_client *c, void (*fn)(void *ctx, int kind, const char *msg), void *ctx) {
    c->on_event = fn;
    c->event_ctx = ctx;
}

void rl_event(const rl_client *c, rl_event_kind kind, const char *msg) {
    if (c->on_event) c->on_event(c->event_ctx, (int)kind, msg);
}
