/* rl_ping: contacts every node of a client now, so an owner can check its
 * nodes before it starts work and see their real state.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef RL_PING_H
#define RL_PING_H

#include "rl_client.h"

/* Sends PING to every node at once (a node marked down is tried again
 * now, whatever its backoff, unless a stalled connection of it still owes
 * replies) and waits for each answer or its timeout. Returns how many
 * nodes answered PONG, -1 on OOM. Takes c->mu. */
int rl_client_ping(rl_client *c);

#endif
