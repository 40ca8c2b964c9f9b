/* rl_lock: the Redlock algorithm over a client's nodes: acquire with
 * retries, release and extend by token, and fencing numbers. Stateless: what
 * an owner holds is kept by rl_session.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef RL_LOCK_H
#define RL_LOCK_H

#include <stddef.h>
#include <stdint.h>

#include "rl_client.h"
#include "rl_error.h"
#include "rl_random.h"

struct rl_round;

#define RL_RESOURCE_MAX 65536        /* bytes, key prefix included */
#define RL_TTL_MAX_MS 2147483647LL   /* about 24.8 days */
#define RL_WAIT_MAX_MS 86400000LL    /* one day */
#define RL_SHARED_MAX_HOLDERS 1000000 /* largest max_holders of a shared lock (rl_shared.h); 0: no limit */
#define RL_WRITER_SUFFIX ":writer-waiting" /* marker of a waiting exclusive acquirer (rl_shared.h) */
#define RL_TOKEN_ARG_MAX 1024        /* bytes of a token argument: far above RL_TOKEN_LEN, so a
                                        token from a future version still reaches the nodes */

/* Why a call needs nodes, and how to give one that counts (a change made
 * in a transaction, which Python's sqlite3 opens by itself before an
 * INSERT, counts once committed). */
#define RL_LOCK_NO_NODES_MSG                                                                \
    "no Redis nodes configured; add one with INSERT INTO redlock_nodes(url) VALUES "        \
    "('redis://127.0.0.1:6379'), then COMMIT if a transaction is open (from Python: "       \
    "con.commit())"

typedef enum {
    RL_OK = 0,     /* done on a quorum */
    RL_REFUSED,    /* a quorum answered, but no: held elsewhere / not ours / expired */
    RL_NO_QUORUM,  /* fewer than a quorum of nodes gave an answer */
    RL_MISUSE,     /* bad arguments or no nodes */
    RL_NOMEM,
    RL_INTERRUPTED, /* the client's cancel callback ended a wait; nothing held */
} rl_status;

typedef struct rl_outcome {
    rl_status status;
    int64_t validity_ms;     /* OK: time left as measured at the end of the call */
    int64_t valid_until_us;  /* OK: rl_now_us() at which validity ends */
    int64_t end_us;          /* rl_now_us() as the call ended, when it read
                                the clock then (0: it did not say) */
    long long fence;         /* OK acquire with fencing on: the fence number */
    int nodes, quorum, yes, no, fail;
    int sent;                /* an extend: the nodes its command went out to (it
                                may have run there, answered or not) */
    int attempts;
    uint64_t op;             /* the client's operation count when the call ended: of
                                two calls on one client, the later one on the wire
                                has the larger op (rounds run one at a time) */
    char msg[RL_ERR_MAX];    /* why, for every status but OK; status is its kind */
} rl_outcome;

/* Takes the lock: a fresh token, SET NX PX on every node at once, retried
 * after a random delay until wait_ms has passed. On RL_OK token holds the
 * new token. Caller must not hold c->mu. */
rl_status rl_lock_acquire(rl_client *c, const char *res, size_t reslen, int64_t ttl_ms, int64_t wait_ms,
                          char token[RL_TOKEN_LEN + 1], rl_outcome *out);

/* Deletes the key on every node where it still holds token. RL_OK when
 * deleted on a quorum, RL_REFUSED when not ours on a quorum. */
rl_status rl_lock_release(rl_client *c, const char *res, size_t reslen, const char *token, size_t toklen,
                          rl_outcome *out);

/* Sets a new TTL where the key still holds token (never re-creates it).
 * RL_OK with the new validity, RL_REFUSED when lost. A failed extend
 * deletes what is left of the lock. */
rl_status rl_lock_extend(rl_client *c, const char *res, size_t reslen, const char *token, size_t toklen,
                         int64_t ttl_ms, rl_outcome *out);

