/* rl_client: the node list, its settings and its life cycle (see rl_client.h).
 * SPDX-License-Identifier: BSD-3-Clause */
#include "rl_client.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_clock.h"
#include "rl_text.h"

/* The text settings, each owned by the client and "" by default. */
static char **text_settings(rl_settings *s, int i) {
    char **t[6] = {&s->key_prefix, &s->tls_ca_file, &s->tls_ca_dir, &s->tls_cert_file, &s->tls_key_file,
                   &s->client_name};
    return i < 6 ? t[i] : NULL;
}

static void free_text_settings(rl_settings *s) {
    for (int i = 0; text_settings(s, i); i++) free(*text_settings(s, i));
}

rl_client *rl_client_new(void) {
    rl_client *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->set = (rl_settings)RL_SETTINGS_DEFAULTS;
    int ok = 1;
    for (int i = 0; text_settings(&c->set, i); i++) ok &= (*text_settings(&c->set, i) = calloc(1, 1)) != NULL;
    c->events = malloc(sizeof *c->events);
    if (!ok || !c->events || rl_events_init(c->events) != 0) {
        free(c->events);
        free_text_settings(&c->set);
        free(c);
        return NULL;
    }
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        rl_events_destroy(c->events);
        free(c->events);
        free_text_settings(&c->set);
        free(c);
        return NULL;
    }
    /* The program's name (as ps shows it) names the holder by default. */
    char *app = strdup(program_invocation_short_name ? program_invocation_short_name : "");
    if (!app) {
        pthread_mutex_destroy(&c->mu);
        rl_events_destroy(c->events);
        free(c->events);
        free_text_settings(&c->set);
        free(c);
        return NULL;
    }
    free(c->set.client_name);
    c->set.client_name = app;
    c->next_id = 1;
    return c;
}

/* Gives cleanups still unsent on stalled connections a bounded chance to
 * leave (at most one node timeout: the node may be hung). Replies owed on
 * active connections were settled already (rl_round_settle). */
static void flush_stale(rl_client *c) {
    size_t n = c->n > 0 ? (size_t)c->n : 1;
    struct pollfd *pfd = calloc(n, sizeof *pfd);
    rl_conn **who = calloc(n, sizeof *who);
    int64_t deadline = 0;
    while (pfd && who) {
        int k = 0;
        int64_t now = rl_now_us();
        for (int i = 0; i < c->n; i++) {
            rl_conn *cn = c->nodes[i]->stale;
            if (!cn || !(rl_conn_events(cn) & POLLOUT)) continue;
            if (!deadline) deadline = now + rl_client_timeout_us(c, c->nodes[i]);
            pfd[k] = (struct pollfd){.fd = cn->fd, .events = POLLOUT};
            who[k++] = cn;
        }
        if (k == 0 || now >= deadline) break;
        if (poll(pfd, (nfds_t)k, (int)((deadline - now + 999) / 1000)) <= 0) break;
        for (int i = 0; i < k; i++)
            if (pfd[i].revents) rl_conn_progress(who[i], pfd[i].revents);
    }
    free(pfd);
    free(who); /* out of memory: the cleanups are dropped with their connections */
}

void rl_client_move_owed(rl_owed_list *to, rl_node *from) {
    *to = from->owed;
    for (int k = 0; k < to->n; k++) to->e[k].sent_on = 0; /* on none of the connections to come */
    from->owed.n = 0;
}

void rl_client_forget_owed(rl_node *node) {
    for (int i = 0; i < node->owed.n; i++) rl_buf_free(&node->owed.e[i].cmd);
    node->owed.n = 0;
    rl_buf_free(&node->release_args);
    node->release_op = 0;
}

static void node_free(rl_node *node) {
    if (!node) return;
    rl_client_forget_owed(node);
    rl_conn_close(node->conn);
    rl_conn_close(node->stale);
    rl_conn_close(node->sub);
    rl_endpoint_clear(&node->ep);
    rl_tls_peer_clear(&node->tls);
    free(node);
}

