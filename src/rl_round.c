/* rl_round: fan-out of one command to all nodes over one poll loop
 * (see rl_round.h).
 * SPDX-License-Identifier: BSD-3-Clause */
#include "rl_round.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rl_clock.h"
#include "rl_evalsha.h"
#include "rl_fence.h"
#include "rl_nodecheck.h"
#include "rl_text.h"

/* How many commands a stalled connection may owe before it takes no more
 * cleanups. The cleanups that matter (for SETs queued on it before it
 * stalled) come first; the releases of locks taken while the node was down
 * never touched it, and queuing them all would grow memory without bound
 * for as long as the node stays hung. */
#define RL_STALE_MAX_OWED 256

/* The most arguments of a command that may go by digest: the single-lock
 * scripts have at most 10. */
#define RL_DIGEST_ARGS_MAX 16

/* Scratch kept for the next round's command: every single-lock command fits. */
#define RL_ROUND_CMD_KEEP 4096

/* The bytes of round r's command's arguments. */
static size_t command_bytes(const rl_round *r) {
    size_t bytes = 0;
    for (int k = 0; k < r->argc; k++) bytes += r->lens[k];
    return bytes;
}

static int stale_takes_cleanup(const rl_node *node) {
    return node->stale && !node->stale->broken && !node->stale->sealed && node->stale->count < RL_STALE_MAX_OWED;
}

static void set_vote(rl_round *r, rl_vote *v, int state, const char *why) {
    if (v->state != RL_V_PENDING) return;
    v->state = state;
    if (why && !why[0]) v->why[0] = '\0';
    else if (why && why != v->why) { /* a plain bounded copy: this runs for every reply */
        size_t n = strnlen(why, sizeof v->why - 1);
        memcpy(v->why, why, n);
        v->why[n] = '\0';
    }
    if (state == RL_V_YES) r->yes++;
    else if (state == RL_V_NO) r->no++;
    else r->fail++;
}

/* Every vote still pending on node i fails with why (the node went down). */
static void fail_pending(rl_round *r, int i, const char *why, int timed_out) {
    if (!r || r->votes[i].state != RL_V_PENDING) return;
    r->votes[i].timed_out = timed_out;
    set_vote(r, &r->votes[i], RL_V_FAIL, why);
}

/* An answer of node j's that counted in round r no longer does: it becomes
 * a failure that can never count, with why. */
static void uncount(rl_round *r, int j, const char *why) {
    rl_vote *v = &r->votes[j];
    if (v->state == RL_V_YES) r->yes--;
    else r->no--;
    v->state = RL_V_PENDING; /* answered, but set_vote changes only a pending vote */
    set_vote(r, v, RL_V_FAIL, why);
    r->blocked++;
}

/* Node j's counted answer stops counting when its row is now known to be
 * a duplicate on another database (its twin's INFO came after it counted):
 * it was about other keys. Returns whether it did. */
static int uncount_if_elsewhere(const rl_client *c, rl_round *r, int j) {
    const rl_node *node = c->nodes[j];
    if ((r->votes[j].state != RL_V_YES && r->votes[j].state != RL_V_NO) || !rl_node_duplicate_elsewhere(c, node))
        return 0;
    char why[RL_ERR_REASON_MAX];
    snprintf(why, sizeof why, "same server as node %lld on another database; its answer does not count",
             (long long)node->duplicate_of);
    uncount(r, j, why);
    return 1;
}

/* One server listed twice (rows with the same run_id) has one vote in a
 * round. Both rows' commands ran on it, and the second to run found what
 * the first had done: a SET NX refused, a DEL with nothing left to delete.
 * So a yes from either row is the server's answer, counted once, and a no
 * counts only while no row of that server has said yes; this holds even
 * before both rows' INFO replies are in to mark one of them a duplicate.
 * Returns the row whose answer counts for the server when node i's answer
 * (state) must not, with the reason in why; else -1. A yes that comes
 * after the server's no, from a row on the same database, takes that no's
 * place; an answer counted before its row was known to be a duplicate on
 * another database (about other keys) stops counting. */
static int same_server_answered(const rl_client *c, rl_round *r, int i, int state, char *why, size_t whylen) {
    const rl_node *node = c->nodes[i];
    if (!node->run_id[0]) return -1;
    for (int j = 0; j < c->n; j++) {
        rl_vote *v = &r->votes[j];
        const rl_node *o = c->nodes[j];
        /* run_ids are 40 random hex digits: the first byte nearly always tells them apart */
        if (j == i || (v->state != RL_V_YES && v->state != RL_V_NO) || o->run_id[0] != node->run_id[0] ||
            strcmp(o->run_id, node->run_id) != 0)
            continue;
        if (uncount_if_elsewhere(c, r, j)) continue;
        if (state == RL_V_YES && v->state == RL_V_NO && o->ep.db == node->ep.db) {
            char gone[RL_ERR_REASON_MAX];
            snprintf(gone, sizeof gone,
                     "same server as node %lld, whose later yes is the server's answer; this no does not count",
                     (long long)node->id);
            uncount(r, j, gone);
            return -1; /* a server has at most one answer counted */
        }
        char shown[16]; /* the run_id's first 12 bytes at most, whole characters */
        rl_text_clean(shown, 13, node->run_id, strlen(node->run_id));
        snprintf(why, whylen, "same server as node %lld (run_id %s...), whose answer counts already; this one does not",
                 (long long)o->id, shown);
        return j;
    }
    return -1;
}