/* One lock of rl_lock_extend_many: in, what rl_lock_extend takes; out, a
 * status with the validity as rl_lock_extend computes it. */
typedef struct rl_extend_item {
    const char *res;
    size_t reslen;
    const char *token;       /* RL_TOKEN_LEN bytes */
    int64_t ttl_ms;
    rl_status status;        /* out: RL_OK, RL_REFUSED (lost), RL_NO_QUORUM, RL_MISUSE */
    int64_t validity_ms, valid_until_us; /* out, RL_OK */
    int yes, no, fail;       /* out: the votes for this lock */
    char why[RL_ERR_REASON_MAX]; /* out: the reason, for every status but RL_OK */
} rl_extend_item;

/* rl_lock_extend for n locks in one round: one script call per node sets
 * every key that still holds its own token to its TTL (fence counters as
 * rl_lock_extend keeps them). Each lock's votes are counted, its validity
 * computed from the round's start and end, and a lost one cleaned up,
 * exactly as rl_lock_extend does for one. *op receives the client's
 * operation count after the round (rl_outcome.op), *sent the nodes the
 * round's command went out to (rl_outcome.sent). Returns RL_OK when the
 * round ran (each item says how its lock fared), else RL_MISUSE or
 * RL_NOMEM for all of them (each item says why). Caller must not hold c->mu. */
rl_status rl_lock_extend_many(rl_client *c, rl_extend_item *items, int n, uint64_t *op, int *sent);

/* As rl_lock_extend, for a shared lock: limit is the max_holders it was
 * taken with as text (the node refuses another), quorum the yes votes
 * needed (0: the client's quorum; unsafe_test_quorum wins over it). */
rl_status rl_lock_extend_with(rl_client *c, const char *res, size_t reslen, const char *token, size_t toklen,
                              int64_t ttl_ms, const char *limit, int quorum, rl_outcome *out);

/* For rl_shared, which runs its own rounds the same way: the validity of
 * a lock of ttl_ms set by an attempt from start_us to end_us; the TTL
 * check (RL_OK or RL_MISUSE); the outcome of a round short of a quorum
 * (out->nodes and out->quorum set). */
int64_t rl_lock_validity_us(const rl_client *c, int64_t ttl_ms, int64_t start_us, int64_t end_us);
rl_status rl_lock_check_ttl(const rl_client *c, int64_t ttl_ms, rl_outcome *out);
rl_status rl_lock_not_done(const rl_client *c, const struct rl_round *r, rl_outcome *out, const char *what);

/* For rl_many, whose fenced acquisitions end the same way: the number a
 * fenced round r that decided hands out, the highest of its yes votes.
 * Then how many nodes said yes with fence or more (they store it) and,
 * in *lagging, how many with less. rl_lock_fence_raise then runs the
 * write-back argv (RL_SCRIPT_FENCE_WRITEBACK over the fence keys) on the
 * lagging ones and waits for each, bounded by its timeout; it returns how
 * many confirmed, and when not all did says why (appended to why; out of
 * memory replaces it). Caller holds c->mu. */
long long rl_lock_fence_number(const rl_client *c, const struct rl_round *r);

/* What an acquisition's round r decided, fenced or not: the end of the
 * attempt and the validity it leaves; with fencing, once a quorum said
 * yes in time, the number handed out and how many nodes store it, after
 * write_back (one of the callers', which may wait for lagging nodes: the
 * validity is then counted to after it, why says what failed). The
 * number is ours to hand out only once a quorum stores it: fence_short
 * says a quorum said yes but fewer store it. Caller holds c->mu. */
typedef int (*rl_lock_write_back)(rl_client *c, const struct rl_round *r, void *wb_keys, long long fence,
                                  int64_t fence_ttl_ms, char *why, size_t whylen, int *waited);
