/* rl_session: what one owner (one SQLite connection) holds. It keeps the
 * token of every lock taken through it, counts re-acquisitions of a lock it
 * already holds (reentrancy, as MySQL and PostgreSQL named locks), knows how
 * long each lock is still valid, and gives everything back when it ends.
 *
 * Thread use: one caller thread; the session's mutex guards the held list
 * so a background thread may read and update it.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef RL_SESSION_H
#define RL_SESSION_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "rl_client.h"
#include "rl_lock.h"
#include "rl_many.h"
#include "rl_nameindex.h"

enum { RL_KIND_EXCLUSIVE = 0, RL_KIND_SHARED = 1 };
/* How long after an extension the keeper extends a lock again: a third of
 * its TTL, so two more tries fit before it would expire. */
#define RL_AUTO_EXTEND_PERIOD_US(ttl_ms) ((ttl_ms) * 1000 / 3)

/* The most locks the keeper extends in one round. A node runs the script
 * for 250 keys in about 2 ms (more on a busy host): longer scripts would
 * stall every other client of that node, and the owner's own calls waiting
 * for the round, past a 50 ms node timeout. */
#define RL_KEEPER_BATCH_MAX 250

/* The most locks whose validity ended (expired, or lost) a session keeps
 * listed beside its valid ones. A program that takes names and lets them
 * expire (a dedupe key per message) would otherwise keep every one for
 * the life of the connection. Every RL_HELD_LOOK_EVERY locks taken, once
 * it lists more than RL_HELD_ENDED_MAX, the session forgets the ended
 * ones taken first beyond that many, as if released by hand but with
 * nothing sent (their keys expire with their TTL): it then holds none on
 * those names. Not those the keeper has an extend of on its way. A look
 * scans the list, so it is not made at every lock taken. */
#define RL_HELD_ENDED_MAX 1000
#define RL_HELD_LOOK_EVERY 64

typedef struct rl_held {
    char *res;               /* owned, reslen bytes (+ NUL) */
    int kind;                /* RL_KIND_*: how it was taken (rl_lock or rl_shared) */
    int64_t max_holders;     /* shared: the holder limit it was taken with (0: none) */
    size_t reslen;
    char token[RL_TOKEN_LEN + 1];
    int64_t ttl_ms;
    int64_t valid_until_us;  /* rl_now_us() at which our validity ends */
    int64_t drift_us;        /* the drift allowance for ttl_ms */
    int64_t inflight_until_us; /* while the keeper's extend is on its way (else 0):
                                  the least the key lives once it has run, which may
                                  be less than valid_until_us when the owner extended
                                  it meanwhile for longer; validity counts the lesser */
    long long fence;
    int64_t count;           /* acquisitions not yet released */
    int64_t lost_holds;      /* of count, the oldest ones: holds of an earlier lock on
                                res that expired or was lost before it was taken anew */
    int64_t xact_holds;      /* of count, the holds of the open transaction
                                (rl_session_acquire_xact), given back together at
                                its end (rl_session_xact_end), never one by one */
    uint64_t op;             /* rl_outcome.op of the acquire or extend whose
                                validity valid_until_us is: a call that ended
                                with a smaller op is older and decides nothing */
    int yes_nodes;
    int64_t extensions;
    int auto_extend;         /* the keeper extends it (RL_AUTO_EXTEND_PERIOD_US) */
    int64_t next_extend_us;  /* auto_extend: when the keeper extends it next */
    int64_t acquired_us;     /* rl_now_us() when this lock was taken (hold times) */
    int lost;                /* an extension failed or came too late */
    char lost_why[RL_ERR_REASON_MAX];
    int on_lost;             /* taken with on_lost set: the owner is told when it is
                                lost or its validity runs out, which the keeper
                                watches for (rl_session_set_on_lost) */
    int ended_told;          /* its loss or expiry was reported (an event, and the
                                owner told when on_lost), so it is not again */
    int retrying;            /* the keeper's extends got too few answers since its
                                last success (reported once: RL_EVENT_EXTEND_FAILED) */
    int batch_slot;          /* while in the keeper's batch in flight: its place
                                in it, from 1 (else 0) */
    int64_t validity_ms;     /* snapshots only: the validity left when the
                                snapshot was taken, by the session's one measure */
} rl_held;