/* Whether last_error holds a standing reason (duplicate, replica, a node
 * check, INFO or ROLE refused) that a good answer must not wipe: a late
 * answer to a cleanup, say, comes right after the call it made fail. */
static int keeps_reason(const rl_client *c, const rl_node *node) {
    return node->duplicate_of || node->is_replica || node->setup_blind ||
           rl_client_node_unfit(c, node);
}

/* Keeps r's release (all of it but the script) for node, which still owes
 * its answer to the EVALSHA: see rl_node.release_op. */
static void keep_release(rl_node *node, const rl_round *r) {
    rl_buf *b = &node->release_args;
    b->len = b->off = 0;
    node->release_op = 0;
    for (int a = 0; a < r->argc; a++) {
        if (a == 1) continue;
        if (rl_buf_append(b, (const char *)&r->lens[a], sizeof r->lens[a]) != 0 ||
            rl_buf_append(b, r->argv[a], r->lens[a]) != 0)
            return; /* without memory, a late NOSCRIPT leaves the key to its TTL */
    }
    node->release_op = r->op;
    node->release_argc = r->argc;
}

/* A release decided without node i, whose EVALSHA answered NOSCRIPT late
 * (it never ran there): sent again in full, kept until answered (as an
 * owed cleanup), so the key does not stay there for its TTL. */
static void release_in_full(rl_client *c, int i, const rl_tag *tag) {
    rl_node *node = c->nodes[i];
    if (node->release_op != tag->op || !node->conn || node->conn->broken) return;
    node->release_op = 0;
    const char *argv[RL_DIGEST_ARGS_MAX];
    size_t lens[RL_DIGEST_ARGS_MAX];
    const char *p = node->release_args.data;
    for (int a = 0; a < node->release_argc; a++) {
        if (a == 1) {
            argv[a] = rl_evalsha_script(tag->script - 1, &lens[a]);
            continue;
        }
        memcpy(&lens[a], p, sizeof lens[a]);
        argv[a] = p + sizeof lens[a];
        p += sizeof lens[a] + lens[a];
    }
    if (rl_node_owe_cleanup(c, node, node->release_argc, argv, lens) == 0)
        rl_node_send_owed(node, node->conn, rl_now_us() + rl_client_timeout_us(c, node));
}

/* What an answer to a script that may go by digest says of node i's script
 * cache. Returns 1 when the answer is not the command's: an EVALSHA of this
 * round that did not run, sent again in full, whose vote waits for that. */
static int digest_answer(rl_client *c, rl_round *r, uint64_t op, int i, const rl_tag *tag, const rl_reply *rep) {
    rl_node *node = c->nodes[i];
    unsigned bit = 1u << (tag->script - 1);
    if (rep->type != REDIS_REPLY_ERROR) {
        node->scripts_cached |= bit; /* it ran: the node has it cached now */
        return 0;
    }
    if (!tag->by_digest) return 0;
    node->scripts_cached &= ~bit;
    int why = rl_evalsha_not_run(rep->str, rep->len);
    if (why == RL_EVALSHA_RAN) return 0; /* the script's own error: a vote like any */
    if (why == RL_EVALSHA_REFUSED) node->evalsha_refused = 1;
    if (!r || tag->op != op || r->votes[i].state != RL_V_PENDING) {
        if (tag->kind == RL_K_RELEASE) release_in_full(c, i, tag);
        return 0;
    }
    if (!node->conn || node->conn->broken) return 0;
    /* The first send's deadline still holds: a node answering NOSCRIPT
     * late must not cost the call a second timeout. */
    rl_tag again = *tag;
    again.by_digest = 0;
    RL_COUNT(node->stats.calls);
    return rl_conn_send(node->conn, &again, r->argc, r->argv, r->lens) == 0;
}