typedef struct rl_lock_decision {
    int64_t end_us, validity_us;
    long long fence;
    int stored, fence_short;
} rl_lock_decision;
void rl_lock_decide(rl_client *c, const struct rl_round *r, int quorum, int64_t ttl_ms, int fenced,
                    rl_lock_write_back write_back, void *wb_keys, int64_t fence_ttl_ms, char *why, size_t whylen,
                    rl_lock_decision *d);
int rl_lock_fence_stored(const rl_client *c, const struct rl_round *r, long long fence, int *lagging);
int rl_lock_fence_raise(rl_client *c, const struct rl_round *r, long long fence, int argc, const char *const *argv,
                        const size_t *lens, char *why, size_t whylen);

/* Asks every node whether the key still holds token and for how long, and
 * changes nothing. RL_OK when it does on quorum nodes (0: the client's
 * majority), with the validity that the least PTTL of the yes votes (at
 * most RL_TTL_MAX_MS) leaves (computed as for acquire: less the time the
 * call took and the drift allowance for that PTTL) and that PTTL in
 * *ttl_left_ms; RL_REFUSED when not ours on a quorum or no validity is
 * left. *shared_k is -1 when the token holds the key itself (an exclusive
 * lock), else the max_holders (0: none) of the shared lock whose holder it
 * is. */
rl_status rl_lock_check(rl_client *c, const char *res, size_t reslen, const char *token, size_t toklen, int quorum,
                        int64_t *ttl_left_ms, int64_t *shared_k, rl_outcome *out);

/* How many early attempts release messages can bring about (see
 * rl_lock_pause): RL_WAKE_BURST at once, then one per RL_WAKE_GAP_US, for
 * each client (rl_wait.h, rl_wait_take_early). */

/* The pause between two attempts of an acquire that waits (rl_shared and
 * rl_many wait the same way). With subscribed (NULL: the caller subscribes
 * itself) still 0, it first subscribes to key's releases and, when that
 * worked, returns at once (a release may have come before the
 * subscription did). Otherwise it waits a random retry delay, or a short
 * one when a release woke the last pause and this attempt got some yes
 * votes (the waiters woken with us split the nodes), cut at deadline and
 * ended early by a release of key. Returns 1 when a release woke it, 0
 * when the delay ran out (woken unchanged when it only subscribed), -1
 * when the acquire must stop (out says why: interrupted, or the node list
 * changed). A release message lets the next attempt come at once while
 * the client has an early attempt left (RL_WAKE_BURST, RL_WAKE_GAP_US),
 * and otherwise when it has one again. Caller holds c->mu, which is
 * dropped while it waits. */
int rl_lock_pause(rl_client *c, const char *key, size_t keylen, int *subscribed, int woken, int got_some, int64_t now,
                  int64_t deadline, rl_outcome *out);

struct rl_queue;
struct rl_vote;

/* The pause of a fair waiter (rl_queue.h), until deadline at most, as
 * rl_lock_pause: 1 when a message on its channel woke it, 0 when its next
 * turn is due, -1 when the acquire must stop (out says why: wait_ms ran
 * out, interrupted, the node list changed). Caller holds c->mu. */
int rl_lock_queue_wait(rl_client *c, struct rl_queue *q, int64_t deadline, rl_outcome *out);

/* One turn of a waiting acquire's loop, for rl_lock and rl_shared: waits
 * in the fair queue q until this waiter may try (0: go round again), then
 * counts the attempt and draws its token (1: try); -1: stop, out says
 * why. Caller holds c->mu. */
int rl_lock_turn(rl_client *c, struct rl_queue *q, struct rl_vote *votes, int64_t deadline,
                 char token[RL_TOKEN_LEN + 1], rl_outcome *out);

/* Sets out->nodes and out->quorum; RL_OK, or RL_MISUSE with out->msg when
 * no node is configured or unsafe_test_quorum exceeds the nodes. */
rl_status rl_lock_check_nodes(const rl_client *c, rl_outcome *out);

/* How long a writer-waiting marker (rl_shared.h) set now lives, in ms:
 * until the waiter's next try (the longest retry delay, or what is left
 * of its wait, left_us, when less) plus two rounds on the slowest node, so
 * one left by a waiter that gives up goes soon after. */
