/* rl_vote: what one node's reply to one lock command means. A reply is a
 * yes only in the exact shape the command returns on success; an error
 * reply, or any other shape, is a failure with a reason, never a yes.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef RL_VOTE_H
#define RL_VOTE_H

#include <stddef.h>

#include "rl_error.h"
#include "rl_kind.h"
#include "rl_resp.h"
#include "rl_text.h"

enum {
    RL_V_NONE,     /* not asked */
    RL_V_PENDING,  /* asked, no answer yet */
    RL_V_YES,      /* did what was asked */
    RL_V_NO,       /* answered: held by someone else / not our token */
    RL_V_FAIL,     /* no usable answer (error reply, timeout, connection) */
};

typedef struct rl_vote {
    int state;
    int timed_out;     /* FAIL because the node did not answer in time */
    int went_out;      /* its command was handed to the node's connection: it
                          may have run, whatever became of the connection */
    int by_digest;     /* its command went as EVALSHA */
    long long value;   /* the fence number of a fenced acquire; the PTTL of a check */
    char why[RL_ERR_REASON_MAX]; /* reason of a NO or FAIL */
    /* A FAIL because the node is down and was not asked: 1 + the ms to its
     * next try (0: not such a FAIL), and whether it waits for a stalled
     * connection. Its why is then left empty and written only when
     * rl_round_describe_failures reads it: a node down for long is skipped
     * on every round. */
    long long down_next_ms;
    int down_owes;
} rl_vote;

/* Fencing numbers stay below this, 2^53 - 1 (RL_FENCE_LIMIT_TEXT, which
 * the scripts of rl_scripts.h compare with): a reply at or above it is not
 * one of ours. */
#define RL_FENCE_LIMIT ((1LL << 53) - 1)

/* Classifies reply r to a command of kind (RL_K_* of rl_kind.h) into an
 * RL_V_* state, with *value (fence) and a reason in why for NO and FAIL.
 * The text of an error reply is shown with the secrets of sec masked. */
int rl_vote_classify(int kind, const rl_reply *r, const rl_secrets *sec, long long *value, char *why, size_t whylen);

/* For RL_K_EXTEND_MANY: checks that reply r is an array of exactly n
 * answers, each 0 (not ours) or 1 (extended), and copies them into items.
 * RL_V_YES, or RL_V_FAIL with the reason in why (items untouched). */
int rl_vote_items(const rl_reply *r, signed char *items, int n, char *why, size_t whylen);

#endif