typedef struct rl_session {
    rl_client *client;  /* owned */
    pthread_mutex_t mu; /* guards everything below */
    rl_held *held;
    int nheld, capheld;
    rl_nameindex byname; /* held by name (rl_nameindex.h), told of every change of held */
    /* the auto-extension thread (rl_session_keeper.c) */
    pthread_cond_t wake;
    pthread_t keeper;
    int keeper_running, keeper_stop;
    pid_t pid;          /* the process that owns the locks (see rl_session_check_fork) */
    int editing_nodes;  /* between rl_session_nodes_begin and _done */
    int64_t xact_taken; /* holds taken by the open transaction: the sum of every
                           held entry's xact_holds, unless one was lost from the list */
    rl_lockstats stats; /* per name used (rl_stats.h) */
    int taken_since_look; /* locks listed since ended ones were last looked for (RL_HELD_LOOK_EVERY) */
    void (*on_lost)(void *ctx, const char *res, size_t reslen, const char *why); /* rl_session_set_on_lost */
    void *on_lost_ctx;
} rl_session;

/* Installs the callback told when a lock taken with the on_lost setting is
 * found lost (the keeper's extend or the owner's was refused, or too few
 * nodes answered until its validity ran out) or its validity runs out
 * while it is held, once per lock, as soon as this session knows: on the
 * keeper's thread or the caller's, with s->mu held, so it must not call
 * into the engine (it may interrupt what the owner's thread is doing).
 * NULL: none. Set once, before the session is used; the keeper is stopped
 * (rl_session_free) before the session, and so the callback, goes. */
void rl_session_set_on_lost(rl_session *s, void (*fn)(void *ctx, const char *res, size_t reslen, const char *why),
                            void *ctx);

/* A copy of the per-name statistics (*out, free with
 * rl_lockstats_copy_free); count, or -1 on OOM. *untracked: calls on
 * names beyond RL_LOCKSTATS_MAX. Takes s->mu. */
int rl_session_lock_stats(rl_session *s, rl_lockstat **out, int64_t *untracked);

/* Counts one loss of h's name (caller holds s->mu). */
void rl_session_count_lost(rl_session *s, const rl_held *h);

/* The bookkeeping every extend of h shares, the user's and the keeper's,
 * once its call has ended after h's last decided one (op > h->op, caller
 * holds s->mu): a decided result (RL_OK, RL_REFUSED) becomes h's last
 * call, and so does an undecided one that went out to some node (sent;
 * too few answers, interrupted, out of memory), which may have run there
 * all the same, with a shorter TTL than the one h is counted by: h is held
 * to ran_until_us (the send time plus that TTL, less drift) from then on.
 * A misuse, or a call that reached no node, changed nothing. Returns
 * whether it was such an undecided one. */
int rl_held_extend_ended(rl_held *h, rl_status st, uint64_t op, int sent, int64_t ran_until_us);

/* When h's validity ends as this session knows it: valid_until_us, or
 * sooner while a keeper extend with a shorter TTL is on its way. */
int64_t rl_held_until_us(const rl_held *h);

/* Whole ms of h's validity left at now_us (rl_held_until_us), 0 when lost:
 * the one measure every decision and reader uses. */
int64_t rl_held_left_ms(const rl_held *h, int64_t now_us);

/* A new session with a new client; NULL on OOM. */
rl_session *rl_session_new(void);

/* The session's client (owned by the session), for the node list and the
 * settings (rl_client.h, rl_settings.h). */
rl_client *rl_session_client(rl_session *s);

/* Waits until every reply the nodes still owe has come or its deadline has
 * passed (at most the largest node timeout), so node health and last_error
 * reflect the whole of the last call. */
void rl_session_settle(rl_session *s);

/* Releases every held lock (each call bounded by the node timeouts), then
 * frees the client and the session. */
void rl_session_free(rl_session *s);

/* Acquires res, or counts one more hold when this session holds it still
 * valid (same token, no Redis call). token receives the token on RL_OK. */
rl_status rl_session_acquire(rl_session *s, const char *res, size_t reslen, int64_t ttl_ms, int64_t wait_ms,
                             char token[RL_TOKEN_LEN + 1], rl_outcome *out);

/* As rl_session_acquire, for a shared hold with max_holders (0: no
 * limit). A connection that holds res exclusively, or shared with another
 * max_holders, gets RL_MISUSE (and the reverse for rl_session_acquire): one
 * connection never holds a name both ways. */
rl_status rl_session_acquire_shared(rl_session *s, const char *res, size_t reslen, int64_t ttl_ms, int64_t wait_ms,
                                    int64_t max_holders, char token[RL_TOKEN_LEN + 1], rl_outcome *out);