int64_t rl_lock_marker_ms(const rl_client *c, int64_t left_us);

/* RL_OK, or RL_MISUSE with out->msg when ttl_ms or wait_ms is out of its
 * range (every acquire checks both the same way). */
rl_status rl_lock_check_times(int64_t ttl_ms, int64_t wait_ms, rl_outcome *out);

/* The outcome of an attempt that took so long (from r's start to end_us)
 * that no validity was left: with a quorum of yes votes, or having given
 * up at the TTL with answers still on their way (rl_lock_ran_out). */
void rl_lock_too_slow(const struct rl_round *r, int64_t end_us, int64_t ttl_ms, rl_outcome *out);

/* Whether a failed attempt of round r ran out of time rather than into
 * other holders: a quorum said yes but no validity was left, or none was
 * left and too few nodes had answered for their answers to decide (the
 * round gave up at the TTL, see rl_round.give_up_after_us). Its error is
 * then rl_lock_too_slow's. */
int rl_lock_ran_out(const struct rl_round *r, const rl_outcome *out, int64_t validity_us);

/* A fresh token of c for one attempt (rl_random.h: its public start from
 * rl_holder_token_start; set: for a set of names); RL_NO_QUORUM with
 * out->msg when the kernel gave no random bytes. Caller holds c->mu. */
rl_status rl_lock_new_token(rl_client *c, int set, char token[RL_TOKEN_LEN + 1], rl_outcome *out);

/* How long a fence counter lives after an acquire of ttl_ms: 0 (for ever)
 * when fence_ttl_ms is 0, else at least as long as the lock. */
int64_t rl_lock_fence_ttl_ms(const rl_client *c, int64_t ttl_ms);

/* Checks a token argument (release, extend, adopt); RL_OK or RL_MISUSE
 * with out->msg. Besides an empty or overlong one, it refuses the values
 * the extension keeps in keys beside its locks, so that no call can
 * release, extend or adopt one of those keys by naming it as a lock with
 * its guessable value: a decimal integer of at most 20 characters (a
 * fencing counter or floor; a token of ours has RL_TOKEN_LEN characters), the
 * writer marker, and any text with the byte 0x1f (holder details). */
rl_status rl_lock_check_token(const char *token, size_t toklen, rl_outcome *out);

/* Checks arguments shared by all calls; RL_OK or RL_MISUSE with out->msg. */
rl_status rl_lock_check_resource(const rl_client *c, const char *res, size_t reslen, rl_outcome *out);

/* ---- who holds a lock (rl_lock_holder.c) ----
 * A token starts with public fields (rl_random.h): the id of its
 * connection's holder details, '1' for a set of names taken at once
 * ('0' else), and the wall-clock ms of the acquisition.
 * With the setting holder_info on, the details themselves (this host, pid
 * and application name (client_name): never a token) are written once per
 * connection to each node, ahead of the first lock command sent on it, in
 * the key "<key_prefix>redlock-client:<id>" (rl_scripts.h:
 * RL_CLIENT_DETAILS_TAG), and again before a lock taken behind them could
 * outlive them; an extension makes them live as long as its lock. So an
 * acquisition sends the same command with holder_info on as off, and a
 * set of names taken at once shares the details too. rl_lock_holder reads
 * the lock key on every node with the details its value points to, and
 * reports the lock only when a quorum holds the same value (compared by
 * SHA1, so no token leaves the nodes). */

/* Details as stored for a shared holder, and as read for any holder:
 * "redlock1" and five fields (host, pid, app, since, kind), separated by
 * 0x1f; a connection's are the first three fields. */
#define RL_HOLDER_DETAILS_MAX 256
#define RL_HOLDER_TEXT_MAX 64   /* bytes of host and app kept */

/* This process's details, for an acquisition of kind ("exclusive",
 * "shared") now, into buf; their length. Caller holds c->mu. */
