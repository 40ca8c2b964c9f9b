/* rl_events: a bounded ring of a client's recent events (see rl_events.h).
 * SPDX-License-Identifier: BSD-3-Clause */
#include "rl_events.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rl_clock.h"
#include "rl_text.h"

int rl_events_init(rl_events *e) {
    memset(e, 0, sizeof *e);
    return pthread_mutex_init(&e->mu, NULL) == 0 ? 0 : -1;
}

void rl_events_destroy(rl_events *e) {
    free(e->ring);
    e->ring = NULL;
    pthread_mutex_destroy(&e->mu);
}

void rl_events_add(rl_events *e, const rl_event *ev) {
    /* Everything but the copy into the ring is done before the mutex. */
    rl_event_row row;
    memset(&row, 0, sizeof row);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    row.wall_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    row.mono_us = rl_now_us();
    row.kind = ev->kind;
    row.node_id = ev->node_id;
    if (ev->res) {
        row.has_res = 1;
        rl_text_excerpt(row.res, sizeof row.res, ev->res, ev->reslen, RL_EVENT_RES_MAX);
    }
    const char *msg = ev->msg ? ev->msg : "";
    rl_text_excerpt(row.msg, sizeof row.msg, msg, strlen(msg), RL_EVENT_MSG_MAX);
    pthread_mutex_lock(&e->mu);
    /* The ring grows with its events, doubling up to RL_EVENTS_MAX rows: a
     * client that never has one (the usual case) never pays for it, and the
     * many connections of a process that all see a node go down pay for a
     * few. It grows only while it has not wrapped, so every row stays at
     * (seq - 1) % RL_EVENTS_MAX. */
    if (e->seq == (uint64_t)e->cap && e->cap < RL_EVENTS_MAX) {
        int cap = e->cap ? e->cap * 2 : 4;
        if (cap > RL_EVENTS_MAX) cap = RL_EVENTS_MAX;
        rl_event_row *ring = realloc(e->ring, (size_t)cap * sizeof *ring);
        if (ring) e->ring = ring, e->cap = cap;
    }
    if (e->seq < (uint64_t)e->cap || e->cap == RL_EVENTS_MAX) {
        row.seq = ++e->seq;
        e->ring[(row.seq - 1) % RL_EVENTS_MAX] = row;
    }
    pthread_mutex_unlock(&e->mu);
}

int rl_events_copy(rl_events *e, rl_event_row **out) {
    pthread_mutex_lock(&e->mu);
    uint64_t last = e->seq, first = last > RL_EVENTS_MAX ? last - RL_EVENTS_MAX + 1 : 1;
    int n = (int)(last - first + 1);
    rl_event_row *rows = *out = malloc((size_t)(n > 0 ? n : 1) * sizeof *rows);
    for (uint64_t seq = first; rows && seq <= last; seq++) rows[seq - first] = e->ring[(seq - 1) % RL_EVENTS_MAX];
    pthread_mutex_unlock(&e->mu);
    if (!rows) return -1;
    int64_t now = rl_now_us();
    for (int i = 0; i < n; i++) rows[i].age_ms = (now - rows[i].mono_us) / 1000;
    *out = rows;
    return n;
}

void rl_events_after_fork(rl_events *e) {
    pthread_mutex_init(&e->mu, NULL);
}
