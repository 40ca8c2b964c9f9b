/* rl_round: one command sent to every node at once, and the single poll(2)
 * loop that drives all connections until a quorum is decided or each node's
 * deadline (connect + reply) has passed.
 *
 * The round returns as soon as the outcome is decided (enough yes votes, or
 * too many no/fail for a quorum); replies still on their way are read by a
 * later round and matched to their own command by tag. A node that misses
 * its deadline is marked down and its connection kept only as "stale" (so a
 * late SET and the cleanup queued behind it both reach the node in order);
 * a node known to be down costs nothing until its backoff has passed.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef RL_ROUND_H
#define RL_ROUND_H

#include <stdint.h>

#include "rl_client.h"
#include "rl_node.h"
#include "rl_vote.h"

typedef struct rl_round {
    /* in */
    int kind;                   /* RL_K_ACQUIRE, ... */
    int argc;
    const char *const *argv;
    const size_t *lens;
    const unsigned char *only;  /* NULL: every node; else only nodes with only[i] */
    const char *const *const *node_argv; /* NULL; else node i gets node_argv[i] (argc
                                   arguments, node_lens[i] their lengths) in place of
                                   argv, which must still be given with the same
                                   script (a SCAN cursor that differs by node) */
    const size_t *const *node_lens;
    int wait_all;               /* wait for every node, not just a decision */
    int quorum;                 /* yes votes that decide success */
    int guard_applies;          /* restart guard blocks yes votes (acquire, extend) */
    int strict_no;              /* a refusal needs no votes alone to rule out a
                                   quorum (release, extend: "not ours any more") */
    const char *secret;         /* the token the command carries: masked in */
    size_t secretlen;           /* what the nodes answer (rl_text.h) */
    int withhold;               /* the command carries more tokens than can be
                                   masked: error texts are withheld (rl_text.h) */
    int nitems;                 /* RL_K_EXTEND_MANY: keys in the command; a node's
                                   yes then gives an answer per key, and the round
                                   is decided when every key is (strict_no) */
    signed char *items;         /* c->n * nitems, owned by the caller: items[i *
                                   nitems + k] is node i's answer for key k (1 yes,
                                   0 no), valid only while votes[i] is RL_V_YES */
    int64_t give_up_after_us;   /* 0: none; else the round ends that long after
                                   it started whatever is still pending (an
                                   acquire: past its TTL less the drift allowance
                                   no answer can make the lock valid); pending
                                   votes stay pending, their replies read later */
    /* Optional: sees each reply of this round that would count as a yes or
     * a no, before it counts, to read what it carries; returns 0, or -1
     * with a reason in why to count it as a failure instead. */
    int (*inspect)(void *ctx, int node, int state, const rl_reply *rep, char *why, size_t whylen);
    void *inspect_ctx;
    /* Optional: sees a yes that does not count because another row of the
     * same server and database (node into) has a yes counted already, to add
     * what this one did to into's answer (release_many: a name deleted
     * through either row is deleted on the server). Gets inspect_ctx. */
    void (*fold)(void *ctx, int into, const rl_reply *rep);
    /* Optional: called for each node right before this round's command is
     * written to it (its connection made, owed cleanups sent), to put one
     * command of its own ahead of it, tagged as a set-up command so that
     * its answer is no vote (the holder details, rl_lock_holder.c). Gets
     * before_ctx, the time and the node's deadline. */
    void (*before)(void *ctx, rl_client *c, rl_node *node, int64_t now_us, int64_t deadline_us);
    void *before_ctx;
    /* out */
    rl_vote *votes;             /* c->n entries, owned by the caller */
    int asked, yes, no, fail;
    int blocked;                /* of fail: answers that can never count (replica,
                                   duplicate, restart guard, failed AUTH) */
    int64_t start_us, end_us;
    uint64_t op;                /* the tag of this round's commands */
    int polls_stale;            /* its polls include stalled connections (set
                                   by rl_round_run: polls_stale in rl_round.c) */
} rl_round;

/* Runs the round. Caller holds c->mu and provides r->votes[c->n]. */
void rl_round_run(rl_client *c, rl_round *r);

/* How many nodes round r's command went out to: it may have run there. */
int rl_round_sent(const rl_client *c, const rl_round *r);

/* Sends a compare-and-delete (argv as for RL_K_RELEASE) to every node that
 * may hold the key after round r (said yes, did not answer, or timed out),
 * without waiting for any reply. */
void rl_round_cleanup(rl_client *c, const rl_round *r, int argc, const char *const *argv, const size_t *lens);

/* A cleanup for every node with a connection (its live one, broken or
 * not, or its stalled one), whatever the last round did, sent as
 * rl_round_cleanup sends one: without waiting for any reply, kept until
 * answered when it goes on a live connection, else owed to the next. For
 * undoing what earlier rounds may have left on any node and what expires
 * by itself on a node that has no connection now (a waiting writer's
 * marker). */
void rl_round_cleanup_connected(rl_client *c, int argc, const char *const *argv, const size_t *lens);

/* The largest release kept by rl_round_owe_broken (its arguments' bytes). */
#define RL_OWED_RELEASE_MAX 65536

/* Keeps round r's command (a release: it compares the token, so running
 * twice does no harm) for the next connection of every node it went out to
 * whose connection broke before the node answered, as a failed attempt's
 * cleanup is kept: it may not have reached the node, whose key would then
 * stay for its TTL. Not a command over RL_OWED_RELEASE_MAX bytes. */
void rl_round_owe_broken(rl_client *c, const rl_round *r);

/* Sends a command, without waiting for any reply, to every node whose
 * answer to round r had not come when it was decided: still pending, or
 * timed out (queued on its stalled connection). */
void rl_round_send_late(rl_client *c, const rl_round *r, int argc, const char *const *argv, const size_t *lens);

/* Polls every connection for up to wait_us (0: just what is ready), reading
 * late replies and noticing stalled or broken nodes. Caller holds c->mu. */
void rl_round_service(rl_client *c, int64_t wait_us);

/* Waits until every reply still owed on an active connection has come or
 * its deadline has passed (so at most the largest node timeout), so that
 * node health and last_error reflect the whole of the last call. Takes c->mu. */
void rl_round_settle(rl_client *c);

/* Appends "node 2 127.0.0.1:6380: why; ..." for the first
 * RL_ROUND_FAILURES_SHOWN failed votes to buf, then how many more failed
 * and where their reasons are: with a hundred nodes down the message
 * stays one a person reads. */
#define RL_ROUND_FAILURES_SHOWN 3
void rl_round_describe_failures(const rl_client *c, const rl_round *r, char *buf, size_t buflen);

#endif
