/* rl_settings: settings by name (see rl_settings.h).
 * SPDX-License-Identifier: BSD-3-Clause */
#include "rl_settings.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_lock.h"
#include "rl_node.h"
#include "rl_text.h"

typedef struct setting {
    const char *name;
    int type;
    size_t offset;  /* into rl_settings */
    int64_t min, max;
    const char *hint;
} setting;

#define OFF(f) offsetof(rl_settings, f)
#define STR_(x) #x
#define STR(x) STR_(x) /* a limit's value in a hint, so the limit is written once */
static const setting table[] = {
    {"timeout_ms", RL_SETTING_INT, OFF(timeout_ms), 1, RL_TIMEOUT_MAX_MS, "milliseconds from 1 to " STR(RL_TIMEOUT_MAX_MS)},
    {"retry_delay_ms", RL_SETTING_INT, OFF(retry_delay_ms), 0, 3600000, "milliseconds from 0 to 3600000"},
    {"retry_jitter_ms", RL_SETTING_INT, OFF(retry_jitter_ms), 0, 3600000, "milliseconds from 0 to 3600000"},
    {"drift_factor", RL_SETTING_REAL, OFF(drift_factor), 0, 0, "a number from 0 up to (not including) 0.5"},
    {"key_prefix", RL_SETTING_TEXT, OFF(key_prefix), 0, 1024, "text of at most 1024 bytes"},
    {"fencing", RL_SETTING_INT, OFF(fencing), 0, 1, "0 or 1"},
    {"fence_ttl_ms", RL_SETTING_INT, OFF(fence_ttl_ms), 0, INT64_C(315360000000), "milliseconds from 0 (never expires) to 315360000000"},
    {"restart_guard", RL_SETTING_INT, OFF(restart_guard), 0, RL_TTL_MAX_MS, "0 (off), 1 (on) or the largest TTL in ms any client of these nodes uses (up to 2147483647)"},
    {"reconnect_min_ms", RL_SETTING_INT, OFF(reconnect_min_ms), 1, 3600000, "milliseconds from 1 to 3600000"},
    {"reconnect_max_ms", RL_SETTING_INT, OFF(reconnect_max_ms), 1, 3600000, "milliseconds from 1 to 3600000"},
    {"auto_extend", RL_SETTING_INT, OFF(auto_extend), 0, 1, "0 or 1"},
    {"release_in_write_txn", RL_SETTING_INT, OFF(release_in_write_txn), 0, 1, "0 (refused before COMMIT) or 1 (allowed)"},
    {"xact_margin_ms", RL_SETTING_INT, OFF(xact_margin_ms), 0, RL_TTL_MAX_MS,
     "milliseconds from 0 to 2147483647"},
    {"unsafe_test_quorum", RL_SETTING_INT, OFF(unsafe_test_quorum), 0, 1000, "0 (majority) or a node count; for tests only"},
    {"tls_verify", RL_SETTING_INT, OFF(tls_verify), 0, 1, "1 (check certificates) or 0 (insecure)"},
    {"allow_evicting_nodes", RL_SETTING_INT, OFF(allow_evicting_nodes), 0, 1, "0 (an evicting node's votes do not count) or 1"},
    {"allow_cluster_nodes", RL_SETTING_INT, OFF(allow_cluster_nodes), 0, 1, "0 (a Redis Cluster node's votes do not count) or 1"},
    {"holder_info", RL_SETTING_INT, OFF(holder_info), 0, 1, "1 (acquisitions write who holds the lock, for redlock_holder) or 0"},
    {"evalsha", RL_SETTING_INT, OFF(evalsha), 0, 1, "1 (scripts a node has cached are sent by digest) or 0 (always in full)"},
    {"on_lost", RL_SETTING_INT, OFF(on_lost), 0, 1, "0 (a lost lock is only reported) or 1 (the statement running when a lock taken from now on is lost is interrupted)"},
    {"fair", RL_SETTING_INT, OFF(fair), 0, 1, "1 (waiting acquires queue and are served in order) or 0"},
    {"queue_lease_ms", RL_SETTING_INT, OFF(queue_lease_ms), 100, 600000, "milliseconds from 100 to 600000"},
    {"client_name", RL_SETTING_TEXT, OFF(client_name), 0, 64, "text of at most 64 bytes"},
    {"tls_ca_file", RL_SETTING_TEXT, OFF(tls_ca_file), 0, RL_PATH_MAX, "a file path of at most " STR(RL_PATH_MAX) " bytes, or '' for the system's CA store"},
    {"tls_ca_dir", RL_SETTING_TEXT, OFF(tls_ca_dir), 0, RL_PATH_MAX, "a directory path of at most " STR(RL_PATH_MAX) " bytes, or '' for none"},
    {"tls_cert_file", RL_SETTING_TEXT, OFF(tls_cert_file), 0, RL_PATH_MAX, "a file path of at most " STR(RL_PATH_MAX) " bytes, or '' for none"},
    {"tls_key_file", RL_SETTING_TEXT, OFF(tls_key_file), 0, RL_PATH_MAX, "a file path of at most " STR(RL_PATH_MAX) " bytes, or '' for none"},
};
#define NSETTINGS (sizeof table / sizeof table[0])

