/* rl_stats: counters of what the engine did, always on: per node (commands
 * sent, votes, errors, timeouts, times marked down, and a fixed ring of
 * the latest reply latencies) and per lock name of a session (acquisitions,
 * refusals, waits, holds, losses). Updating costs a few additions and no
 * allocation; percentiles are computed only when someone reads them.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef RL_STATS_H
#define RL_STATS_H

#include <stddef.h>
#include <stdint.h>

/* Latencies kept per node: the window p50 and p99 are computed over. */
#define RL_LAT_WINDOW 256

typedef struct rl_node_stats {
    int64_t calls;     /* lock commands and PINGs sent */
    int64_t yes, no;   /* votes counted as such */
    int64_t errors;    /* failed votes other than timeouts */
    int64_t timeouts;  /* deadlines passed with a reply owed */
    int64_t down;      /* times the node was marked down */
    uint32_t lat_us[RL_LAT_WINDOW]; /* ring of the latest reply latencies */
    int lat_n, lat_pos;
} rl_node_stats;

/* Adds one to a counter. A build with -DRL_STATS_OFF counts nothing: the
 * bench measures what the statistics cost against it. */
#ifdef RL_STATS_OFF
#define RL_COUNT(counter) ((void)(counter))
#else
#define RL_COUNT(counter) ((void)(counter)++)
#endif

/* Adds one reply latency (negative ones count as 0). */
void rl_stats_latency(rl_node_stats *st, int64_t us);

/* p50 and p99 of the window in µs; -1 for both when it is empty. */
void rl_stats_percentiles(const rl_node_stats *st, int64_t *p50, int64_t *p99);

/* Names a session keeps statistics for, and the bytes of those names
 * (a name may be 64 KiB long, and each scan of the table copies them); a
 * name first used after that many others, or that would pass the bytes,
 * is not counted. */
#define RL_LOCKSTATS_MAX 1000
#define RL_LOCKSTATS_BYTES (1024 * 1024)

typedef struct rl_lockstat {
    char *res;               /* owned, reslen bytes (+ NUL) */
    size_t reslen;
    int64_t acquisitions, refusals;
    int64_t wait_total_ms, wait_max_ms;
    int64_t hold_max_ms;
    int64_t lost;
} rl_lockstat;

/* Slots of the name index: a power of two, at least twice RL_LOCKSTATS_MAX,
 * so a lookup probes a few slots even when every row is used. */
#define RL_LOCKSTATS_SLOTS 2048

/* A slot of the name index: the row's name hash beside it, so a probe
 * past other names compares numbers, not the rows' names. */
typedef struct rl_lockstat_slot {
    int32_t row;             /* row number + 1 (0: empty) */
    uint32_t hash;
} rl_lockstat_slot;

typedef struct rl_lockstats {
    rl_lockstat *rows;
    int n, cap;
    size_t bytes;            /* of the rows' names, at most RL_LOCKSTATS_BYTES */
    rl_lockstat_slot *slots; /* owned, RL_LOCKSTATS_SLOTS of them, by name hash */
    int64_t untracked;       /* calls on names beyond RL_LOCKSTATS_MAX or RL_LOCKSTATS_BYTES */
} rl_lockstats;

/* The row of res, added when new; NULL when RL_LOCKSTATS_MAX names, or
 * RL_LOCKSTATS_BYTES of names, are kept already (counted in untracked) or
 * on OOM. */
rl_lockstat *rl_stats_lock_get(rl_lockstats *ls, const char *res, size_t reslen);

/* Frees every row. */
void rl_stats_lock_clear(rl_lockstats *ls);

/* A copy of the rows (*out; free with rl_lockstats_copy_free); count or -1. */
int rl_stats_lock_copy(const rl_lockstats *ls, rl_lockstat **out);
void rl_stats_lock_copy_free(rl_lockstat *rows, int n);

#endif