size_t rl_holder_details(rl_client *c, const char *kind, char *buf, size_t buflen);

/* The public start of a new token of c (RL_TOKEN_PUBLIC_LEN characters,
 * no NUL): the id of its holder details, made anew when what they say
 * changed (rl_holder_id), whether it is a set's (set), and the time now.
 * Returns 0, or -1 when the kernel gave no random bytes for a new id.
 * Caller holds c->mu. */
int rl_holder_token_start(rl_client *c, int set, char pub[RL_TOKEN_PUBLIC_LEN]);

/* How long a connection's details are written to live at least: a
 * connection that is gone leaves them on the nodes no longer than this, or
 * 4 times the TTL of its last lock when that is more, or as long as the
 * last extension of one of its locks. */
#define RL_HOLDER_LIFE_MS 60000

/* An rl_round.before for acquisitions with holder_info on (ctx: the
 * int64_t TTL in ms): writes c's holder details to node, ahead of the
 * round's command, when node's current connection has not had them
 * written, or they could expire before a lock of that TTL taken now. */
void rl_holder_before_send(void *ctx, rl_client *c, rl_node *node, int64_t now_us, int64_t deadline_us);

/* A shared lock's holders keep their details in the hash "<key>:holders"
 * (field: the SHA1 of the token, computed on the node; value: the details),
 * kept by the same scripts that keep the sorted set (rl_scripts.h).
 * rl_lock_holder lists at most this many of them. */
#define RL_HOLDER_LIST_MAX 100

typedef struct rl_holder_entry {
    char host[RL_HOLDER_TEXT_MAX + 4];
    char app[RL_HOLDER_TEXT_MAX + 4];
    long long pid;
    long long since_ms;
    int64_t ttl_ms;         /* the smallest left over the nodes that list it */
} rl_holder_entry;

typedef struct rl_holder {
    int held;               /* a quorum holds the same lock */
    int64_t ttl_ms;         /* the smallest PTTL over those nodes; -1: a key without expiry */
    int nnodes;
    int64_t *node_ids;      /* owned (rl_holder_clear): the nodes that hold it */
    int has_details;        /* the lock was taken with holder details */
    char host[RL_HOLDER_TEXT_MAX + 4];
    char app[RL_HOLDER_TEXT_MAX + 4];
    long long pid;
    long long since_ms;     /* Unix ms of the acquisition */
    char kind[16];
    long long holders;      /* a shared lock: the fewest live holders over its
                               nodes; -1 for an exclusive lock */
    int nlist;              /* a shared lock: its holders with details that */
    rl_holder_entry *list;  /* a quorum lists (owned, rl_holder_clear) */
} rl_holder;

void rl_holder_clear(rl_holder *h);

/* Parses stored details (slen bytes from a server: anything) into e's
 * host, app, pid and since_ms (ttl_ms is left as it is) and their kind
 * into kind (kindlen bytes); 0, or -1 when they are not details this
 * extension writes (e and kind then unspecified). What is kept is
 * cleaned to valid UTF-8 without control characters. */
int rl_holder_parse(const char *s, size_t slen, rl_holder_entry *e, char *kind, size_t kindlen);

/* Reads who holds res on every node (waiting for each answer or its
 * timeout). RL_OK with out filled (out->held 0: free, or not held on a
 * quorum), RL_NO_QUORUM when fewer than a quorum answered, RL_MISUSE for a
 * bad name or no nodes, RL_NOMEM. Takes c->mu. */
rl_status rl_lock_holder(rl_client *c, const char *res, size_t reslen, rl_holder *out, rl_outcome *o);

/* ---- rl_lock_ping.c ---- */

/* Sends PING to every node at once (a node marked down is tried again
 * now, whatever its backoff, unless a stalled connection of it still owes
 * replies) and waits for each answer or its timeout. Returns how many
 * nodes answered PONG, -1 on OOM. Takes c->mu. */
int rl_lock_ping(rl_client *c);

#endif