static void on_reply(rl_client *c, rl_round *r, uint64_t op, int i, const rl_tag *tag, const rl_reply *rep,
                     int64_t now) {
    rl_node *node = c->nodes[i];
    rl_node_mark_up(c, node);
    rl_node_on_noauth(node, rep); /* refused from now on, this reply included */
    if (!RL_KIND_IS_SETUP(tag->kind) && tag->sent_us) rl_stats_latency(&node->stats, now - tag->sent_us);
    if (RL_KIND_IS_SETUP(tag->kind)) {
        rl_node_on_setup_reply(c, node, tag->kind, rep);
        return;
    }
    if (tag->script && digest_answer(c, r, op, i, tag, rep)) return;
    if (!r || tag->op != op || r->votes[i].state != RL_V_PENDING) {
        /* A late reply to an earlier operation: it changes no decision, but
         * what the node said is still what users see in last_error. */
        long long value;
        char why[RL_ERR_REASON_MAX];
        rl_secrets sec = rl_node_secrets(node, NULL, 0);
        /* Its command's token is no longer known: its text is withheld. */
        sec.withhold = tag->kind != RL_K_WRITEBACK;
        int state = rl_vote_classify(tag->kind, rep, &sec, &value, why, sizeof why);
        /* After a failed AUTH or SELECT it ran as another user or on
         * another database: it stays owed, for the next connection. */
        if (tag->owed && !node->auth_failed) rl_node_owed_answered(node, tag->owed, state == RL_V_FAIL);
        if (tag->kind != RL_K_CLEANUP && tag->kind != RL_K_PING) { /* a vote that came after the decision */
            if (state == RL_V_YES) RL_COUNT(node->stats.yes);
            else if (state == RL_V_NO) RL_COUNT(node->stats.no);
            else RL_COUNT(node->stats.errors);
        }
        /* last_error keeps the AUTH/SELECT failure, and a refused node's
         * reason: what a late answer says of it (an error of the cleanup
         * of a call refused for an ACL) is no news. Other late errors are
         * what the node said last, as in a round (a replica's READONLY);
         * a good late answer wipes no standing reason. */
        if (node->auth_failed) return;
        if (state == RL_V_FAIL && !rl_client_node_refused(c, node))
            snprintf(node->last_error, sizeof node->last_error, "%s", why);
        else if (state != RL_V_FAIL && !keeps_reason(c, node))
            node->last_error[0] = '\0';
        if (state == RL_V_YES && tag->kind == RL_K_ACQUIRE_FENCED) rl_fence_late_yes(c, node, tag->op, value);
        return;
    }
    rl_vote *v = &r->votes[i];
    char why[sizeof v->why];
    rl_secrets sec = rl_node_secrets(node, r->secret, r->secretlen);
    sec.withhold = r->withhold;
    int state = rl_vote_classify(tag->kind, rep, &sec, &v->value, why, sizeof why);
    if (r->kind == RL_K_PING) { /* an answer, not a vote: nothing blocks it... */
        /* ...but a refused node does not answer as the lock calls need
         * (AUTH or SELECT failed, NOAUTH, INFO or ROLE unusable, or its
         * user may not run the scripts): the count agrees with the state.
         * A failed PING's own error (BUSY) is the freshest reason, except
         * beside a failed AUTH, whose reason says what to change. */
        if (node->auth_failed) state = RL_V_FAIL, snprintf(why, sizeof why, "%s", node->last_error);
        else if (state == RL_V_FAIL) snprintf(node->last_error, sizeof node->last_error, "%s", why);
        else if (rl_client_node_refused(c, node)) state = RL_V_FAIL, snprintf(why, sizeof why, "%s", node->last_error);
        set_vote(r, v, state, why);
        return;
    }
    if (state == RL_V_YES && r->nitems > 0)
        state = rl_vote_items(rep, r->items + (size_t)i * (size_t)r->nitems, r->nitems, why, sizeof why);
    /* A duplicate's or replica's answer is about another server's data, and
     * a node whose INFO and ROLE have not answered may be either: neither
     * its yes nor its no counts. The restart guard holds back yes votes only. */
    int blocked = 0;
    if ((state == RL_V_YES || (state == RL_V_NO && (node->duplicate_of || node->is_replica || !rl_node_known(node)))) &&
        rl_node_vote_blocked(c, node, r->guard_applies, now, why, sizeof why))
        state = RL_V_FAIL, blocked = 1;
    /* A node that cannot keep locks (evicting, cluster): no answer of its
     * counts, and the reason given is the check, not what it said. */
    if (rl_nodecheck_blocked(c, node, why, sizeof why)) state = RL_V_FAIL, blocked = 1;
    /* A connection whose AUTH or SELECT failed is not the user
     * or database the node was configured with, yet on a server whose default
     * user needs no password it still runs our commands: on another
     * database, so neither its yes nor its no counts. */
    if ((state == RL_V_YES || state == RL_V_NO) && node->auth_failed) state = RL_V_FAIL, blocked = 1;
    if (state == RL_V_YES || state == RL_V_NO) {
        int counted = same_server_answered(c, r, i, state, why, sizeof why);
        if (counted >= 0) {
            /* Both rows reach the same keys: what this one did is the server's too. */
            if (state == RL_V_YES && r->votes[counted].state == RL_V_YES && r->fold &&
                c->nodes[counted]->ep.db == node->ep.db)
                r->fold(r->inspect_ctx, counted, rep);
            state = RL_V_FAIL, blocked = 1;
        }
    }
    if (state == RL_V_FAIL && node->auth_failed) snprintf(why, sizeof why, "%s", node->last_error);
    if ((state == RL_V_YES || state == RL_V_NO) && r->inspect &&
        r->inspect(r->inspect_ctx, i, state, rep, why, sizeof why) != 0)
        state = RL_V_FAIL;
    if (state == RL_V_FAIL) snprintf(node->last_error, sizeof node->last_error, "%s", why);
    else if (!keeps_reason(c, node)) node->last_error[0] = '\0';
    if (state == RL_V_YES) RL_COUNT(node->stats.yes);
    else if (state == RL_V_NO) RL_COUNT(node->stats.no);
    else RL_COUNT(node->stats.errors);
    set_vote(r, v, state, why);
    r->blocked += blocked;
}

/* Whether conn owes a reply whose deadline has passed at now. */
static int overdue(const rl_conn *conn, int64_t now) {
    const rl_tag *oldest = rl_conn_oldest(conn);
    return oldest && now >= oldest->deadline_us;
}

/* Progress on conn (node i's current connection or its stalled one) after
 * a poll. Commands still waiting to be written (the connection was being
 * set up) may leave only now, and the clock is read again to judge them:
 * this process may have been paused after the poll, even between two
 * connections of one pump. When their deadline has passed by the time
 * they leave, this process was not running when it came (paused,
 * descheduled: such a pause timed out three nodes of a healthy five, whose
 * answers came 0.1 to 0.5 ms after the look that judged them), so the
 * node gets its timeout from then. A node whose connection never
 * completes is still judged at its deadline. */
static void progress(rl_client *c, int i, rl_conn *conn, short revents) {
    rl_node *node = c->nodes[i];
    int unsent = conn == node->conn && rl_conn_unsent(conn);
    rl_conn_progress(conn, revents);
    if (!unsent || rl_conn_unsent(conn)) return;
    int64_t sent = rl_now_us();
    if (overdue(conn, sent)) rl_conn_defer_deadlines(conn, sent + rl_client_timeout_us(c, node));
}

