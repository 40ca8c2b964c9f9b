/* rl_node: one node's health: connecting with set-up commands, marking it
 * down with a growing backoff, reading what INFO and ROLE say about it, and
 * deciding whether its yes vote may count (see rl_client.h).
 * SPDX-License-Identifier: BSD-3-Clause */
#include "rl_client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_clock.h"
#include "rl_random.h"

void rl_node_name(const rl_node *node, char *buf, size_t buflen) {
    int v6 = strchr(node->ep.host, ':') != NULL;
    snprintf(buf, buflen, "node %lld %s%s%s:%d", (long long)node->id, v6 ? "[" : "", node->ep.host, v6 ? "]" : "",
             node->ep.port);
}

static int send_setup(rl_conn *conn, uint64_t op, int kind, int64_t deadline, int argc, const char **argv) {
    size_t lens[4];
    for (int i = 0; i < argc; i++) lens[i] = strlen(argv[i]);
    rl_tag tag = {.op = op, .kind = kind, .deadline_us = deadline};
    return rl_conn_send(conn, &tag, argc, argv, lens);
}

int rl_node_auth_argv(const rl_node *node, const char *argv[3]) {
    if (!node->ep.password && !node->ep.username) return 0;
    int argc = 0;
    argv[argc++] = "AUTH";
    if (node->ep.username) argv[argc++] = node->ep.username;
    argv[argc++] = node->ep.password ? node->ep.password : "";
    return argc;
}

int rl_node_connect(rl_client *c, rl_node *node, uint64_t op, int64_t deadline_us) {
    char err[160];
    rl_conn *conn = rl_conn_open((const struct sockaddr *)&node->addr, node->addrlen, err, sizeof err);
    if (!conn) {
        rl_node_mark_down(c, node, err, 0);
        return -1;
    }
    int rc = 0;
    const char *auth[3];
    int auth_argc = rl_node_auth_argv(node, auth);
    if (auth_argc) rc |= send_setup(conn, op, RL_K_AUTH, deadline_us, auth_argc, auth);
    if (node->ep.db) {
        char db[16];
        snprintf(db, sizeof db, "%d", node->ep.db);
        const char *argv[2] = {"SELECT", db};
        rc |= send_setup(conn, op, RL_K_SELECT, deadline_us, 2, argv);
    }
    const char *info[2] = {"INFO", "server"};
    const char *role[1] = {"ROLE"};
    rc |= send_setup(conn, op, RL_K_INFO, deadline_us, 2, info);
    rc |= send_setup(conn, op, RL_K_ROLE, deadline_us, 1, role);
    if (rc != 0) {
        rl_node_mark_down(c, node, conn->err[0] ? conn->err : "out of memory", 0);
        rl_conn_close(conn);
        return -1;
    }
    node->conn = conn;
    node->auth_failed = 0;
    return 0;
}

void rl_node_mark_down(rl_client *c, rl_node *node, const char *why, int stalled) {
    int64_t now = rl_now_us();
    if (node->conn) {
        if (stalled && !node->conn->broken) {
            rl_conn_close(node->stale);
            node->stale = node->conn;
            /* Kept as long as a ghost SET on it could matter (the largest TTL),
             * but at most a minute, so a silently dead path does not keep the
             * node out for days; at least a second. */
            int64_t keep = c->max_ttl_ms < 60000 ? c->max_ttl_ms : 60000;
            if (keep < 1000) keep = 1000;
            node->stale_until_us = now + keep * 1000;
        } else {
            rl_conn_close(node->conn);
        }
        node->conn = NULL;
    }
    int64_t b = node->backoff_ms ? node->backoff_ms * 2 : c->set.reconnect_min_ms;
    if (b > c->set.reconnect_max_ms) b = c->set.reconnect_max_ms;
    if (b < c->set.reconnect_min_ms) b = c->set.reconnect_min_ms;
    node->backoff_ms = b;
    /* Up to a quarter less, so many clients do not reconnect in step. */
    node->retry_at_us = now + rl_random_between(b * 750, b * 1000);
    node->health = RL_HEALTH_DOWN;
    snprintf(node->last_error, sizeof node->last_error, "%s", why);
}

void rl_node_mark_up(rl_node *node) {
    if (node->health != RL_HEALTH_UP) node->last_error[0] = '\0';
    node->health = RL_HEALTH_UP;
    node->backoff_ms = 0;
    node->retry_at_us = 0;
}

