/* rl_stats: counters and latency percentiles (see rl_stats.h).
 * SPDX-License-Identifier: BSD-3-Clause */
#include "rl_stats.h"

#include <stdlib.h>
#include <string.h>

void rl_stats_latency(rl_node_stats *st, int64_t us) {
#ifdef RL_STATS_OFF
    (void)st, (void)us;
    return;
#endif
    if (us < 0) us = 0;
    if (us > UINT32_MAX) us = UINT32_MAX;
    st->lat_us[st->lat_pos] = (uint32_t)us;
    st->lat_pos = (st->lat_pos + 1) % RL_LAT_WINDOW;
    if (st->lat_n < RL_LAT_WINDOW) st->lat_n++;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

void rl_stats_percentiles(const rl_node_stats *st, int64_t *p50, int64_t *p99) {
    if (st->lat_n == 0) {
        *p50 = *p99 = -1;
        return;
    }
    uint32_t v[RL_LAT_WINDOW];
    memcpy(v, st->lat_us, (size_t)st->lat_n * sizeof v[0]);
    qsort(v, (size_t)st->lat_n, sizeof v[0], cmp_u32);
    /* nearest rank: the smallest value with at least p% of them at or below it */
    int i50 = (st->lat_n * 50 + 99) / 100 - 1, i99 = (st->lat_n * 99 + 99) / 100 - 1;
    *p50 = v[i50 < 0 ? 0 : i50];
    *p99 = v[i99 < 0 ? 0 : i99];
}

/* FNV-1a: names are short and the index only needs a spread, not secrecy
 * (a hostile spread costs probes, bounded by RL_LOCKSTATS_SLOTS). */
static uint32_t name_hash(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

rl_lockstat *rl_stats_lock_get(rl_lockstats *ls, const char *res, size_t reslen) {
    if (!ls->slots && !(ls->slots = calloc(RL_LOCKSTATS_SLOTS, sizeof *ls->slots))) return NULL;
    uint32_t hash = name_hash(res, reslen), i = hash & (RL_LOCKSTATS_SLOTS - 1);
    for (; ls->slots[i].row; i = (i + 1) & (RL_LOCKSTATS_SLOTS - 1)) {
        if (ls->slots[i].hash != hash) continue;
        rl_lockstat *row = &ls->rows[ls->slots[i].row - 1];
        if (row->reslen == reslen && memcmp(row->res, res, reslen) == 0) return row;
    }
    if (ls->n >= RL_LOCKSTATS_MAX || reslen > RL_LOCKSTATS_BYTES - ls->bytes) {
        ls->untracked++;
        return NULL;
    }
    if (ls->n == ls->cap) {
        int cap = ls->cap ? ls->cap * 2 : 8;
        rl_lockstat *r = realloc(ls->rows, (size_t)cap * sizeof *r);
        if (!r) return NULL;
        ls->rows = r;
        ls->cap = cap;
    }
    rl_lockstat *row = &ls->rows[ls->n];
    memset(row, 0, sizeof *row);
    if (!(row->res = malloc(reslen + 1))) return NULL;
    memcpy(row->res, res, reslen);
    row->res[reslen] = '\0';
    row->reslen = reslen;
    ls->bytes += reslen;
    ls->slots[i] = (rl_lockstat_slot){.row = ++ls->n, .hash = hash}; /* the empty slot the probe stopped at */
    return row;
}

void rl_stats_lock_clear(rl_lockstats *ls) {
    for (int i = 0; i < ls->n; i++) free(ls->rows[i].res);
    free(ls->rows);
    free(ls->slots);
    memset(ls, 0, sizeof *ls);
}

int rl_stats_lock_copy(const rl_lockstats *ls, rl_lockstat **out) {
    rl_lockstat *rows = calloc(ls->n > 0 ? (size_t)ls->n : 1, sizeof *rows);
    for (int i = 0; rows && i < ls->n; i++) {
        rows[i] = ls->rows[i];
        if (!(rows[i].res = malloc(ls->rows[i].reslen + 1))) {
            rl_stats_lock_copy_free(rows, i);
            rows = NULL;
            break;
        }
        memcpy(rows[i].res, ls->rows[i].res, ls->rows[i].reslen + 1);
    }
    *out = rows;
    return rows ? ls->n : -1;
}

void rl_stats_lock_copy_free(rl_lockstat *rows, int n) {
    for (int i = 0; rows && i < n; i++) free(rows[i].res);
    free(rows);
}
