/* rl_node: one node's health: connecting with set-up commands, marking it
 * down with a growing backoff, reading what INFO and ROLE say about it, and
 * deciding whether its yes vote may count (see rl_node.h).
 * SPDX-License-Identifier: BSD-3-Clause */
#include "rl_node.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_acl.h"
#include "rl_clock.h"
#include "rl_nodecheck.h"
#include "rl_random.h"
#include "rl_text.h"

void rl_node_name(const rl_node *node, char *buf, size_t buflen) {
    int v6 = strchr(node->ep.host, ':') != NULL;
    snprintf(buf, buflen, "node %lld %s%s%s:%d", (long long)node->id, v6 ? "[" : "", node->ep.host, v6 ? "]" : "",
             node->ep.port);
}

rl_conn *rl_node_open(rl_client *c, rl_node *node, rl_error *err) {
    if (node->ep.tls && rl_client_tls_prepare(c, node, 0, err) != 0) return NULL;
    rl_conn *conn = rl_conn_open((const struct sockaddr *)&node->addr, node->addrlen, err);
    if (!conn || !node->ep.tls) return conn;
    SSL *ssl = rl_tls_new(&node->tls, conn->fd, node->ep.host, err);
    if (!ssl) {
        rl_conn_close(conn);
        return NULL;
    }
    rl_conn_use_tls(conn, ssl);
    return conn;
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
    node->auth_failed = 0; /* an earlier connection's: this one has not said yet */
    rl_error err;
    rl_conn *conn = rl_node_open(c, node, &err);
    if (!conn) {
        rl_node_mark_down(c, node, err.msg, 0);
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
    const char *memory[2] = {"INFO", "memory"}, *cluster[2] = {"INFO", "cluster"};
    rc |= send_setup(conn, op, RL_K_NODECHECK, deadline_us, 2, memory);
    rc |= send_setup(conn, op, RL_K_NODECHECK, deadline_us, 2, cluster);
    /* Last, so that its answer says every set-up reply is in (rl_node.setup_done). */
    char key[1024 + sizeof RL_ACL_PROBE_KEY]; /* key_prefix has at most 1024 bytes */
    int keylen = snprintf(key, sizeof key, "%.1024s%s", c->set.key_prefix, RL_ACL_PROBE_KEY);
    size_t probe_len;
    const char *probe[4] = {"EVAL", rl_acl_probe_script(&probe_len), "0", key};
    size_t probe_lens[4] = {4, probe_len, 1, keylen > 0 ? (size_t)keylen : 0};
    rl_tag probe_tag = {.op = op, .kind = RL_K_ACL, .deadline_us = deadline_us};
    rc |= rl_conn_send(conn, &probe_tag, 4, probe, probe_lens);
    /* Behind AUTH and SELECT, so they run as our user on our database. */
    if (++node->conn_serial == 0) node->conn_serial = 1; /* 0 marks an owed cleanup not sent */
    rc |= rl_node_send_owed(node, conn, deadline_us);
    if (rc != 0) {
        rl_node_mark_down(c, node, conn->err.msg, 0); /* a failed send always says why */
        rl_conn_close(conn);
        return -1;
    }
    node->conn = conn;
    node->scripts_cached = 0; /* a new connection: nothing known to be cached until it runs a script */
    node->evalsha_refused = 0;
    /* Written again on it before its first lock: the node may be another
     * server now, or have lost them. */
    node->details_gen = 0;
    node->details_retry_us = 0;
    /* What INFO and ROLE said belongs to the connection they came on: until
     * they have answered on this one, the node may be another server. */
    node->info_known = node->role_known = 0;
    node->checks_known = node->check_reported = 0;
    node->acl_missing = 0;
    node->setup_done = node->setup_blind = 0;
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
    int was_down = node->health == RL_HEALTH_DOWN;
    node->health = RL_HEALTH_DOWN;
    /* A server that refused AUTH (or SELECT) may close the connection
     * right after (Redis does when the next command is longer than it
     * allows a client not yet authenticated): the refusal stays the reason. */
    if (!(node->auth_failed && node->last_error[0])) snprintf(node->last_error, sizeof node->last_error, "%s", why);
    if (!was_down) {
        RL_COUNT(node->stats.down);
        char name[320], msg[640];
        rl_node_name(node, name, sizeof name);
        snprintf(msg, sizeof msg, "redlock: %s marked down: %.255s", name, node->last_error);
        rl_client_report(c, &(rl_event){.kind = RL_EVENT_NODE_DOWN, .node_id = node->id,
                         .msg = msg});
    }
}

void rl_node_drop_tls_connections(rl_client *c) {
    for (int i = 0; i < c->n; i++) {
        rl_node *node = c->nodes[i];
        if (!node->ep.tls) continue;
        rl_conn_close(node->sub);
        node->sub = NULL;
        node->sub_ready = 0;
        if (node->conn && node->conn->count > 0 && !node->conn->broken && !node->stale) {
            /* Replies still owed (a SET may be among them): it drains as a
             * stalled connection does, so nothing sent on the next one
             * overtakes what it carries; the node is retried once they are in. */
            rl_node_mark_down(c, node, "a tls_* setting changed: reconnecting with it", 1);
            node->retry_at_us = rl_now_us();
        } else if (node->conn) {
            rl_conn_close(node->conn);
            node->conn = NULL;
        }
        /* A stalled one drains, and votes no more; nothing new goes out on
         * it either (a token, say, to a peer the new settings would not
         * trust): what it would have carried is owed to the next one. */
        if (node->stale) node->stale->sealed = 1;
    }
}

int rl_node_owe_cleanup(const rl_client *c, rl_node *node, int argc, const char *const *argv, const size_t *lens) {
    if (node->owed.n >= RL_NODE_OWED_MAX) return -1;
    rl_owed *o = &node->owed.e[node->owed.n];
    memset(o, 0, sizeof *o);
    if (rl_buf_append_command(&o->cmd, argc, argv, lens) != 0) {
        rl_buf_free(&o->cmd);
        return -1;
    }
    if (++node->owed.last_id == 0) node->owed.last_id = 1; /* 0 marks a command that is none */
    o->id = node->owed.last_id;
    o->until_us = rl_now_us() + c->max_ttl_ms * 1000; /* the attempt's key is gone by then */
    node->owed.n++;
    return 0;
}

static void owed_remove(rl_node *node, int k) {
    rl_buf_free(&node->owed.e[k].cmd);
    memmove(&node->owed.e[k], &node->owed.e[k + 1], (size_t)(node->owed.n - k - 1) * sizeof node->owed.e[0]);
    node->owed.n--;
}

int rl_node_send_owed(rl_node *node, rl_conn *conn, int64_t deadline_us) {
    int64_t now = rl_now_us();
    int rc = 0;
    for (int k = 0; k < node->owed.n; k++) {
        rl_owed *o = &node->owed.e[k];
        if (now >= o->until_us) { /* its key has expired: nothing left to clean */
            owed_remove(node, k--);
            continue;
        }
        if (o->sent_on == node->conn_serial || now < o->not_before_us) continue; /* answer to come, or too soon */
        /* Op 0 is no round's (they count from 1): the answer is read as a
         * late one, never as a vote of the round that sent it. */
        rl_tag tag = {.op = 0, .kind = RL_K_CLEANUP, .deadline_us = deadline_us, .owed = o->id};
        rc |= rl_conn_send_resp(conn, &tag, o->cmd.data, o->cmd.len);
        o->sent_on = node->conn_serial;
    }
    return rc;
}

void rl_node_owed_answered(rl_node *node, uint32_t id, int failed) {
    for (int k = 0; k < node->owed.n; k++) {
        if (node->owed.e[k].id != id) continue;
        rl_owed *o = &node->owed.e[k];
        if (!failed) {
            owed_remove(node, k);
        } else { /* an error such as LOADING: sent again with a later command, after a wait */
            int64_t wait_ms = o->errors < 6 ? 100LL << o->errors : 5000;
            o->errors++;
            o->sent_on = 0;
            o->not_before_us = rl_now_us() + wait_ms * 1000;
        }
        return;
    }
}

void rl_node_mark_up(rl_client *c, rl_node *node) {
    if (node->health == RL_HEALTH_DOWN) {
        char name[320], msg[400];
        rl_node_name(node, name, sizeof name);
        snprintf(msg, sizeof msg, "redlock: %s is back up", name);
        rl_client_report(c, &(rl_event){.kind = RL_EVENT_NODE_UP, .node_id = node->id,
                         .msg = msg});
    }
    if (node->health != RL_HEALTH_UP) node->last_error[0] = '\0';
    node->health = RL_HEALTH_UP;
    node->backoff_ms = 0;
    node->retry_at_us = 0;
}

static void on_info(rl_client *c, rl_node *node, const rl_reply *r) {
    char run_id[48], uptime[32];
    if (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS) return;
    if (rl_nodecheck_info_field(r->str, "run_id", run_id, sizeof run_id) != 0 || !run_id[0]) return;
    /* Shown in reasons and last_error: a server's bytes, made safe once here. */
    rl_text_clean_inplace(run_id, sizeof run_id);
    /* A run_id other than the one this node had means a restart that this
     * connection saw happen just now, whatever uptime the server reports. */
    int restart_seen = node->run_id[0] && strcmp(node->run_id, run_id) != 0;
    snprintf(node->run_id, sizeof node->run_id, "%s", run_id);
    node->info_known = 1;

    /* Kept whether or not the guard is on now, so turning it on later judges
     * this connection too. A server that restarted has a new run_id and a
     * new uptime: what its new connection reads replaces the old. */
    node->uptime_ms = -1;
    if (rl_nodecheck_info_field(r->str, "uptime_in_seconds", uptime, sizeof uptime) == 0) {
        long long up_s = strtoll(uptime, NULL, 10); /* a broken server may say anything */
        if (up_s < 0) up_s = 0;
        if (up_s > 10000000000LL) up_s = 10000000000LL; /* 300 years: far above any TTL, and no overflow below */
        /* Redis counts whole seconds of its cached wall clock since a start
         * time it also cut to whole seconds, so the figure may be up to one
         * second more than the truth (1 after 0.2 s): take one second off. */
        up_s = up_s > 0 ? up_s - 1 : 0;
        if (restart_seen) up_s = 0;
        node->uptime_ms = (int64_t)up_s * 1000;
        node->uptime_at_us = rl_now_us();
    }

    /* The same server listed twice: the higher id shows as the duplicate
     * (within a round the server's answer counts once, rl_round.c). */
    rl_client_find_duplicates(c);
}

rl_secrets rl_node_secrets(const rl_node *node, const char *token, size_t toklen) {
    rl_secrets sec = {.n = 0};
    if (node->ep.password) {
        sec.s[sec.n] = node->ep.password;
        sec.len[sec.n++] = strlen(node->ep.password);
    }
    if (token) {
        sec.s[sec.n] = token;
        sec.len[sec.n++] = toklen;
    }
    return sec;
}

/* "<what><server text>" into last_error, the password masked (AUTH carried
 * it, and a server may echo it anywhere) and the text cleaned. */
static void server_said(rl_node *node, const char *what, const char *text, size_t len) {
    rl_secrets sec = rl_node_secrets(node, NULL, 0);
    int k = snprintf(node->last_error, sizeof node->last_error, "%s", what);
    if (k > 0 && (size_t)k < sizeof node->last_error)
        rl_text_from_server(node->last_error + k, sizeof node->last_error - (size_t)k, text, len, &sec);
}

/* Whether error reply r starts with code (a whole word). */
static int error_code_is(const rl_reply *r, const char *code) {
    size_t n = strlen(code);
    return r && r->type == REDIS_REPLY_ERROR && r->len >= n && memcmp(r->str, code, n) == 0 &&
           (r->len == n || r->str[n] == ' ');
}

/* AUTH's error answer into last_error; for a wrong password or user name,
 * where the right ones go. */
static void auth_refused(rl_node *node, const rl_reply *r) {
    if (!error_code_is(r, "WRONGPASS")) {
        server_said(node, "AUTH failed: ", r->str, r->len);
        return;
    }
    char said[96]; /* Redis says 61 bytes; the hint must fit after it */
    rl_secrets sec = rl_node_secrets(node, NULL, 0);
    rl_text_from_server(said, sizeof said, r->str, r->len, &sec);
    snprintf(node->last_error, sizeof node->last_error,
             "AUTH failed: %s (give the right user name and password: redis://USER:PASSWORD@host:port in "
             "the url, or the username and password columns)", said);
}

int rl_node_on_noauth(rl_node *node, const rl_reply *r) {
    if (!error_code_is(r, "NOAUTH")) return 0;
    if (node->auth_failed) return 1; /* AUTH's or SELECT's own answer stays the reason */
    node->auth_failed = 1;
    snprintf(node->last_error, sizeof node->last_error,
             "NOAUTH: the server needs a password and none was given; give it in the url "
             "(redis://:PASSWORD@host:port, or redis://USER:PASSWORD@host:port for an ACL user) or in the "
             "password column");
    return 1;
}

void rl_node_on_setup_reply(rl_client *c, rl_node *node, int kind, const rl_reply *r) {
    int is_err = r->type == REDIS_REPLY_ERROR;
    char what[64];
    switch (kind) {
    case RL_K_AUTH:
        node->auth_failed = is_err;
        if (is_err) auth_refused(node, r);
        break;
    case RL_K_SELECT:
        /* A failed SELECT leaves the connection on database 0;
         * like a failed AUTH, its yes votes must not count (rl_round.c). */
        if (is_err && !node->auth_failed) { /* after a failed AUTH, that is the reason to show */
            snprintf(what, sizeof what, "SELECT %d failed: ", node->ep.db);
            server_said(node, what, r->str, r->len);
        }
        if (is_err) node->auth_failed = 1;
        break;
    case RL_K_INFO:
        if (!is_err) on_info(c, node, r);
        break;
    case RL_K_NODECHECK:
        if (!is_err && rl_nodecheck_on_info(c, node, r)) {
            /* short: log lines are cut at about 200 bytes */
            char name[320], msg[600];
            rl_node_name(node, name, sizeof name);
            if (node->in_cluster && !c->set.allow_cluster_nodes)
                snprintf(msg, sizeof msg, "redlock: %s refused: cluster_enabled:1 (allow_cluster_nodes is 0)", name);
            else
                snprintf(msg, sizeof msg, "redlock: %s refused: evicts keys (maxmemory-policy %s; allow_evicting_nodes is 0)",
                         name, node->maxmemory_policy);
            rl_client_report(c, &(rl_event){.kind = RL_EVENT_NODE_REFUSED, .node_id = node->id,
                             .msg = msg});
        }
        break;
    case RL_K_ACL:
        /* Every set-up reply is in: a node INFO or ROLE left unknown stays
         * so on this connection, and says why until the next one. */
        node->setup_done = 1;
        node->setup_blind = !rl_node_known(node);
        if (node->setup_blind && !node->auth_failed && !node->is_replica && !node->duplicate_of)
            rl_node_vote_blocked(c, node, 0, rl_now_us(), node->last_error,
                                 sizeof node->last_error);
        if (rl_nodecheck_on_acl(c, node, r)) {
            char name[320], msg[600], names[160];
            rl_node_name(node, name, sizeof name);
            rl_acl_mask m = rl_acl_needed((int)c->set.fencing, (int)c->set.holder_info);
            rl_acl_names(node->acl_missing & m, 0, 6, names, sizeof names);
            snprintf(msg, sizeof msg, "redlock: %s refused: its user may not run %s", name, names);
            rl_client_event(c, RL_EVENT_NODE_REFUSED, msg);
        }
        break;
    case RL_K_DETAILS:
        /* Refused (another program's key under the details' name, an error):
         * the locks show no details, and the write is tried again later. */
        if (is_err || r->type != REDIS_REPLY_INTEGER || r->integer != 1) {
            node->details_gen = 0;
            node->details_retry_us = rl_now_us() + RL_NODE_DETAILS_RETRY_US;
        }
        break;
    case RL_K_ROLE:
        if (!is_err && r->type == REDIS_REPLY_ARRAY && r->elements > 0 && r->element[0]->str) {
            node->role_known = 1;
            node->is_replica = strcmp(r->element[0]->str, "master") != 0;
            if (node->is_replica) {
                char role[32];
                rl_secrets sec = rl_node_secrets(node, NULL, 0);
                rl_text_from_server(role, sizeof role, r->element[0]->str, r->element[0]->len, &sec);
                snprintf(node->last_error, sizeof node->last_error, "node is a %s, not a master; its votes do not count",
                         role);
            }
        }
        break;
    }
}

int rl_node_known(const rl_node *node) {
    return node->info_known && node->role_known && node->checks_known == RL_CHECK_ALL;
}

int rl_node_duplicate_elsewhere(const rl_client *c, const rl_node *node) {
    if (!node->duplicate_of) return 0;
    for (int i = 0; i < c->n; i++)
        if (c->nodes[i]->id == node->duplicate_of) return c->nodes[i]->ep.db != node->ep.db;
    return 1;
}

int rl_node_vote_blocked(const rl_client *c, const rl_node *node, int guard_applies, int64_t now, char *why,
                         size_t whylen) {
    if (!rl_node_known(node)) {
        snprintf(why, whylen, "INFO or ROLE gave no usable answer on this connection, so the node cannot be told "
                              "apart from the others; its vote does not count (allow INFO and ROLE to the user)");
        return 1;
    }
    if (rl_node_duplicate_elsewhere(c, node)) {
        snprintf(why, whylen, "same server as node %lld on another database; its vote does not count",
                 (long long)node->duplicate_of);
        return 1;
    }
    if (node->is_replica) {
        snprintf(why, whylen, "node is a replica; its vote does not count");
        return 1;
    }
    int64_t left = guard_applies ? rl_client_guard_left_us(c, node, now) : 0;
    if (left == INT64_MAX) {
        snprintf(why, whylen, "restart_guard: the node's INFO gave no uptime; its yes vote does not count");
        return 1;
    }
    if (left > 0) {
        snprintf(why, whylen,
                 "node restarted recently; restart_guard holds its yes vote for %lld ms more (it must be up longer "
                 "than the largest TTL, %lld ms, plus drift)",
                 (long long)((left + 999) / 1000),
                 (long long)(c->max_ttl_ms > c->set.restart_guard ? c->max_ttl_ms : c->set.restart_guard));
        return 1;
    }
    return 0;
}