/* Reads every complete reply on conn (node i), seen at now. */
static void read_replies(rl_client *c, rl_round *r, uint64_t op, int i, rl_conn *conn, int64_t now) {
    rl_tag tag;
    rl_reply *rep;
    while (rl_conn_next_reply(conn, &tag, &rep) == 1) {
        if (conn == c->nodes[i]->conn) on_reply(c, r, op, i, &tag, rep, now);
        rl_reply_free(rep);
    }
}

/* Whether node's stalled connection is done with at now: broken, drained,
 * or past its keep time. */
static int stale_done(const rl_node *node, int64_t now) {
    const rl_conn *st = node->stale;
    return st && (st->broken || st->count == 0 || now >= node->stale_until_us);
}

/* After I/O: broken connections, stalled nodes, drained stale connections.
 * now is the time last_look judged by: a node counts as stalled only when a
 * look made after its deadline found nothing, even if this process was
 * paused between that look and here. */
static void check_nodes(rl_client *c, rl_round *r, int64_t now) {
    for (int i = 0; i < c->n; i++) {
        rl_node *node = c->nodes[i];
        if (stale_done(node, now)) {
            /* Drained: the node answers again; let the next round reconnect. */
            if (!node->stale->broken && node->stale->count == 0 && node->health == RL_HEALTH_DOWN) node->retry_at_us = now;
            rl_conn_close(node->stale);
            node->stale = NULL;
        }
        rl_conn *conn = node->conn;
        if (!conn) continue;
        if (conn->broken) {
            if (conn->count > 0) RL_COUNT(node->stats.errors); /* replies owed that will never come */
            char why[RL_ERR_REASON_MAX];
            snprintf(why, sizeof why, "%.*s", (int)sizeof why - 1, conn->err.msg);
            /* Broken before it was connected: its command never reached the server. */
            if (r && (conn->connecting || conn->handshaking)) r->votes[i].went_out = 0;
            rl_node_mark_down(c, node, why, 0); /* closes conn */
            fail_pending(r, i, why, 0);
            continue;
        }
        if (overdue(conn, now)) {
            char why[RL_ERR_REASON_MAX];
            snprintf(why, sizeof why, "no answer within %lld ms%s", (long long)(rl_client_timeout_us(c, node) / 1000),
                     rl_conn_stall_hint(conn));
            RL_COUNT(node->stats.timeouts);
            /* Still connecting, or in its TLS handshake: none of its
             * commands was written, so none can land late and there is
             * nothing to drain. Kept as the stalled one, it would keep the
             * node down after its path healed, until the kernel's next SYN
             * (1 s, 3 s, ... after the connect) or the keep time, and then
             * deliver commands that old: a SET with a fresh TTL. */
            int unwritten = conn->connecting || conn->handshaking;
            if (r && unwritten && r->votes[i].state == RL_V_PENDING) r->votes[i].went_out = 0;
            rl_node_mark_down(c, node, why, !unwritten);
            fail_pending(r, i, why, !unwritten);
        }
    }
}

/* A process descheduled or paused after ppoll returned (with only some nodes
 * ready) finds the other replies arrived meanwhile and their deadlines
 * passed; taking those for stalls would fail healthy nodes on a loaded host.
 * So a node whose deadline has passed by now gets one more look without
 * waiting before check_nodes may declare it stalled. */
static void last_look(rl_client *c, rl_round *r, uint64_t op, int64_t now) {
    for (int i = 0; i < c->n; i++) {
        rl_conn *conn = c->nodes[i]->conn;
        if (!conn || conn->broken || !overdue(conn, now)) continue;
        struct pollfd p = {.fd = conn->fd, .events = rl_conn_events(conn)};
        if (p.events && poll(&p, 1, 0) > 0) {
            progress(c, i, conn, p.revents);
            read_replies(c, r, op, i, conn, now);
        }
    }
}

/* No memory for the poll set (more than 8 nodes): every connection with
 * work is closed and its vote fails, so no caller loops on answers that
 * could never be read. */
static void drop_all(rl_client *c, rl_round *r) {
    for (int i = 0; i < c->n; i++) {
        rl_node *node = c->nodes[i];
        rl_conn_close(node->stale);
        node->stale = NULL;
        if (node->conn && rl_conn_events(node->conn)) rl_node_mark_down(c, node, "out of memory", 0);
        fail_pending(r, i, "out of memory", 0);
    }
}

/* One poll over every connection with work, waiting at most until until_us
 * or the earliest reply deadline; then handles what it found. now is the
 * time of a look just made (0: none), from which the wait is counted: a
 * little early only makes the wait a little longer, and every decision
 * after the poll is judged by a fresh look. Returns that look's time. */
