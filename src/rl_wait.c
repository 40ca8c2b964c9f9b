/* rl_wait: pub/sub wake-ups for waiting acquires (see rl_wait.h).
 * SPDX-License-Identifier: BSD-3-Clause */
#include "rl_wait.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rl_clock.h"
#include "rl_node.h"

/* The two channels of key on node: released and keyspace (malloc'ed);
 * or, for a fair waiter, its own channel alone in rel (ks NULL). */
typedef struct channels {
    char *rel, *ks;
    size_t rellen, kslen;
} channels;

/* How many confirmations subscribing to ch gets: one per channel. */
static int channels_count(const channels *ch) {
    return ch->ks ? 2 : 1;
}

static void channels_free(channels *ch) {
    free(ch->rel);
    free(ch->ks);
}

/* one: key is the channel itself (a fair waiter's own). */
static int channels_make(const rl_node *node, const char *key, size_t keylen, int one, channels *ch) {
    if (one) {
        ch->ks = NULL;
        ch->kslen = 0;
        ch->rellen = keylen;
        if (!(ch->rel = malloc(keylen + 1))) return -1;
        memcpy(ch->rel, key, keylen);
        ch->rel[keylen] = '\0';
        return 0;
    }
    char head[48];
    int hl = snprintf(head, sizeof head, "__keyspace@%d__:", node->ep.db);
    size_t sl = sizeof RL_RELEASED_SUFFIX - 1;
    ch->rellen = keylen + sl;
    ch->kslen = (size_t)hl + keylen;
    ch->rel = malloc(ch->rellen + 1);
    ch->ks = malloc(ch->kslen + 1);
    if (!ch->rel || !ch->ks) {
        channels_free(ch);
        return -1;
    }
    memcpy(ch->rel, key, keylen);
    memcpy(ch->rel + keylen, RL_RELEASED_SUFFIX, sl + 1);
    memcpy(ch->ks, head, (size_t)hl);
    memcpy(ch->ks + hl, key, keylen);
    ch->ks[ch->kslen] = '\0';
    return 0;
}

static int is_str(const rl_reply *r, const char *s, size_t len) {
    return r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) && r->len == len &&
           memcmp(r->str, s, len) == 0;
}

/* What a push reply is: 1 a message on one of ch, 2 a subscribe confirmation
 * of one of ch, 0 anything else (old channels, unsubscribe, AUTH's OK). */
static int classify(const rl_reply *r, const channels *ch) {
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 3) return 0;
    const rl_reply *chan = r->element[1];
    int ours = is_str(chan, ch->rel, ch->rellen) || (ch->ks && is_str(chan, ch->ks, ch->kslen));
    if (!ours) return 0;
    if (is_str(r->element[0], "message", 7)) return 1;
    if (is_str(r->element[0], "subscribe", 9)) return 2;
    return 0;
}

static rl_conn *open_sub(rl_client *c, rl_node *node) {
    rl_error err;
    rl_conn *conn = rl_node_open(c, node, &err);
    if (!conn) return NULL;
    conn->push = 1;
    const char *argv[3];
    size_t lens[3];
    int argc = rl_node_auth_argv(node, argv);
    for (int i = 0; i < argc; i++) lens[i] = strlen(argv[i]);
    if (argc) rl_conn_send(conn, NULL, argc, argv, lens);
    return conn;
}

/* Reads every push reply on node's sub; returns 1 when one was a message
 * on ch after every confirmation of the SUBSCRIBE (need): one before them was
 * published before it ran, to an earlier wait's subscription on the same
 * name (whose UNSUBSCRIBE was not read yet), and says nothing of the lock
 * now. Confirmations are counted into *confirmed, and an error reply (a
 * user who may not SUBSCRIBE, a failed AUTH) sets it to -1 for good: that
 * node will confirm nothing. */
static int read_sub(rl_node *node, const channels *ch, int need, int *confirmed) {
    int woken = 0;
    rl_tag tag;
    rl_reply *r;
    while (rl_conn_next_reply(node->sub, &tag, &r) == 1) {
        int k = classify(r, ch);
        if (k == 1 && *confirmed >= need) woken = 1;
        if (*confirmed >= 0) {
            if (r && r->type == REDIS_REPLY_ERROR) *confirmed = -1;
            else if (k == 2) (*confirmed)++;
        }
        rl_reply_free(r);
    }
    return woken;
}