/* Extends held lock h's token the way its kind needs (keeper and owner). */
rl_status rl_session_held_extend(rl_session *s, int kind, int64_t max_holders, const char *res, size_t reslen,
                         const char *token, size_t toklen, int64_t ttl_ms, rl_outcome *out);

/* As rl_session_acquire (exclusive), but the hold belongs to the open
 * transaction of the host (a SQLite transaction): it cannot be released,
 * detached or given back by release_all, and goes at rl_session_xact_end.
 * A name this session holds valid gets one more hold, owned by the
 * transaction (the session's own holds stay its own). A name the
 * transaction holds whose lock was lost or ran out is not taken anew:
 * RL_MISUSE (the transaction's writes cannot be committed any more). */
rl_status rl_session_acquire_xact(rl_session *s, const char *res, size_t reslen, int64_t ttl_ms,
                                  int64_t wait_ms, char token[RL_TOKEN_LEN + 1], rl_outcome *out);

/* Whether the open transaction holds any lock (rl_session_acquire_xact).
 * Takes s->mu. */
int rl_session_xact_open(rl_session *s);

/* The COMMIT guard: 0 when every lock the open transaction holds is
 * still held with at least margin_ms of validity left (and more than 0);
 * else -1 with why (whylen bytes) naming the first that is not and why:
 * lost (the keeper's or an extend's finding), run out, or under the
 * margin. Takes s->mu. */
int rl_session_xact_check(rl_session *s, int64_t margin_ms, char *why, size_t whylen);

/* The open transaction has ended (committed or rolled back): gives back
 * every hold it took; a lock whose last hold that was is released on the
 * nodes (one call each, bounded by the node timeouts). Returns how many
 * locks were released; 0 when the transaction held none. */
int rl_session_xact_end(rl_session *s);

/* With token NULL: gives back one hold of the lock this session holds on
 * res (RL_OK; the lock itself is released when the last hold goes), or
 * returns RL_MISUSE with *not_held set when it holds none. With a token:
 * releases the lock with that token on the nodes, whatever the count.
 * A lock the open transaction holds keeps the transaction's holds: only
 * the session's own are given back, and the lock is never released here
 * (RL_MISUSE when the session has no hold of its own on it). */
rl_status rl_session_release(rl_session *s, const char *res, size_t reslen, const char *token, size_t toklen,
                             int *not_held, rl_outcome *out);

/* Extends res (token NULL: the one this session holds; *not_held set when
 * none). A lock whose validity this session knows has ended is never
 * extended: RL_REFUSED (and it is forgotten, but one the open transaction
 * holds, which stays listed as lost until the transaction ends). */
rl_status rl_session_extend(rl_session *s, const char *res, size_t reslen, const char *token, size_t toklen,
                            int64_t ttl_ms, int *not_held, rl_outcome *out);

/* Takes every name of res[0..n) or none (rl_many_acquire), with one token;
 * each name is then held as if acquired alone (its own row, fence,
 * auto-extension and release). A name this session lists already (held,
 * expired or lost) makes it RL_MISUSE, before any Redis call. */
rl_status rl_session_acquire_many(rl_session *s, int n, const char *const *res, const size_t *lens, int64_t ttl_ms,
                                  int64_t wait_ms, char token[RL_TOKEN_LEN + 1], rl_outcome *out);

/* Releases names res[0..n) with one script per node. With token NULL: for
 * each name this session holds, as rl_session_release without a token does
 * (one hold given back, the lock deleted when its last hold goes); names it
 * does not hold are skipped, and *none_held is set when it holds none of
 * them. With a token: every name's key that still holds that token, as
 * rl_session_release with a token does. *released counts the names released
 * (or with a hold given back). RL_OK, or an error status with out->msg (some
 * name undecided: too few nodes answered). */
rl_status rl_session_release_many(rl_session *s, int n, const char *const *res, const size_t *lens, const char *token,
                                  size_t toklen, int *released, int *none_held, rl_outcome *out);
/* (A name the open transaction holds makes it RL_MISUSE, before anything
 * is given back.) */

/* To be called first by every entry from the host (SQL function, table,
 * close). In a child process after fork(), the session starts clean: the
 * parent's locks are forgotten, not released (they are still the parent's);
 * the inherited sockets are dropped without a word; the mutexes, which may
 * have been copied locked, are made anew; the keeper thread did not come
 * along and is started again when needed. A no-op in the owning process. */
