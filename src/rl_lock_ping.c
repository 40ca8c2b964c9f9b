/* rl_lock_ping: PING to every node (see rl_lock.h).
 * SPDX-License-Identifier: BSD-3-Clause */

#include "rl_lock.h"

#include <stdlib.h>

#include "rl_clock.h"
#include "rl_round.h"

int rl_lock_ping(rl_client *c) {
    pthread_mutex_lock(&c->mu);
    rl_vote *votes = calloc(c->n > 0 ? (size_t)c->n : 1, sizeof *votes);
    if (!votes) {
        pthread_mutex_unlock(&c->mu);
        return -1;
    }
    int64_t now = rl_now_us();
    for (int i = 0; i < c->n; i++)
        if (c->nodes[i]->health == RL_HEALTH_DOWN) c->nodes[i]->retry_at_us = now;
    static const char *const argv[1] = {"PING"};
    static const size_t lens[1] = {4};
    rl_round r = {.kind = RL_K_PING, .argc = 1, .argv = argv, .lens = lens, .wait_all = 1, .quorum = c->n + 1,
                  .votes = votes};
    rl_round_run(c, &r);
    pthread_mutex_unlock(&c->mu);
    free(votes);
    return r.yes;
}