static int64_t pump(rl_client *c, rl_round *r, uint64_t op, int64_t until_us, int64_t now) {
    struct pollfd pfd_small[16], *pfd = pfd_small;
    int who_small[16], *who = who_small;
    rl_conn *conn_small[16], **conns = conn_small;
    int cap = 2 * c->n, k = 0;
    if (cap > 16) {
        pfd = malloc((size_t)cap * sizeof *pfd);
        who = malloc((size_t)cap * sizeof *who);
        conns = malloc((size_t)cap * sizeof *conns);
        if (!pfd || !who || !conns) {
            drop_all(c, r);
            goto out;
        }
    }
    int64_t wake = until_us;
    for (int i = 0; i < c->n; i++) {
        rl_node *node = c->nodes[i];
        rl_conn *cs[2] = {node->conn, !r || r->polls_stale ? node->stale : NULL};
        for (int j = 0; j < 2; j++) {
            short ev = cs[j] ? rl_conn_events(cs[j]) : 0;
            if (!ev) continue;
            pfd[k] = (struct pollfd){.fd = cs[j]->fd, .events = ev};
            who[k] = i;
            conns[k++] = cs[j];
            /* A stalled connection's own deadlines are past: it is waited
             * on at most until it is given up. */
            const rl_tag *oldest = rl_conn_oldest(cs[j]);
            if (j == 0 && oldest && oldest->deadline_us < wake) wake = oldest->deadline_us;
            if (j == 1 && node->stale_until_us < wake) wake = node->stale_until_us;
        }
    }
    if (!now) now = rl_now_us();
    int64_t wait = wake > now ? wake - now : 0;
    struct timespec ts = {.tv_sec = wait / 1000000, .tv_nsec = (long)(wait % 1000000) * 1000};
    /* One connection waited on (one node, say) is read by a receive that
     * waits itself: a system call less per round than ppoll and recv. */
    int read_one = k == 1 && pfd[0].events == POLLIN ? rl_conn_wait_read(conns[0], wait) : -1;
    int ready = read_one >= 0 ? 0 : k ? ppoll(pfd, (nfds_t)k, &ts, NULL) : 0;
    now = rl_now_us(); /* before the replies are handled: their latency, and no stall judged late */
    if (read_one > 0) read_replies(c, r, op, who[0], conns[0], now);
    for (int j = 0; ready > 0 && j < k; j++) {
        if (!pfd[j].revents) continue;
        progress(c, who[j], conns[j], pfd[j].revents);
        read_replies(c, r, op, who[j], conns[j], now);
    }
    last_look(c, r, op, now);
    check_nodes(c, r, now);
out:
    if (pfd != pfd_small) {
        free(pfd);
        free(who);
        free(conns);
    }
    return now;
}

/* How often a stalled connection is looked at before a round even when
 * the round's own polls would read it. */
#define RL_STALE_LOOK_US 1000
/* How long without a round before connections are checked for a close by
 * the server (see rl_round_run): back-to-back calls pay nothing for it. */
#define RL_IDLE_LOOK_US 200000

/* Whether round r's polls include stalled connections: only when fewer of
 * its nodes have a connection than its quorum (the round may then be
 * decided without any poll: one node, say). Otherwise the looks before
 * rounds (needs_service) read them, and a round left waiting on one live
 * node is read by recv itself (pump), not by ppoll over it and a hung one. */
static int polls_stale(const rl_client *c, const rl_round *r) {
    int live = 0, stale = 0;
    for (int i = 0; i < c->n; i++) {
        const rl_node *node = c->nodes[i];
        if (node->stale) stale = 1;
        if (node->conn && (!r->only || r->only[i])) live++;
    }
    return stale && live < r->quorum;
}

/* Whether a look before round r could change what it does: check_nodes
 * has something to do at now, or a stalled connection may hold answers
 * that would end its node's wait. Whether the node is asked is decided as
 * the commands go out, before any poll, so a poll inside the round would
 * read those answers too late: the node would miss the round, which fails
 * if another node fails in it. The look is made whenever the round's polls
 * include stalled connections (r->polls_stale), and otherwise at most
 * every RL_STALE_LOOK_US: a look costs a system call, and a hung node's
 * stalled connection stays for up to a minute. A node that answers again
 * within that much of a round that loses another node can still miss it,
 * as one answering just after the look always could. */
static int needs_service(const rl_client *c, const rl_round *r, int64_t now) {
    int stale = 0;
    for (int i = 0; i < c->n; i++) {
        const rl_node *node = c->nodes[i];
        if (node->conn && (node->conn->broken || overdue(node->conn, now))) return 1;
        if (node->stale) stale = 1;
    }
    return r->polls_stale || (stale && now - c->looked_us >= RL_STALE_LOOK_US);
}

void rl_round_service(rl_client *c, int64_t wait_us) {
    int64_t now = rl_now_us();
    pump(c, NULL, 0, now + (wait_us > 0 ? wait_us : 0), now);
}

/* Whether a connection still owes replies that may come: a broken one's
 * never will (the next round's check_nodes closes it), and waiting for
 * them would leave nothing but a hung node's stalled connection to wake
 * the wait. */
static int anything_pending(const rl_client *c) {
    for (int i = 0; i < c->n; i++) {
        const rl_conn *conn = c->nodes[i]->conn;
        if (conn && !conn->broken && conn->count > 0) return 1;
    }
    return 0;
}

void rl_round_settle(rl_client *c) {
    pthread_mutex_lock(&c->mu);
    while (anything_pending(c)) pump(c, NULL, 0, INT64_MAX, 0);
    /* A connection that broke after its round (a cleanup's send) is
     * settled too: its node is marked down now, not at the next round. */
    check_nodes(c, NULL, rl_now_us());
    pthread_mutex_unlock(&c->mu);
}

/* Success is decided by a quorum of yes votes. Failure is decided only once
 * it is also known which failure it is: a quorum answered (held elsewhere:
 * NULL in SQL) or a quorum cannot answer any more (an error). */
/* A batched round (nitems > 0) is decided when every key is: a quorum of
 * yes answers for it, or enough no answers (and blocked nodes) that no
 * quorum can be had, as strict_no decides for one key. */