/* rl_wait_subscribe, or with one rl_wait_subscribe_channel. */
static int subscribe(rl_client *c, const char *key, size_t keylen, int one, int64_t until_us) {
    int64_t now = rl_now_us(), deadline = now;
    int cancelled = 0, woken = 0;
    channels *chs = calloc(c->n > 0 ? (size_t)c->n : 1, sizeof *chs);
    struct pollfd *pfd = calloc(c->n > 0 ? (size_t)c->n : 1, sizeof *pfd);
    int *who = calloc(c->n > 0 ? (size_t)c->n : 1, sizeof *who);
    int ready = 0;
    if (!chs || !pfd || !who) goto out;
    for (int i = 0; i < c->n; i++) {
        rl_node *node = c->nodes[i];
        node->sub_ready = 0;
        node->sub_confirms = 0;
        if (node->health == RL_HEALTH_DOWN || channels_make(node, key, keylen, one, &chs[i]) != 0) continue;
        node->sub_need = channels_count(&chs[i]);
        if (node->sub && node->sub->broken) {
            rl_conn_close(node->sub);
            node->sub = NULL;
        }
        if (!node->sub && !(node->sub = open_sub(c, node))) continue;
        const char *argv[3] = {"SUBSCRIBE", chs[i].rel, chs[i].ks};
        size_t lens[3] = {9, chs[i].rellen, chs[i].kslen};
        if (rl_conn_send(node->sub, NULL, node->sub_need + 1, argv, lens) != 0) continue;
        node->sub_ready = 1; /* asked; confirmed below */
        int64_t d = now + rl_client_timeout_us(c, node);
        if (d > deadline) deadline = d;
    }
    /* The wait for confirmations is the caller's too: it ends with the
     * caller's deadline, and slice by slice the caller may cancel it. */
    if (deadline > until_us) deadline = until_us;
    for (;;) {
        /* The confirmed ones are polled too: a release announced there
         * ends the wait. */
        int k = 0, waiting = 0;
        for (int i = 0; i < c->n; i++) {
            rl_node *node = c->nodes[i];
            if (!node->sub_ready || node->sub_confirms < 0 || node->sub->broken) continue;
            waiting += node->sub_confirms < node->sub_need;
            pfd[k] = (struct pollfd){.fd = node->sub->fd, .events = rl_conn_events(node->sub)};
            who[k++] = i;
        }
        now = rl_now_us();
        if (!waiting || now >= deadline) break;
        if (c->cancel && c->cancel(c->cancel_ctx)) {
            cancelled = 1;
            break;
        }
        int64_t wait = deadline - now;
        if (c->cancel && wait > RL_CANCEL_PERIOD_US) wait = RL_CANCEL_PERIOD_US;
        struct timespec ts = {.tv_sec = wait / 1000000, .tv_nsec = (long)(wait % 1000000) * 1000};
        int got = ppoll(pfd, (nfds_t)k, &ts, NULL);
        if (got < 0) break;
        for (int j = 0; j < k; j++) {
            if (!pfd[j].revents) continue;
            rl_node *node = c->nodes[who[j]];
            rl_conn_progress(node->sub, pfd[j].revents);
            woken |= read_sub(node, &chs[who[j]], node->sub_need, &node->sub_confirms);
        }
        /* A release came on a confirmed subscription: the caller tries again
         * now rather than after a hung node's confirmation that never comes. */
        if (woken) break;
    }
    for (int i = 0; i < c->n; i++) {
        rl_node *node = c->nodes[i];
        if (node->sub_ready && node->sub_confirms >= node->sub_need) {
            ready++;
            continue;
        }
        /* A release cut the wait short: those still to confirm are kept,
         * and confirm while the caller waits (rl_wait_for_release). */
        if (woken && node->sub_ready && node->sub_confirms >= 0 && !node->sub->broken) continue;
        node->sub_ready = 0;
        if (node->sub) {
            /* Unconfirmed in time: this connection's stream can no longer be trusted. */
            rl_conn_close(node->sub);
            node->sub = NULL;
        }
    }
out:
    for (int i = 0; chs && i < c->n; i++) channels_free(&chs[i]);
    free(chs);
    free(pfd);
    free(who);
    return cancelled ? -1 : ready;
}

/* ppoll in slices of RL_CANCEL_PERIOD_US until wait_us has passed or a
 * descriptor is ready, asking the client's cancel callback before each.
 * Returns how many descriptors are ready (0: the wait ended, or ppoll
 * failed), or -1 when cancelled. Caller does not hold c->mu. */
static int poll_cancellable(rl_client *c, struct pollfd *pfd, int k, int64_t wait_us) {
    int64_t deadline = rl_now_us() + wait_us;
    for (;;) {
        if (c->cancel && c->cancel(c->cancel_ctx)) return -1;
        int64_t left = deadline - rl_now_us();
        if (left <= 0) return 0;
        if (c->cancel && left > RL_CANCEL_PERIOD_US) left = RL_CANCEL_PERIOD_US;
        struct timespec ts = {.tv_sec = left / 1000000, .tv_nsec = (long)(left % 1000000) * 1000};
        int ready = ppoll(pfd, (nfds_t)k, &ts, NULL);
        if (ready != 0) return ready > 0 ? ready : 0;
    }
}