static const setting *lookup(const char *name) {
    for (size_t i = 0; i < NSETTINGS; i++)
        if (strcmp(table[i].name, name) == 0) return &table[i];
    return NULL;
}

static int unknown(const char *name, rl_error *err) {
    char shown[72];
    char *msg = err->msg;
    size_t used = (size_t)snprintf(msg, sizeof err->msg, "unknown setting '%s'; the settings are:",
                                   rl_text_excerpt(shown, sizeof shown, name, strlen(name), 64));
    for (size_t i = 0; i < NSETTINGS && used < sizeof err->msg; i++)
        used += (size_t)snprintf(msg + used, sizeof err->msg - used, "%s %s", i ? "," : "", table[i].name);
    err->kind = RL_ERR_INVALID;
    return -1;
}

int rl_setting_type(const char *name) {
    const setting *s = lookup(name);
    return s ? s->type : -1;
}

int rl_setting_get(rl_client *c, const char *name, rl_setting_value *out, rl_error *err) {
    const setting *s = lookup(name);
    memset(out, 0, sizeof *out);
    if (!s) return unknown(name, err);
    int rc = 0;
    pthread_mutex_lock(&c->mu);
    const char *base = (const char *)&c->set + s->offset;
    out->type = s->type;
    if (s->type == RL_SETTING_INT) memcpy(&out->i, base, sizeof out->i);
    else if (s->type == RL_SETTING_REAL) memcpy(&out->r, base, sizeof out->r);
    else {
        const char *t = *(char *const *)base;
        out->text = strdup(t);
        if (!out->text) rc = -1, rl_error_set(err, RL_ERR_NOMEM, "out of memory");
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

enum { TAKES_VERIFY, TAKES_CA };

/* The index of the first TLS node with a password that takes its
 * certificate check (TAKES_VERIFY: no tls_verify of its own) or its CA
 * (TAKES_CA: no tls_ca_file or tls_ca_dir of its own, and a check not
 * turned off) from the settings, or -1 (caller holds c->mu). */
static int password_node_taking(const rl_client *c, int what) {
    for (int i = 0; i < c->n; i++) {
        const rl_endpoint *ep = &c->nodes[i]->ep;
        const rl_tls_opts *o = &ep->tls_opts;
        if (!ep->tls || !ep->password) continue;
        if (what == TAKES_VERIFY ? o->verify == RL_TLS_VERIFY_INHERIT
                                 : !o->ca_file && !o->ca_dir && o->verify != RL_TLS_VERIFY_OFF)
            return i;
    }
    return -1;
}

/* -1 with err set when some TLS node has a password and takes what the
 * setting name would change from the settings (what: its certificate
 * check, turned off, or its CA); else 0 (caller holds c->mu). Its own are
 * changed only with its password given again (the nodes table), and the
 * same must hold for what it takes from here: SQL that cannot read the
 * password could otherwise have it sent to a server of its choosing, and
 * SQL can write a file a CA is read from (ATTACH makes one). */
static int refuse_for_password_nodes(const rl_client *c, int what, const char *name, rl_error *err) {
    int i = password_node_taking(c, what);
    if (i < 0) return 0;
    long long id = (long long)c->nodes[i]->id;
    if (what == TAKES_VERIFY)
        rl_error_set(err, RL_ERR_STATE,
                     "tls_verify 0 would turn off the certificate check of node %lld, which has a password and no "
                     "tls_verify of its own; set it on that node with its password, as in UPDATE redlock_nodes SET "
                     "url = 'rediss://:<password>@host:port?tls_verify=0' WHERE id = %lld", id, id);
    else
        rl_error_set(err, RL_ERR_STATE,
                     "%s would change the CA that node %lld's certificate is checked against, and node %lld has a "
                     "password and no tls_ca_file or tls_ca_dir of its own; give it its CA with its password, as in "
                     "UPDATE redlock_nodes SET url = 'rediss://:<password>@host:port?tls_ca_file=/path/ca.pem' "
                     "WHERE id = %lld",
                     name, id, id, id);
    return -1;
}

int rl_setting_set(rl_client *c, const char *name, const rl_setting_value *in, rl_error *err) {
    const setting *s = lookup(name);
    if (!s) return unknown(name, err);
    if (in->type != s->type) {
        static const char *const want[] = {"a whole number", "a number", "text"};
        rl_error_set(err, RL_ERR_INVALID, "%s takes %s, not %s: %s", s->name, want[s->type], in->got ? in->got : "that",
                 s->hint);
        return -1;
    }
    if (
        (s->type == RL_SETTING_INT && (in->i < s->min || in->i > s->max)) ||
        (s->type == RL_SETTING_REAL && !(in->r >= 0.0 && in->r < 0.5)) ||
        (s->type == RL_SETTING_TEXT && (!in->text || strlen(in->text) > (size_t)s->max))) {
        rl_error_set(err, RL_ERR_INVALID, "%s must be %s", s->name, s->hint);
        return -1;
    }
    int is_tls = strncmp(s->name, "tls_", 4) == 0;
    /* A TLS file is loaded now, so a bad one is reported by this call. */
    if (is_tls && s->type == RL_SETTING_TEXT && in->text[0] && rl_tls_check_file(s->name, in->text, err) != 0)
        return -1;
    char *copy = NULL;
    if (s->type == RL_SETTING_TEXT && !(copy = strdup(in->text))) {
        rl_error_set(err, RL_ERR_NOMEM, "out of memory");
        return -1;
    }
    pthread_mutex_lock(&c->mu);
    char *base = (char *)&c->set + s->offset;
    int rc = 0;
    int ca = strcmp(s->name, "tls_ca_file") == 0 || strcmp(s->name, "tls_ca_dir") == 0;
    if ((strcmp(s->name, "tls_verify") == 0 && in->i == 0 && c->set.tls_verify != 0 &&
         refuse_for_password_nodes(c, TAKES_VERIFY, s->name, err) != 0) ||
        (ca && strcmp(*(char **)base, in->text) != 0 && refuse_for_password_nodes(c, TAKES_CA, s->name, err) != 0)) {
        pthread_mutex_unlock(&c->mu);
        free(copy);
        return -1;
    }
    if (s->type == RL_SETTING_INT) {
        if (strcmp(s->name, "reconnect_min_ms") == 0 && in->i > c->set.reconnect_max_ms) rc = -1;
        if (strcmp(s->name, "reconnect_max_ms") == 0 && in->i < c->set.reconnect_min_ms) rc = -1;
        if (rc) rl_error_set(err, RL_ERR_INVALID, "reconnect_min_ms must not be larger than reconnect_max_ms");
        else memcpy(base, &in->i, sizeof in->i);
    } else if (s->type == RL_SETTING_REAL) {
        memcpy(base, &in->r, sizeof in->r);
    } else {
        char **slot = (char **)base;
        free(*slot);
        *slot = copy;
        copy = NULL;
    }
    /* Contexts are rebuilt from the new value (and files read again) on
     * each TLS node's next connection, which comes at once: the ones made
     * under the old value are closed. */
    if (is_tls && rc == 0) {
        c->tls_gen++;
        rl_node_drop_tls_connections(c);
    }
    /* The next acquisition's holder details say the new name, under the
     * new prefix; the locks taken before keep theirs (rl_lock_holder.c). */
    if (rc == 0 && (strcmp(s->name, "client_name") == 0 || strcmp(s->name, "key_prefix") == 0)) c->holder.stale = 1;
    pthread_mutex_unlock(&c->mu);
    free(copy);
    return rc;
}
