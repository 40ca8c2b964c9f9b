/* rl_fence: fencing counter write-back (see rl_fence.h).
 * SPDX-License-Identifier: BSD-3-Clause */
#include "rl_fence.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_clock.h"
#include "rl_scripts.h"

/* The write-back command for counter fkey: EVAL script 1 fkey fence ttl. */
typedef struct writeback_cmd {
    const char *argv[6];
    size_t lens[6];
    char num[32], ttl[32];
} writeback_cmd;

static void writeback_make(writeback_cmd *w, const char *fkey, size_t fkeylen, long long fence, int64_t fence_ttl_ms) {
    snprintf(w->num, sizeof w->num, "%lld", fence);
    snprintf(w->ttl, sizeof w->ttl, "%lld", (long long)fence_ttl_ms);
    const char *argv[6] = {"EVAL", RL_SCRIPT_FENCE_WRITEBACK, "1", fkey, w->num, w->ttl};
    size_t lens[6] = {4, sizeof RL_SCRIPT_FENCE_WRITEBACK - 1, 1, fkeylen, strlen(w->num), strlen(w->ttl)};
    memcpy(w->argv, argv, sizeof argv);
    memcpy(w->lens, lens, sizeof lens);
}

static void remember(rl_client *c, uint64_t op, const char *fkey, size_t fkeylen, long long fence, int64_t ttl) {
    char *copy = malloc(fkeylen + 1);
    if (!copy) return; /* only late write-backs are lost */
    memcpy(copy, fkey, fkeylen);
    copy[fkeylen] = '\0';
    rl_fenced_op *slot = &c->recent_fenced[c->recent_next];
    c->recent_next = (c->recent_next + 1) % RL_RECENT_FENCED;
    free(slot->fkey);
    *slot = (rl_fenced_op){.op = op, .fence = fence, .fkey = copy, .fkeylen = fkeylen, .fence_ttl_ms = ttl};
}

int rl_fence_writeback(rl_client *c, const rl_round *r, const char *fkey, size_t fkeylen, long long fence,
                       int64_t fence_ttl_ms, char *why, size_t whylen) {
    remember(c, r->op, fkey, fkeylen, fence, fence_ttl_ms);
    size_t n = c->n > 0 ? (size_t)c->n : 1;
    unsigned char *only = calloc(n, 1);
    rl_vote *votes = calloc(n, sizeof *votes);
    int lagging = 0, stored = 0;
    for (int i = 0; i < c->n; i++) {
        if (r->votes[i].state != RL_V_YES) continue;
        if (r->votes[i].value >= fence) stored++;
        else if (only) only[i] = 1, lagging++;
    }
    if (lagging && votes && only) {
        writeback_cmd w;
        writeback_make(&w, fkey, fkeylen, fence, fence_ttl_ms);
        rl_round wb = {.kind = RL_K_WRITEBACK, .argc = 6, .argv = w.argv, .lens = w.lens, .only = only,
                       .wait_all = 1, .quorum = lagging, .votes = votes};
        rl_round_run(c, &wb);
        stored += wb.yes;
        if (wb.yes < lagging) rl_round_describe_failures(c, &wb, why, whylen);
    } else if (lagging) {
        snprintf(why, whylen, "out of memory");
    }
    free(only);
    free(votes);
    return stored;
}

void rl_fence_late_yes(rl_client *c, rl_node *node, uint64_t op, long long value) {
    for (int i = 0; i < RL_RECENT_FENCED; i++) {
        const rl_fenced_op *f = &c->recent_fenced[i];
        if (!f->fkey || f->op != op) continue;
        if (value >= f->fence || !node->conn) return;
        writeback_cmd w;
        writeback_make(&w, f->fkey, f->fkeylen, f->fence, f->fence_ttl_ms);
        rl_tag tag = {.op = op, .kind = RL_K_WRITEBACK, .deadline_us = rl_now_us() + rl_node_timeout_us(c, node)};
        rl_conn_send(node->conn, &tag, 6, w.argv, w.lens);
        return;
    }
}