static int items_decided(const rl_client *c, const rl_round *r) {
    for (int k = 0; k < r->nitems; k++) {
        int yes = 0, no = 0;
        for (int i = 0; i < c->n; i++) {
            if (r->votes[i].state != RL_V_YES) continue;
            if (r->items[(size_t)i * (size_t)r->nitems + (size_t)k]) yes++;
            else no++;
        }
        if (yes < r->quorum && no + r->blocked <= r->asked - r->quorum) return 0;
    }
    return 1;
}

/* Whether the rows are on more than one database: only then can a row be
 * a duplicate whose answers are about other keys. */
static int mixed_databases(const rl_client *c) {
    for (int i = 1; i < c->n; i++)
        if (c->nodes[i]->ep.db != c->nodes[0]->ep.db) return 1;
    return 0;
}

/* Whether an answer counted in round r may still turn out to be about
 * other keys: its row may be the duplicate, on another database, of a row
 * with a lower id that has not answered and is not known on its current
 * connection (its INFO would tell). Until that row answers or fails, the
 * answer must not decide the round. */
static int answer_unsettled(const rl_client *c, const rl_round *r) {
    if (!mixed_databases(c)) return 0;
    for (int i = 0; i < c->n; i++) {
        if (r->votes[i].state != RL_V_YES && r->votes[i].state != RL_V_NO) continue;
        const rl_node *node = c->nodes[i];
        for (int j = 0; j < c->n; j++) {
            const rl_node *o = c->nodes[j];
            if (o->id < node->id && o->ep.db != node->ep.db && r->votes[j].state == RL_V_PENDING && !rl_node_known(o))
                return 1;
        }
    }
    return 0;
}

/* Whether round r's answers are votes that a duplicate on another
 * database must not give: not a ping's or a writer-waiting marker's
 * (nothing is decided on those, and they end at the first answer). */
static int votes_on_keys(const rl_round *r) {
    return r->kind != RL_K_PING && r->kind != RL_K_MARK;
}

static int decided(const rl_client *c, const rl_round *r) {
    if (r->wait_all) return 0;
    if (votes_on_keys(r) && answer_unsettled(c, r)) return 0;
    if (r->nitems > 0) return items_decided(c, r);
    if (r->yes >= r->quorum) return 1;
    if (r->strict_no) /* "not ours" for certain, or wait for every answer */
        return r->no + r->blocked > r->asked - r->quorum;
    int impossible = r->no + r->fail > r->asked - r->quorum;
    int kind_known = r->yes + r->no >= r->quorum || r->fail > r->asked - r->quorum;
    return impossible && kind_known;
}