void rl_client_set_cancel(rl_client *c, int (*cancel)(void *ctx), void *ctx) {
    c->cancel = cancel;
    c->cancel_ctx = ctx;
}

void rl_client_free(rl_client *c) {
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    flush_stale(c);
    for (int i = 0; i < c->n; i++) node_free(c->nodes[i]);
    free(c->nodes);
    for (int i = 0; i < RL_RECENT_FENCED; i++) free(c->recent_fenced[i].fkey);
    rl_buf_free(&c->round_cmd[0]);
    rl_buf_free(&c->round_cmd[1]);
    free_text_settings(&c->set);
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_destroy(&c->mu);
    rl_events_destroy(c->events);
    free(c->events);
    free(c);
}

/* Resolves ep->host once, now, so no DNS lookup ever runs on the lock path. */
static int resolve(const rl_endpoint *ep, struct sockaddr_storage *addr, socklen_t *len, rl_error *err) {
    struct addrinfo hints = {0}, *res = NULL;
    char port[16];
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_family = AF_UNSPEC;
    snprintf(port, sizeof port, "%d", ep->port);
    int rc = getaddrinfo(ep->host, port, &hints, &res);
    if (rc != 0 || !res) {
        rl_error_set(err, RL_ERR_RESOLVE, "cannot resolve host '%s': %s", ep->host, gai_strerror(rc));
        return -1;
    }
    memcpy(addr, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

static int find_index(const rl_client *c, int64_t id) {
    for (int i = 0; i < c->n; i++)
        if (c->nodes[i]->id == id) return i;
    return -1;
}

static int same_target(const rl_endpoint *a, const rl_endpoint *b) {
    return a->port == b->port && a->db == b->db && strcmp(a->host, b->host) == 0;
}

int64_t rl_client_add_node(rl_client *c, const rl_endpoint *ep, int64_t id, rl_error *err) {
    if (rl_endpoint_check(ep, err) != 0) return -1;
    rl_node *node = calloc(1, sizeof *node);
    if (!node) {
        rl_error_set(err, RL_ERR_NOMEM, "out of memory");
        return -1;
    }
    if (resolve(ep, &node->addr, &node->addrlen, err) != 0) {
        free(node);
        return -1;
    }
    if (rl_endpoint_copy(&node->ep, ep) != 0) {
        free(node);
        rl_error_set(err, RL_ERR_NOMEM, "out of memory");
        return -1;
    }
    pthread_mutex_lock(&c->mu);
    int64_t rc = -1;
    if (id > 0 && find_index(c, id) >= 0) {
        rl_error_set(err, RL_ERR_STATE, "a node with id %lld exists already", (long long)id);
        goto out;
    }
    if (id <= 0 && c->next_id == 0) {
        rl_error_set(err, RL_ERR_STATE, "no automatic node id is left after %lld; give the id, as in INSERT INTO "
                              "redlock_nodes(id, host, port) VALUES (2, '10.0.0.2', 6379)", (long long)INT64_MAX);
        goto out;
    }
    for (int i = 0; i < c->n; i++)
        if (same_target(&c->nodes[i]->ep, ep)) {
            rl_error_set(err, RL_ERR_STATE, "node %s:%d/%d is listed already (node %lld); each node must be listed once",
                     ep->host, ep->port, ep->db, (long long)c->nodes[i]->id);
            goto out;
        }
    if (c->n == c->cap) {
        int cap = c->cap ? c->cap * 2 : 8;
        rl_node **nn = realloc(c->nodes, (size_t)cap * sizeof *nn);
        if (!nn) {
            rl_error_set(err, RL_ERR_NOMEM, "out of memory");
            goto out;
        }
        c->nodes = nn;
        c->cap = cap;
    }
    /* TLS files are loaded now, so a bad one is reported by the INSERT. */
    if (node->ep.tls && rl_client_tls_prepare(c, node, 1, err) != 0) goto out;
    node->id = id > 0 ? id : c->next_id;
    if (c->next_id != 0 && node->id >= c->next_id) c->next_id = node->id == INT64_MAX ? 0 : node->id + 1;
    node->cfg = ++c->cfg_count;
    c->nodes[c->n++] = node;
    rc = node->id;
    node = NULL;
out:
    pthread_mutex_unlock(&c->mu);
    node_free(node);
    return rc;
}

void rl_client_find_duplicates(rl_client *c) {
    for (int i = 0; i < c->n; i++) {
        rl_node *node = c->nodes[i];
        int64_t first = 0;
        for (int j = 0; node->run_id[0] && j < c->n; j++) {
            const rl_node *o = c->nodes[j];
            if (o->id < node->id && (!first || o->id < first) && strcmp(o->run_id, node->run_id) == 0) first = o->id;
        }
        if (first && first != node->duplicate_of) {
            char shown[16]; /* the run_id's first 12 bytes at most, whole characters */
            rl_text_clean(shown, 13, node->run_id, strlen(node->run_id));
            snprintf(node->last_error, sizeof node->last_error,
                     "same server as node %lld (run_id %s...): one vote between them", (long long)first, shown);
        }
        node->duplicate_of = first;
    }
}

int rl_client_update_node(rl_client *c, int64_t id, const rl_endpoint *ep, rl_error *err) {
    if (rl_endpoint_check(ep, err) != 0) return -1;
    struct sockaddr_storage addr;
    socklen_t addrlen;
    rl_endpoint copy;
    rl_tls_peer tls = {0};
    if (resolve(ep, &addr, &addrlen, err) != 0) return -1;
    if (rl_endpoint_copy(&copy, ep) != 0) {
        rl_error_set(err, RL_ERR_NOMEM, "out of memory");
        return -1;
    }
    pthread_mutex_lock(&c->mu);
    int i = find_index(c, id), rc = -1;
    if (i < 0) {
        rl_error_set(err, RL_ERR_STATE, "no node with id %lld", (long long)id);
        goto out;
    }
    for (int j = 0; j < c->n; j++)
        if (j != i && same_target(&c->nodes[j]->ep, ep)) {
            rl_error_set(err, RL_ERR_STATE, "node %s:%d/%d is listed already (node %lld); each node must be listed once",
                     ep->host, ep->port, ep->db, (long long)c->nodes[j]->id);
            goto out;
        }
    rl_node *node = c->nodes[i];
    /* The TLS files are loaded before anything changes, so a bad one
     * fails the UPDATE and leaves the node as it was. */
    if (copy.tls) {
        rl_node trial = {.ep = copy};
        if (rl_client_tls_prepare(c, &trial, 1, err) != 0) goto out;
        tls = trial.tls;
    }
    rl_conn_close(node->conn);
    rl_conn_close(node->stale);
    rl_conn_close(node->sub);
    /* The cleanups it owes go to the same server and database still (a new
     * timeout, user or TLS setting), never to another one. */
    rl_owed_list carry = {.n = 0};
    if (same_target(&node->ep, ep)) rl_client_move_owed(&carry, node);
    rl_client_forget_owed(node);
    rl_endpoint_clear(&node->ep);
    rl_tls_peer_clear(&node->tls);
    int64_t nid = node->id;
    memset(node, 0, sizeof *node);
    node->id = nid;
    node->owed = carry;
    rl_client_find_duplicates(c); /* this row's run_id is gone: its duplicates are marked afresh */
    node->cfg = ++c->cfg_count;
    node->ep = copy;
    node->addr = addr;
    node->addrlen = addrlen;
    node->tls = tls;
    memset(&copy, 0, sizeof copy);
    memset(&tls, 0, sizeof tls);
    rc = 0;
out:
    pthread_mutex_unlock(&c->mu);
    rl_endpoint_clear(&copy);
    rl_tls_peer_clear(&tls);
    return rc;
}

int rl_client_remove_node(rl_client *c, int64_t id) {
    pthread_mutex_lock(&c->mu);
    int i = find_index(c, id);
    if (i >= 0) {
        node_free(c->nodes[i]);
        memmove(&c->nodes[i], &c->nodes[i + 1], (size_t)(c->n - i - 1) * sizeof *c->nodes);
        c->n--;
        rl_client_find_duplicates(c);
    }
    pthread_mutex_unlock(&c->mu);
    return i >= 0 ? 0 : -1;
}

void rl_client_nodes_free(rl_node_list *list) {
    for (int i = 0; list->spare && i < list->n; i++) node_free(list->spare[i]);
    free(list->spare);
    free(list->slots);
    free(list->ids);
    free(list->cfgs);
    memset(list, 0, sizeof *list);
}

int rl_client_nodes_save(rl_client *c, rl_node_list *out) {
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&c->mu);
    size_t n = c->n > 0 ? (size_t)c->n : 1;
    out->ids = calloc(n, sizeof *out->ids);
    out->cfgs = calloc(n, sizeof *out->cfgs);
    out->spare = calloc(n, sizeof *out->spare);
    out->slots = calloc(n, sizeof *out->slots);
    int ok = out->ids && out->cfgs && out->spare && out->slots;
    for (int i = 0; ok && i < c->n; i++) {
        const rl_node *node = c->nodes[i];
        rl_node *copy = calloc(1, sizeof *copy);
        out->n = i + 1; /* so rl_client_nodes_free frees what was made */
        if (!copy || rl_endpoint_copy(&copy->ep, &node->ep) != 0) {
            free(copy);
            ok = 0;
            break;
        }
        copy->id = node->id;
        copy->cfg = node->cfg;
        copy->addr = node->addr;
        copy->addrlen = node->addrlen;
        out->spare[i] = copy;
        out->ids[i] = node->id;
        out->cfgs[i] = node->cfg;
    }
    if (ok) {
        out->n = c->n;
        out->next_id = c->next_id;
    }
    pthread_mutex_unlock(&c->mu);
    if (!ok) rl_client_nodes_free(out);
    return ok ? 0 : -1;
}

void rl_client_nodes_restore(rl_client *c, rl_node_list *list) {
    pthread_mutex_lock(&c->mu);
    rl_node **now = c->nodes;
    int n_now = c->n;
    for (int k = 0; k < list->n; k++) {
        rl_node *keep = NULL;
        for (int i = 0; i < n_now && !keep; i++)
            if (now[i] && now[i]->id == list->ids[k] && now[i]->cfg == list->cfgs[k]) {
                keep = now[i];
                now[i] = NULL;
            }
        if (!keep) {
            keep = list->spare[k];
            list->spare[k] = NULL;
            /* A rolled-back UPDATE that kept the server: its cleanups stay owed. */
            for (int i = 0; i < n_now; i++)
                if (now[i] && now[i]->id == keep->id && same_target(&now[i]->ep, &keep->ep))
                    rl_client_move_owed(&keep->owed, now[i]);
        }
        list->slots[k] = keep;
    }
    c->nodes = list->slots;
    c->n = c->cap = list->n;
    c->next_id = list->next_id;
    for (int i = 0; i < n_now; i++)
        if (now[i]) node_free(now[i]);
    rl_client_find_duplicates(c);
    list->slots = now; /* freed with the list */
    pthread_mutex_unlock(&c->mu);
}

static const char *state_name(const rl_client *c, const rl_node *node, int64_t now) {
    if (node->health == RL_HEALTH_DOWN) return "down";
    if (node->conn && node->auth_failed) return "refused"; /* its AUTH or SELECT: no vote counts */
    if (node->duplicate_of) return "duplicate";
    if (node->is_replica) return "replica";
    if (node->conn && node->setup_blind) return "refused"; /* INFO or ROLE: no vote counts */
    const char *unfit = rl_client_node_unfit(c, node);
    if (unfit) return unfit;
    if (node->conn && node->info_known && rl_client_guard_left_us(c, node, now) > 0) return "restarting";
    if (node->health == RL_HEALTH_IDLE) return "idle";
    return "up";
}

int rl_client_node_view(rl_client *c, int i, rl_node_view *out) {
    int rc = -1;
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&c->mu);
    if (i >= 0 && i < c->n) {
        rl_node *node = c->nodes[i];
        if (rl_endpoint_copy(&out->ep, &node->ep) == 0) {
            out->id = node->id;
            out->timeout_ms = rl_client_timeout_us(c, node) / 1000;
            out->state = state_name(c, node, rl_now_us());
            rl_text_clean(out->last_error, sizeof out->last_error, node->last_error, strlen(node->last_error));
            out->tls_resumed = node->tls.resumed;
            rc = 0;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int rl_client_node_stats(rl_client *c, int i, int64_t *id, rl_node_stats *out, char *last_error, size_t errlen) {
    int rc = -1;
    pthread_mutex_lock(&c->mu);
    if (i >= 0 && i < c->n) {
        *id = c->nodes[i]->id;
        *out = c->nodes[i]->stats;
        rl_text_clean(last_error, errlen, c->nodes[i]->last_error, strlen(c->nodes[i]->last_error));
        rc = 0;
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int rl_client_node_count(rl_client *c) {
    pthread_mutex_lock(&c->mu);
    int n = c->n;
    pthread_mutex_unlock(&c->mu);
    return n;
}

void rl_client_forget_after_fork(rl_client *c) {
    pthread_mutex_init(&c->mu, NULL);
    rl_events_after_fork(c->events);
    for (int i = 0; i < c->n; i++) {
        rl_node *node = c->nodes[i];
        /* close() of a copied descriptor sends nothing: the parent's stays open. */
        rl_conn_close(node->conn);
        rl_conn_close(node->stale);
        rl_conn_close(node->sub);
        node->conn = node->stale = node->sub = NULL;
        rl_client_forget_owed(node); /* the parent's attempts: its own to clean up */
        node->sub_ready = 0;
        node->health = RL_HEALTH_IDLE;
        node->retry_at_us = node->backoff_ms = 0;
    }
}

/* The settings a TLS node connects with: its own where it has them, the
 * client's otherwise. Its trust anchors (CA file and CA directory) come
 * both from it or both from the client: a CA of its own pins whom it
 * trusts, which a CA added from the settings would undo. */
static rl_tls_config tls_config(const rl_client *c, const rl_tls_opts *o) {
    const char *const set[4] = {c->set.tls_ca_file, c->set.tls_ca_dir, c->set.tls_cert_file, c->set.tls_key_file};
    const char *const own[4] = {o->ca_file, o->ca_dir, o->cert_file, o->key_file};
    int own_anchors = o->ca_file || o->ca_dir;
    const char *eff[4];
    for (int i = 0; i < 4; i++) {
        int from_node = i < 2 ? own_anchors : own[i] != NULL;
        eff[i] = from_node ? own[i] : set[i][0] ? set[i] : NULL;
    }
    rl_tls_config cfg = {.verify = o->verify == RL_TLS_VERIFY_INHERIT ? c->set.tls_verify != 0 : o->verify == RL_TLS_VERIFY_ON,
                         .ca_file = eff[0], .ca_dir = eff[1], .cert_file = eff[2], .key_file = eff[3]};
    return cfg;
}

int rl_client_tls_prepare(rl_client *c, rl_node *node, int fresh, rl_error *err) {
    if (!fresh && node->tls.ctx && node->tls.gen == c->tls_gen) return 0;
    rl_tls_config cfg = tls_config(c, &node->ep.tls_opts);
    char *key = rl_tls_config_key(&cfg);
    if (!key) {
        rl_error_set(err, RL_ERR_NOMEM, "out of memory");
        return -1;
    }
    SSL_CTX *ctx = NULL;
    for (int i = 0; i < c->n && !ctx && !fresh; i++) {
        const rl_tls_peer *o = &c->nodes[i]->tls;
        if (o->ctx && o->gen == c->tls_gen && strcmp(o->key, key) == 0) ctx = rl_tls_ctx_ref(o->ctx);
    }
    if (!ctx && !(ctx = rl_tls_ctx_new(&cfg, err))) {
        free(key);
        return -1;
    }
    rl_tls_peer_set(&node->tls, ctx, key, c->tls_gen);
    return 0;
}

int64_t rl_client_timeout_us(const rl_client *c, const rl_node *node) {
    return (node->ep.timeout_ms > 0 ? node->ep.timeout_ms : c->set.timeout_ms) * 1000;
}

int64_t rl_client_drift_us(const rl_client *c, int64_t ttl_ms) {
    return (int64_t)((double)ttl_ms * 1000.0 * c->set.drift_factor) + 2000;
}

int rl_client_quorum(const rl_client *c) {
    if (c->set.unsafe_test_quorum > 0) return (int)c->set.unsafe_test_quorum;
    return c->n / 2 + 1;
}

int64_t rl_client_guard_left_us(const rl_client *c, const rl_node *node, int64_t now_us) {
    if (!c->set.restart_guard) return 0;
    if (node->uptime_ms < 0) return INT64_MAX;
    /* A lock a node forgot in a restart was set before the restart, so it
     * ends at most one TTL (plus drift) after it: a node up for longer than
     * the largest TTL any client uses can have forgotten none still valid. */
    int64_t period_ms = c->max_ttl_ms > c->set.restart_guard ? c->max_ttl_ms : c->set.restart_guard;
    int64_t need_us = period_ms * 1000 + rl_client_drift_us(c, period_ms);
    int64_t up_us = node->uptime_ms * 1000 + (now_us - node->uptime_at_us);
    return up_us < need_us ? need_us - up_us : 0;
}

void rl_client_set_events(rl_client *c, void (*fn)(void *ctx, const rl_event *ev), void *ctx) {
    c->on_event = fn;
    c->event_ctx = ctx;
}

void rl_client_report(const rl_client *c, const rl_event *ev) {
    rl_events_add(c->events, ev);
    if (c->on_event) c->on_event(c->event_ctx, ev);
}

void rl_client_event(const rl_client *c, rl_event_kind kind, const char *msg) {
    rl_event ev = {.kind = (int)kind, .msg = msg};
    rl_client_report(c, &ev);
}

int rl_client_events_copy(rl_client *c, rl_event_row **out) {
    return rl_events_copy(c->events, out);
}

int rl_client_node_refused(const rl_client *c, const rl_node *node) {
    if (node->auth_failed || node->setup_blind) return 1;
    const char *unfit = rl_client_node_unfit(c, node);
    return unfit && strcmp(unfit, "refused") == 0;
}

const char *rl_client_node_unfit(const rl_client *c, const rl_node *node) {
    if (node->in_cluster && !c->set.allow_cluster_nodes) return "cluster";
    if (node->maxmemory > 0 && strcmp(node->maxmemory_policy, "noeviction") != 0 && !c->set.allow_evicting_nodes)
        return "evicting";
    /* Its user may not run a command the scripts need (a replica or a
     * Sentinel is kept out by its ROLE, the reason it shows). */
    if (!node->is_replica && node->acl_missing &&
        (node->acl_missing & rl_acl_needed((int)c->set.fencing, (int)c->set.holder_info)))
        return "refused";
    return NULL;
}
