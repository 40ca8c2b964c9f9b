/* rl_events: the last RL_EVENTS_MAX events of one client, kept so that the
 * owner can show them (redlock_events in SQL) to programs that cannot see
 * its log. Events come from the caller's thread and the keeper's, so the
 * ring has a mutex of its own, taken only for a copy in or out (never
 * while calling anything else): a leaf below every other lock.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef RL_EVENTS_H
#define RL_EVENTS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* How many events are kept: older ones are dropped, one per new one. */
#define RL_EVENTS_MAX 100
/* Bytes of an event's message and resource name kept (longer ones are cut
 * at a character boundary and end in "..."). */
#define RL_EVENT_MSG_MAX 300
#define RL_EVENT_RES_MAX 200

/* What is reported: kind (the owner's numbering, rl_client.h), the node it
 * is about (id; 0: none), the lock (res, reslen bytes; NULL: none), and a
 * message that is valid UTF-8 and carries no secret. */
typedef struct rl_event {
    int kind;
    int64_t node_id;
    const char *res;
    size_t reslen;
    const char *msg;
} rl_event;

/* One event as kept: copies, cleaned and cut. */
typedef struct rl_event_row {
    uint64_t seq;      /* 1 for the client's first event, then one more each */
    int64_t wall_ms;   /* the wall clock (CLOCK_REALTIME) in Unix ms, for people */
    int64_t mono_us;   /* rl_now_us() at the event */
    int64_t age_ms;    /* copies only: ms since the event by rl_now_us() when
                          copied, which clock jumps do not change */
    int kind;
    int64_t node_id;
    int has_res;
    char res[RL_EVENT_RES_MAX + 4];
    char msg[RL_EVENT_MSG_MAX + 4];
} rl_event_row;

typedef struct rl_events {
    pthread_mutex_t mu;
    rl_event_row *ring; /* cap rows, grown with the events up to RL_EVENTS_MAX */
    int cap;
    uint64_t seq;       /* events kept so far (the last one's seq) */
} rl_events;

/* 0, or -1 when the mutex cannot be made. */
int rl_events_init(rl_events *e);
void rl_events_destroy(rl_events *e);

/* Keeps a copy of ev (dropped when the ring cannot grow for it). */
void rl_events_add(rl_events *e, const rl_event *ev);

/* Copies the kept events, oldest first, each with its age_ms, into a new
 * array (*out, free() it); returns how many, or -1 on OOM. */
int rl_events_copy(rl_events *e, rl_event_row **out);

/* In a child after fork(): the mutex may have been copied locked (by the
 * keeper thread, which did not come along); made anew. Events stay. */
void rl_events_after_fork(rl_events *e);

#endif