/* Finds "name:value\r\n" in an INFO text; copies value into out. */
static int info_field(const char *text, const char *name, char *out, size_t outlen) {
    size_t nl = strlen(name);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, name, nl) == 0 && p[nl] == ':') {
            const char *v = p + nl + 1;
            size_t k = strcspn(v, "\r\n");
            if (k >= outlen) k = outlen - 1;
            memcpy(out, v, k);
            out[k] = '\0';
            return 0;
        }
    }
    return -1;
}

static void on_info(rl_client *c, rl_node *node, const rl_reply *r) {
    char run_id[48], uptime[32];
    if (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS) return;
    if (info_field(r->str, "run_id", run_id, sizeof run_id) != 0) return;
    int64_t now = rl_now_us();
    int restarted = node->run_id[0] && strcmp(node->run_id, run_id) != 0;
    snprintf(node->run_id, sizeof node->run_id, "%s", run_id);

    /* The same server listed twice gets one vote: the lower id keeps it. */
    node->duplicate_of = 0;
    for (int i = 0; i < c->n; i++) {
        rl_node *o = c->nodes[i];
        if (o == node || strcmp(o->run_id, run_id) != 0) continue;
        if (o->id < node->id) {
            if (!node->duplicate_of || o->id < node->duplicate_of) node->duplicate_of = o->id;
        } else if (!o->duplicate_of || node->id < o->duplicate_of) {
            o->duplicate_of = node->id;
            /* Fix (issue 3): say why on the other row too, or a duplicate whose
             * INFO came first shows no reason in redlock_nodes.last_error. */
            snprintf(o->last_error, sizeof o->last_error,
                     "same server as node %lld (run_id %.12s...); its votes do not count", (long long)node->id, run_id);
        }
    }
    if (node->duplicate_of)
        snprintf(node->last_error, sizeof node->last_error, "same server as node %lld (run_id %.12s...); its votes do not count",
                 (long long)node->duplicate_of, run_id);

    if (c->set.restart_guard && info_field(r->str, "uptime_in_seconds", uptime, sizeof uptime) == 0) {
        long long up_s = strtoll(uptime, NULL, 10); /* a broken server may say anything */
        if (up_s < 0) up_s = 0;
        if (up_s > INT64_MAX / 1000) up_s = INT64_MAX / 1000;
        int64_t up_ms = (int64_t)up_s * 1000, hold_ms = 0;
        if (restarted) hold_ms = c->max_ttl_ms;
        if (up_ms < c->max_ttl_ms && c->max_ttl_ms - up_ms > hold_ms) hold_ms = c->max_ttl_ms - up_ms;
        if (hold_ms > 0) node->guard_until_us = now + hold_ms * 1000;
    }
}

void rl_node_on_setup_reply(rl_client *c, rl_node *node, int kind, const rl_reply *r) {
    int is_err = r->type == REDIS_REPLY_ERROR;
    switch (kind) {
    case RL_K_AUTH:
        node->auth_failed = is_err;
        if (is_err) snprintf(node->last_error, sizeof node->last_error, "AUTH failed: %s", r->str);
        break;
    case RL_K_SELECT:
        /* Fix (issue 3): a failed SELECT leaves the connection on database 0;
         * like a failed AUTH, its yes votes must not count (rl_round.c). */
        if (is_err && !node->auth_failed) /* after a failed AUTH, that is the reason to show */
            snprintf(node->last_error, sizeof node->last_error, "SELECT %d failed: %s", node->ep.db, r->str);
        if (is_err) node->auth_failed = 1;
        break;
    case RL_K_INFO:
        if (!is_err) on_info(c, node, r);
        break;
    case RL_K_ROLE:
        if (!is_err && r->type == REDIS_REPLY_ARRAY && r->elements > 0 && r->element[0]->str) {
            node->is_replica = strcmp(r->element[0]->str, "master") != 0;
            if (node->is_replica)
                snprintf(node->last_error, sizeof node->last_error, "node is a %s, not a master; its votes do not count",
                         r->element[0]->str);
        }
        break;
    }
}

int rl_node_vote_blocked(const rl_client *c, const rl_node *node, int guard_applies, char *why, size_t whylen) {
    if (node->duplicate_of) {
        snprintf(why, whylen, "same server as node %lld; its vote does not count", (long long)node->duplicate_of);
        return 1;
    }
    if (node->is_replica) {
        snprintf(why, whylen, "node is a replica; its vote does not count");
        return 1;
    }
    int64_t now = rl_now_us();
    if (guard_applies && c->set.restart_guard && node->guard_until_us > now) {
        snprintf(why, whylen, "node restarted recently; restart_guard holds its vote for %lld ms more",
                 (long long)((node->guard_until_us - now + 999) / 1000));
        return 1;
    }
    return 0;
}