void rl_round_run(rl_client *c, rl_round *r) {
    uint64_t op = r->op = ++c->op;
    r->yes = r->no = r->fail = r->asked = r->blocked = 0;
    r->start_us = rl_now_us();
    /* Replies owed by earlier rounds are read by this round's polls; only a
     * node whose answer is overdue, a broken connection or a stalled one
     * still draining must be settled (marked down) before anything is sent
     * to it. Looking without that costs a system call per round. */
    r->polls_stale = polls_stale(c, r);
    int looked = needs_service(c, r, r->start_us);
    if (looked) {
        rl_round_service(c, 0);
        c->looked_us = r->start_us;
        r->polls_stale = polls_stale(c, r); /* of the connections the look left */
    }
    /* A server closes a connection left idle (its timeout setting, a
     * managed service's idle limit, a NAT or load balancer) and says so
     * only to a read: a command sent on it would be lost, and the node's
     * vote with it. After a pause, each connection is looked at first (one
     * recv that does not wait) and made again in this round when it was
     * closed: it owed nothing, so nothing it carried can be overtaken. */
    if (r->start_us - c->used_us >= RL_IDLE_LOOK_US)
        for (int i = 0; i < c->n; i++) {
            rl_node *node = c->nodes[i];
            if (node->conn && rl_conn_closed_while_idle(node->conn)) {
                rl_conn_close(node->conn);
                node->conn = NULL;
            }
        }
    /* A script every cycle runs goes by digest to the nodes that have it cached. */
    int script = -1;
    if (c->set.evalsha && r->argc >= 2 && r->argc <= RL_DIGEST_ARGS_MAX && r->lens[0] == 4 &&
        memcmp(r->argv[0], "EVAL", 4) == 0)
        script = rl_evalsha_index(r->argv[1], r->lens[1]);
    const char *digest = script >= 0 ? rl_evalsha_digest(script) : NULL;
    const char *sha_argv[RL_DIGEST_ARGS_MAX];
    size_t sha_lens[RL_DIGEST_ARGS_MAX];
    if (digest) {
        memcpy(sha_argv, r->argv, (size_t)r->argc * sizeof *sha_argv);
        memcpy(sha_lens, r->lens, (size_t)r->argc * sizeof *sha_lens);
        sha_argv[0] = "EVALSHA", sha_lens[0] = 7;
        sha_argv[1] = digest, sha_lens[1] = 40;
    }
    int64_t now = r->start_us;
    int formatted[2] = {0, 0}; /* round_cmd[by_digest] holds this round's command */
    for (int i = 0; i < c->n; i++) {
        rl_node *node = c->nodes[i];
        rl_vote *v = &r->votes[i];
        memset(v, 0, sizeof *v);
        if (r->only && !r->only[i]) continue;
        /* Read afresh for each node: a pause since the last reading would
         * leave its deadline already past when its command goes out. The
         * first node takes start_us when no look (a system call) came
         * between: only a few instructions did, and a pause can fall just
         * after any reading. */
        if (r->asked++ > 0 || looked) now = rl_now_us();
        v->state = RL_V_PENDING;
        /* No new connection while the stalled one still owes
         * replies. A release sent on a new connection could overtake a SET
         * still queued on the stalled one (the server reads two sockets in no
         * fixed order: that key lingered for its whole TTL, see
         * test_ghost_set_with_later_calls_while_stalled_3n), and a second stall
         * closed the first stalled connection with its ghosts. So the node
         * stays down until that connection answers (then it is retried at
         * once, see check_nodes), breaks, or its keep time ends. */
        int owes = node->stale && !node->stale->broken && node->stale->count > 0 && now < node->stale_until_us;
        if (node->health == RL_HEALTH_DOWN && (now < node->retry_at_us || owes)) {
            int64_t next = owes && node->stale_until_us > node->retry_at_us ? node->stale_until_us : node->retry_at_us;
            set_vote(r, v, RL_V_FAIL, NULL);
            v->down_next_ms = 1 + (next - now + 999) / 1000;
            v->down_owes = owes;
            /* A release still reaches a stalled node, behind whatever it
             * owes; through the next connection when the stalled one takes
             * nothing new. */
            if ((r->kind == RL_K_RELEASE || r->kind == RL_K_RELEASE_MANY) && node->stale) {
                if (stale_takes_cleanup(node)) {
                    rl_tag tag = {.op = op, .kind = RL_K_CLEANUP, .deadline_us = node->stale_until_us, .sent_us = now};
                    rl_conn_send(node->stale, &tag, r->argc, r->argv, r->lens);
                } else if (owes && node->stale->sealed && command_bytes(r) <= RL_OWED_RELEASE_MAX) {
                    rl_node_owe_cleanup(c, node, r->argc, r->argv, r->lens);
                }
            }
            continue;
        }
        /* A node's deadline counts from when its command is
         * written, not from r->start_us: if this process is descheduled in
         * between (a loaded host; the checker saw every node of a clean run
         * "fail"), a deadline already past made healthy nodes look stalled
         * before they had any chance to answer. Still bounded (writing does
         * not block), and validity is still measured from r->start_us. */
        int64_t deadline = now + rl_client_timeout_us(c, node);
        if (!node->conn && rl_node_connect(c, node, op, deadline) != 0) {
            if (r->kind != RL_K_PING) RL_COUNT(node->stats.errors);
            set_vote(r, v, RL_V_FAIL, node->last_error);
            continue;
        }
        /* One answered with an error (LOADING) goes again, ahead of this round's command. */
        if (node->owed.n) rl_node_send_owed(node, node->conn, deadline);
        if (r->before) r->before(r->before_ctx, c, node, now, deadline);
        rl_tag tag = {.op = op, .kind = r->kind, .deadline_us = deadline, .sent_us = now,
                      .script = (unsigned char)(script + 1)};
        tag.by_digest = digest && (node->scripts_cached >> script & 1) && !node->evalsha_refused;
        RL_COUNT(node->stats.calls);
        const char *const *argv = tag.by_digest ? sha_argv : r->argv;
        const size_t *lens = tag.by_digest ? sha_lens : r->lens;
        if (r->node_argv) { /* a command of its own, never by digest: formatted for this node alone */
            tag.by_digest = 0;
            argv = r->node_argv[i];
            lens = r->node_lens[i];
        }
        /* Formatted once for every node it goes to (with one node, right
         * into its connection); without memory for that, each connection
         * formats its own (and fails as it would). */
        rl_buf *cmd = &c->round_cmd[tag.by_digest];
        if (!formatted[tag.by_digest] && c->n > 1 && !r->node_argv) {
            cmd->len = cmd->off = 0;
            formatted[tag.by_digest] = rl_buf_append_command(cmd, r->argc, argv, lens) == 0;
        }
        int sent = formatted[tag.by_digest] ? rl_conn_send_resp(node->conn, &tag, cmd->data, cmd->len)
                                            : rl_conn_send(node->conn, &tag, r->argc, argv, lens);
        if (sent != 0) {
            if (r->kind != RL_K_PING) RL_COUNT(node->stats.errors);
            char why[RL_ERR_REASON_MAX];
            snprintf(why, sizeof why, "%.*s", (int)sizeof why - 1, node->conn->err.msg);
            rl_node_mark_down(c, node, why, 0);
            set_vote(r, v, RL_V_FAIL, why);
        } else {
            v->went_out = 1;
            v->by_digest = tag.by_digest;
        }
    }
    int64_t give_up = r->give_up_after_us > 0 ? r->start_us + r->give_up_after_us : INT64_MAX;
    while (!decided(c, r) && r->yes + r->no + r->fail < r->asked && now < give_up) {
        now = pump(c, r, op, give_up, now);
        /* Answers counted before a twin's INFO showed them to be about other keys. */
        for (int i = 0; votes_on_keys(r) && i < c->n; i++) uncount_if_elsewhere(c, r, i);
    }
    r->end_us = c->used_us = rl_now_us();
    if (r->kind == RL_K_RELEASE && script >= 0)
        for (int i = 0; i < c->n; i++)
            if (r->votes[i].state == RL_V_PENDING && r->votes[i].by_digest) keep_release(c->nodes[i], r);
    /* A long command (acquire_many's) leaves no large scratch behind. */
    for (int d = 0; d < 2; d++)
        if (c->round_cmd[d].cap > RL_ROUND_CMD_KEEP) rl_buf_free(&c->round_cmd[d]);
}

int rl_round_sent(const rl_client *c, const rl_round *r) {
    int n = 0;
    for (int i = 0; i < c->n; i++) n += r->votes[i].went_out != 0;
    return n;
}

