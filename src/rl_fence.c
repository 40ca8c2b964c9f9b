/* rl_fence: fencing counter write-back (see rl_fence.h).
 * SPDX-License-Identifier: BSD-3-Clause */
#include "rl_fence.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_clock.h"
#include "rl_scripts.h"

void rl_fence_cmd_make(rl_fence_cmd *w, const char *fkey, size_t fkeylen, long long fence, int64_t fence_ttl_ms) {
    snprintf(w->num, sizeof w->num, "%lld", fence);
    snprintf(w->ttl, sizeof w->ttl, "%lld", (long long)fence_ttl_ms);
    const char *argv[RL_FENCE_ARGC] = {"EVAL", RL_SCRIPT_FENCE_WRITEBACK, "1", fkey, w->ttl, w->num};
    size_t lens[RL_FENCE_ARGC] = {4, sizeof RL_SCRIPT_FENCE_WRITEBACK - 1, 1, fkeylen, strlen(w->ttl), strlen(w->num)};
    memcpy(w->argv, argv, sizeof argv);
    memcpy(w->lens, lens, sizeof lens);
}

void rl_fence_remember(rl_client *c, uint64_t op, const char *fkey, size_t fkeylen, long long fence,
                       int64_t ttl) {
    char *copy = malloc(fkeylen + 1);
    if (!copy) return; /* only late write-backs are lost */
    memcpy(copy, fkey, fkeylen);
    copy[fkeylen] = '\0';
    rl_fenced_op *slot = &c->recent_fenced[c->recent_next];
    c->recent_next = (c->recent_next + 1) % RL_RECENT_FENCED;
    free(slot->fkey);
    *slot = (rl_fenced_op){.op = op, .fence = fence, .fkey = copy, .fkeylen = fkeylen, .fence_ttl_ms = ttl};
}

void rl_fence_late_yes(rl_client *c, rl_node *node, uint64_t op, long long value) {
    for (int i = 0; i < RL_RECENT_FENCED; i++) {
        const rl_fenced_op *f = &c->recent_fenced[i];
        if (!f->fkey || f->op != op) continue;
        if (value >= f->fence || !node->conn) return;
        rl_fence_cmd w;
        rl_fence_cmd_make(&w, f->fkey, f->fkeylen, f->fence, f->fence_ttl_ms);
        int64_t now = rl_now_us();
        rl_tag tag = {.op = op, .kind = RL_K_WRITEBACK, .deadline_us = now + rl_client_timeout_us(c, node), .sent_us = now};
        rl_conn_send(node->conn, &tag, RL_FENCE_ARGC, w.argv, w.lens);
        return;
    }
}