void rl_session_check_fork(rl_session *s);

/* Hands the lock this session holds on res over to its TTL: the session
 * forgets it with all its holds (no release at the end, no auto-extension,
 * not listed) and token receives its token (RL_OK). RL_MISUSE with
 * *not_held set when it holds none; RL_REFUSED when the lock's validity had
 * ended or it was lost (what is left of it is deleted, as by extend). An
 * extend of the keeper's on its way is waited for first (one round).
 * RL_MISUSE for a lock the open transaction holds: it goes with it. */
rl_status rl_session_detach(rl_session *s, const char *res, size_t reslen, char token[RL_TOKEN_LEN + 1],
                            int *not_held, rl_outcome *out);

/* Takes the lock on res with token into this session after checking on a
 * quorum that the key holds it (rl_lock_check; nothing is changed on the
 * nodes): RL_OK with its validity, then it is held as if acquired here
 * (one hold, ttl_ms the PTTL read, no fencing number, auto-extension when
 * that setting is on). RL_REFUSED when it is not ours any more. When the
 * session holds res already: with that token, RL_OK with its validity (no
 * call, no hold added; RL_REFUSED if expired or lost); with another token,
 * RL_MISUSE. */
rl_status rl_session_adopt(rl_session *s, const char *res, size_t reslen, const char *token, size_t toklen,
                           rl_outcome *out);

/* Releases every lock this session holds; returns how many locks it held.
 * A lock the open transaction holds keeps the transaction's holds (the
 * session's own are given back, and count) until rl_session_xact_end;
 * rl_session_free ends the transaction first. */
int rl_session_release_all(rl_session *s);

/* Milliseconds of validity left for res as this session knows it (token
 * NULL: the lock it holds; else only if it holds res with that token); 0
 * when expired, lost or unknown. */
int64_t rl_session_validity(rl_session *s, const char *res, size_t reslen, const char *token, size_t toklen);

/* 1 when this session holds any lock, valid or not (lost and expired locks
 * stay in its list until released or acquired again, or forgotten beyond
 * RL_HELD_ENDED_MAX), else 0. Takes s->mu. */
int rl_session_holds_any(rl_session *s);

/* Starts a change of the node list. A lock may only ever be counted on the
 * nodes it was taken on, so this is refused (-1, why in err) while the
 * session holds any lock; on 0, no lock can be taken until
 * rl_session_nodes_done. Takes s->mu. */
int rl_session_nodes_begin(rl_session *s, rl_error *err);

/* Ends what rl_session_nodes_begin started. Takes s->mu. */
void rl_session_nodes_done(rl_session *s);

/* 1 while a change of the node list is open (between rl_session_nodes_begin
 * and _done), else 0. Takes s->mu. */
int rl_session_nodes_open(rl_session *s);

/* Copies the held locks into a new array (*out, count returned; -1 on OOM),
 * each with its validity_ms as rl_session_validity would say it now; free
 * it with rl_session_snapshot_free. */
int rl_session_snapshot(rl_session *s, rl_held **out);
void rl_session_snapshot_free(rl_held *rows, int n);

/* Finds the held lock on res and copies it into *out (res not copied:
 * out->res is NULL), with its validity_ms as rl_session_validity would say
 * it now. Returns 0, or -1 when this session does not hold it. */
int rl_session_find(rl_session *s, const char *res, size_t reslen, rl_held *out);

/* ---- the auto-extension thread (rl_session_keeper.c) ---- */

/* Index in s->held of the lock on res (a session holds a name at most
 * once), or -1. Caller holds s->mu. */
int rl_session_held_index(rl_session *s, const char *res, size_t reslen);

/* Reports the end of held lock h once (an event of kind, RL_EVENT_LOCK_LOST
 * or RL_EVENT_LOCK_EXPIRED, with msg), and tells the owner (on_lost) when
 * h was taken with that setting. Caller holds s->mu. */
void rl_session_report_end(rl_session *s, rl_held *h, int kind, const char *msg, const char *why);

/* Starts the thread if it is not running and wakes it to look at the held
 * locks again. Returns 0, -1 when no thread could be started. Caller holds
 * s->mu. */
int rl_session_keeper_kick(rl_session *s);

/* Stops the thread and waits for it (bounded by one extension call).
 * Caller does not hold s->mu. */
void rl_session_keeper_stop(rl_session *s);

#endif