/* Sends a cleanup to node on conn (its live connection or its stalled one)
 * without waiting for the answer; NULL or broken: the node's next
 * connection carries it. */
static void cleanup_on(rl_client *c, rl_node *node, rl_conn *conn, int argc, const char *const *argv,
                       const size_t *lens) {
    if (!conn || conn->broken) {
        /* Its connection broke (in this round or a later one, such as
         * a fence write-back) or stalled beyond use: the next one
         * carries the cleanup. */
        rl_node_owe_cleanup(c, node, argc, argv, lens);
        return;
    }
    int64_t now = rl_now_us(), deadline = conn == node->stale ? node->stale_until_us : now + rl_client_timeout_us(c, node);
    /* Kept until answered, so a connection that breaks before it
     * answers (or an error such as LOADING) does not lose it. */
    if (conn == node->conn && rl_node_owe_cleanup(c, node, argc, argv, lens) == 0) {
        rl_node_send_owed(node, conn, deadline);
        return;
    }
    rl_tag tag = {.op = c->op, .kind = RL_K_CLEANUP, .deadline_us = deadline, .sent_us = now};
    rl_conn_send(conn, &tag, argc, argv, lens);
}

void rl_round_cleanup(rl_client *c, const rl_round *r, int argc, const char *const *argv, const size_t *lens) {
    for (int i = 0; i < c->n; i++) {
        const rl_vote *v = &r->votes[i];
        rl_node *node = c->nodes[i];
        /* Every node the command went to may hold the key, a FAIL that
         * answered too (a yes that did not count: failed AUTH, replica,
         * duplicate, restart guard), unless it said a plain no (the key
         * holds another token). */
        if (!v->went_out || v->state == RL_V_NO) continue;
        rl_conn *conn = node->conn;
        if (v->state == RL_V_FAIL && v->timed_out) conn = stale_takes_cleanup(node) ? node->stale : NULL;
        cleanup_on(c, node, conn, argc, argv, lens);
    }
}

void rl_round_cleanup_connected(rl_client *c, int argc, const char *const *argv, const size_t *lens) {
    for (int i = 0; i < c->n; i++) {
        rl_node *node = c->nodes[i];
        /* No connection now: what reached the node before its last one
         * went is left to expire by itself (see rl_round.h). */
        if (!node->conn && !node->stale) continue;
        rl_conn *conn = node->conn ? node->conn : stale_takes_cleanup(node) ? node->stale : NULL;
        cleanup_on(c, node, conn, argc, argv, lens);
    }
}

void rl_round_owe_broken(rl_client *c, const rl_round *r) {
    size_t bytes = 0; /* counted once a node needs it: not on every release */
    for (int i = 0; i < c->n; i++) {
        const rl_vote *v = &r->votes[i];
        rl_node *node = c->nodes[i];
        /* The round closed a connection that broke (check_nodes); a timed
         * out one stalled instead, and carries what it owes itself. */
        if (!v->went_out || v->state != RL_V_FAIL || v->timed_out || (node->conn && !node->conn->broken)) continue;
        if (!bytes) bytes = command_bytes(r);
        /* A node down for long keeps what it is owed for up to the largest
         * TTL: a large release_many is left to its keys' TTLs instead. */
        if (bytes > RL_OWED_RELEASE_MAX) return;
        rl_node_owe_cleanup(c, node, r->argc, r->argv, r->lens);
    }
}

void rl_round_send_late(rl_client *c, const rl_round *r, int argc, const char *const *argv, const size_t *lens) {
    for (int i = 0; i < c->n; i++) {
        const rl_vote *v = &r->votes[i];
        rl_node *node = c->nodes[i];
        rl_conn *conn = NULL;
        if (v->state == RL_V_PENDING) conn = node->conn;
        else if (v->state == RL_V_FAIL && v->timed_out && stale_takes_cleanup(node)) conn = node->stale;
        if (!conn || conn->broken) continue;
        int64_t now = rl_now_us(), deadline = conn == node->stale ? node->stale_until_us : now + rl_client_timeout_us(c, node);
        rl_tag tag = {.op = c->op, .kind = RL_K_CLEANUP, .deadline_us = deadline, .sent_us = now};
        rl_conn_send(conn, &tag, argc, argv, lens);
    }
}

void rl_round_describe_failures(const rl_client *c, const rl_round *r, char *buf, size_t buflen) {
    size_t used = strlen(buf);
    int shown = 0, more = 0;
    for (int i = 0; i < c->n; i++) {
        const rl_vote *v = &r->votes[i];
        if (v->state != RL_V_FAIL) continue;
        if (shown == RL_ROUND_FAILURES_SHOWN || used + 1 >= buflen) {
            more++;
            continue;
        }
        char name[320];
        rl_node_name(c->nodes[i], name, sizeof name);
        char down[sizeof v->why];
        const char *why = v->why;
        if (v->down_next_ms > 0) { /* written only now: see rl_vote */
            snprintf(down, sizeof down, "%.160s (down; next try in %lld ms%s)", c->nodes[i]->last_error,
                     v->down_next_ms - 1, v->down_owes ? " at most, or as soon as it answers" : "");
            why = down;
        }
        int k = snprintf(buf + used, buflen - used, "%s%s: %s", shown ? "; " : "", name, why);
        shown++;
        if (k < 0) break;
        used += (size_t)k;
        if (used >= buflen) used = buflen - 1;
    }
    if (more > 0 && used + 1 < buflen)
        snprintf(buf + used, buflen - used, "; and %d more (see redlock_nodes.last_error)", more);
}