int rl_wait_subscribe(rl_client *c, const char *key, size_t keylen, int64_t until_us) {
    return subscribe(c, key, keylen, 0, until_us);
}

int rl_wait_subscribe_channel(rl_client *c, const char *chan, size_t chanlen, int64_t until_us) {
    return subscribe(c, chan, chanlen, 1, until_us);
}

/* rl_wait_for_release, or with one rl_wait_for_channel. */
static int wait_for(rl_client *c, const char *key, size_t keylen, int one, int64_t wait_us) {
    int n = c->n, k = 0, woken = 0;
    struct pollfd *pfd = calloc(n > 0 ? (size_t)n : 1, sizeof *pfd);
    int *who = calloc(n > 0 ? (size_t)n : 1, sizeof *who);
    if (!pfd || !who) {
        free(pfd);
        free(who);
        pthread_mutex_unlock(&c->mu);
        int cancelled = poll_cancellable(c, NULL, 0, wait_us) < 0;
        pthread_mutex_lock(&c->mu);
        return cancelled ? -1 : 0;
    }
    for (int i = 0; i < n; i++) {
        rl_node *node = c->nodes[i];
        if (!node->sub_ready || !node->sub || node->sub->broken || node->sub_confirms < 0) continue;
        pfd[k] = (struct pollfd){.fd = node->sub->fd, .events = rl_conn_events(node->sub)};
        who[k++] = i;
    }
    /* Only this thread uses the pub/sub connections; the keeper thread may
     * run its extensions meanwhile. */
    pthread_mutex_unlock(&c->mu);
    int ready = poll_cancellable(c, pfd, k, wait_us);
    pthread_mutex_lock(&c->mu);
    if (ready < 0) woken = -1;
    for (int j = 0; ready > 0 && j < k; j++) {
        if (!pfd[j].revents || who[j] >= c->n) continue;
        rl_node *node = c->nodes[who[j]];
        if (!node->sub || node->sub->fd != pfd[j].fd) continue;
        rl_conn_progress(node->sub, pfd[j].revents);
        channels ch;
        if (channels_make(node, key, keylen, one, &ch) != 0) continue;
        woken |= read_sub(node, &ch, node->sub_need, &node->sub_confirms);
        channels_free(&ch);
    }
    free(pfd);
    free(who);
    return woken;
}

int rl_wait_for_release(rl_client *c, const char *key, size_t keylen, int64_t wait_us) {
    return wait_for(c, key, keylen, 0, wait_us);
}

int rl_wait_for_channel(rl_client *c, const char *chan, size_t chanlen, int64_t wait_us) {
    return wait_for(c, chan, chanlen, 1, wait_us);
}

int rl_wait_take_early(rl_client *c, int64_t t) {
    int64_t grown = (t - c->wake_filled_us) / RL_WAKE_GAP_US;
    if (grown >= RL_WAKE_BURST - c->wake_left) {
        c->wake_left = RL_WAKE_BURST;
        c->wake_filled_us = t;
    } else if (grown > 0) {
        c->wake_left += (int)grown;
        c->wake_filled_us += grown * RL_WAKE_GAP_US;
    }
    if (c->wake_left == 0) return 0;
    c->wake_left--;
    return 1;
}

int rl_wait_pause(rl_client *c, const char *name, size_t len, int own, int64_t until_us) {
    int woken = 0;
    for (;;) {
        int64_t t = rl_now_us(), end = until_us;
        if (woken) {
            if (rl_wait_take_early(c, t)) break;
            if (c->wake_filled_us + RL_WAKE_GAP_US < end) end = c->wake_filled_us + RL_WAKE_GAP_US;
        }
        if (t >= end) {
            if (end < until_us) continue; /* an early attempt is due: take it */
            break;
        }
        int w = wait_for(c, name, len, own, end - t);
        if (w < 0) return -1;
        woken |= w;
    }
    return woken;
}

void rl_wait_unsubscribe(rl_client *c) {
    for (int i = 0; i < c->n; i++) {
        rl_node *node = c->nodes[i];
        if (!node->sub || !node->sub_ready) continue;
        if (node->sub_confirms < node->sub_need) {
            /* Its confirmations were never read: the next SUBSCRIBE would
             * take them for its own, before the server has run it. */
            rl_conn_close(node->sub);
            node->sub = NULL;
            node->sub_ready = 0;
            continue;
        }
        const char *argv[1] = {"UNSUBSCRIBE"};
        size_t lens[1] = {11};
        rl_conn_send(node->sub, NULL, 1, argv, lens);
        node->sub_ready = 0;
    }
}
