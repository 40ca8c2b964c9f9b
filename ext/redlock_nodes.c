/* redlock_nodes: the eponymous, writable virtual table of this connection's
 * Redis nodes. INSERT by columns or by url, UPDATE, DELETE; password and the
 * password inside url read back masked; state and last_error show what the
 * last call saw of each node. Rows are copied at the start of a scan.
 *
 * Changes follow the transaction (rl_client_undo): xBegin, at the first
 * write of the table in a transaction (in autocommit mode, of each
 * statement that writes it), starts a change; a write changes the list at
 * once, so the statements after it read their own writes; xCommit keeps
 * it, xRollback puts the list back as it was at xBegin, and xSavepoint,
 * xRelease and xRollbackTo do the same for savepoints and for the
 * statement savepoints SQLite opens around a statement inside a
 * transaction (so a failing statement changes nothing). From xBegin to
 * the end of the transaction no lock can be taken (rl_session_nodes_begin),
 * so no lock ever counts on a list that is not committed, and a change is
 * refused while this connection holds any lock. Nothing is left to do at
 * COMMIT: every row was checked (and its host resolved) when written, so
 * there is no xSync.
 * SPDX-License-Identifier: BSD-3-Clause */
#include "redlock_nodes.h"
#include "redlock_vtab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

SQLITE_EXTENSION_INIT3

#define NODES_SCHEMA                                                                                   \
    "CREATE TABLE x(id INTEGER, host TEXT, port INTEGER, db INTEGER, username TEXT, password TEXT, "     \
    "timeout_ms INTEGER, state TEXT, last_error TEXT, url TEXT, tls INTEGER, tls_resumed INTEGER HIDDEN)"

enum { COL_ID, COL_HOST, COL_PORT, COL_DB, COL_USERNAME, COL_PASSWORD, COL_TIMEOUT, COL_STATE, COL_LAST_ERROR, COL_URL,
       COL_TLS, COL_TLS_RESUMED };

#define MASK RL_TEXT_MASK

typedef struct nodes_vtab {
    redlock_vtab t;        /* first: the state and db */
    int in_write;          /* between xBegin and xCommit/xRollback */
    rl_client_undo undo;   /* the lists to go back to, each with st->default_nodes as its tag */
} nodes_vtab;

typedef struct nodes_cursor {
    redlock_cursor c;  /* first: n rows, at i */
    rl_node_view *rows;
} nodes_cursor;

static int nodes_connect(sqlite3 *db, void *aux, int argc, const char *const *argv, sqlite3_vtab **out, char **err) {
    return redlock_vtab_connect(db, aux, argc, argv, err, NODES_SCHEMA, sizeof(nodes_vtab), out);
}

static int nodes_disconnect(sqlite3_vtab *vt) {
    nodes_vtab *v = (nodes_vtab *)vt;
    if (v->in_write) { /* not expected: SQLite ends the transaction first (xRollback at close) */
        rl_client_undo_end(&v->undo, rl_session_client(v->t.st->session), 0, NULL);
        rl_session_nodes_done(v->t.st->session);
    }
    return redlock_vtab_disconnect(vt);
}

static void free_rows(nodes_cursor *cur) {
    for (int i = 0; i < cur->c.n; i++) rl_endpoint_clear(&cur->rows[i].ep);
    free(cur->rows);
    cur->rows = NULL;
    cur->c.n = cur->c.i = 0;
}

static int nodes_open(sqlite3_vtab *vt, sqlite3_vtab_cursor **out) {
    (void)vt;
    return redlock_cursor_open(sizeof(nodes_cursor), out);
}

static int nodes_close(sqlite3_vtab_cursor *c) {
    free_rows((nodes_cursor *)c);
    sqlite3_free(c);
    return SQLITE_OK;
}

static int nodes_filter(sqlite3_vtab_cursor *c, int idx, const char *idxStr, int argc, sqlite3_value **argv) {
    (void)idx;
    (void)idxStr;
    (void)argc;
    (void)argv;
    nodes_cursor *cur = (nodes_cursor *)c;
    rl_session *session = ((redlock_vtab *)c->pVtab)->st->session;
    rl_session_check_fork(session);
    rl_client *cl = rl_session_client(session);
    free_rows(cur);
    rl_session_settle(session);
    int n = rl_client_node_count(cl);
    if (n == 0) return SQLITE_OK;
    cur->rows = calloc((size_t)n, sizeof *cur->rows);
    if (!cur->rows) return SQLITE_NOMEM;
    for (int i = 0; i < n; i++) {
        if (rl_client_node_view(cl, i, &cur->rows[cur->c.n]) != 0) break; /* the list shrank */
        cur->c.n++;
    }
    return SQLITE_OK;
}

static void text_or_null(sqlite3_context *ctx, const char *s) {
    if (s) sqlite3_result_text(ctx, s, -1, SQLITE_TRANSIENT);
    else sqlite3_result_null(ctx);
}

static int nodes_column(sqlite3_vtab_cursor *c, sqlite3_context *ctx, int col) {
    nodes_cursor *cur = (nodes_cursor *)c;
    const rl_node_view *r = &cur->rows[cur->c.i];
    /* In an UPDATE, columns the statement does not set stay "unchanged", so
     * xUpdate can tell them from values the user wrote. */
    if ((col == COL_STATE || col == COL_LAST_ERROR || col == COL_URL || col == COL_PASSWORD || col == COL_TIMEOUT ||
         col == COL_TLS || col == COL_TLS_RESUMED) &&
        sqlite3_vtab_nochange(ctx))
        return SQLITE_OK;
    switch (col) {
    case COL_ID: sqlite3_result_int64(ctx, r->id); break;
    case COL_HOST: text_or_null(ctx, r->ep.host); break;
    case COL_PORT: sqlite3_result_int(ctx, r->ep.port); break;
    case COL_DB: sqlite3_result_int(ctx, r->ep.db); break;
    case COL_USERNAME: text_or_null(ctx, r->ep.username); break;
    case COL_PASSWORD: text_or_null(ctx, r->ep.password ? MASK : NULL); break;
    case COL_TIMEOUT: sqlite3_result_int64(ctx, r->timeout_ms); break;
    case COL_STATE: text_or_null(ctx, r->state); break;
    case COL_LAST_ERROR: text_or_null(ctx, r->last_error[0] ? r->last_error : NULL); break;
    case COL_URL: {
        char *url = sqlite3_malloc(RL_URL_MAX); /* the longest shown: too much for a host thread's stack */
        if (!url) return SQLITE_NOMEM;
        rl_endpoint_format_url(&r->ep, url, RL_URL_MAX);
        sqlite3_result_text(ctx, url, -1, sqlite3_free);
        break;
    }
    case COL_TLS: sqlite3_result_int(ctx, r->ep.tls); break;
    case COL_TLS_RESUMED: sqlite3_result_int64(ctx, r->tls_resumed); break;
    }
    return SQLITE_OK;
}

static int nodes_rowid(sqlite3_vtab_cursor *c, sqlite_int64 *rowid) {
    nodes_cursor *cur = (nodes_cursor *)c;
    *rowid = cur->rows[cur->c.i].id;
    return SQLITE_OK;
}

/* 1 when the statement gives column v a value (not NULL, not left unchanged). */
static int given(sqlite3_value *v) { return sqlite3_value_type(v) != SQLITE_NULL && !sqlite3_value_nochange(v); }

/* Replaces *slot (owned) with a copy of text value v, or NULL for SQL NULL.
 * Returns SQLITE_OK, SQLITE_NOMEM, or an error when v is not text or holds
 * a NUL (which would silently cut it short). */
static int copy_text(sqlite3_vtab *vt, sqlite3_value *v, const char *name, char **slot) {
    free(*slot);
    *slot = NULL;
    int t = sqlite3_value_type(v);
    if (t == SQLITE_NULL) return SQLITE_OK;
    if (t != SQLITE_TEXT) return redlock_vtab_error(vt, "%s must be text or NULL", name);
    const char *text = (const char *)sqlite3_value_text(v);
    size_t n = (size_t)sqlite3_value_bytes(v);
    if (!text) return SQLITE_NOMEM;
    if (memchr(text, '\0', n)) return redlock_vtab_error(vt, "%s must not contain NUL characters", name);
    if (!(*slot = malloc(n + 1))) return SQLITE_NOMEM;
    memcpy(*slot, text, n + 1);
    return SQLITE_OK;
}

/* The endpoint of a row given by url, copied into *ep. */
static int url_endpoint(sqlite3_vtab *vt, sqlite3_value **cols, const rl_endpoint *old, int tls_given, rl_endpoint *ep,
                        int *kept_password) {
    sqlite3_value *uv = cols[COL_URL];
    rl_error err;
    if (sqlite3_value_type(uv) != SQLITE_TEXT) return redlock_vtab_error(vt, "url must be text");
    if (!old && sqlite3_value_type(cols[COL_HOST]) != SQLITE_NULL)
        return redlock_vtab_error(vt, "give either url or host/port/... columns, not both");
    const char *u = (const char *)sqlite3_value_text(uv);
    if (!u) return SQLITE_NOMEM;
    if (rl_endpoint_parse_url(u, (size_t)sqlite3_value_bytes(uv), ep, &err) != 0)
        return err.kind == RL_ERR_NOMEM ? SQLITE_NOMEM : redlock_vtab_error(vt, "%s", err.msg);
    /* The url reads back with its password masked: an UPDATE that writes it
     * back (edited or not) keeps the node's password, or its having none. */
    if (old && ep->password && strcmp(ep->password, MASK) == 0) {
        char *keep = old->password ? strdup(old->password) : NULL;
        if (old->password && !keep) return SQLITE_NOMEM;
        free(ep->password);
        ep->password = keep;
        *kept_password = keep != NULL;
    }
    if (tls_given && sqlite3_value_int64(cols[COL_TLS]) != ep->tls)
        return redlock_vtab_error(vt, "tls contradicts the url's scheme (rediss:// is TLS, redis:// is not)");
    sqlite3_value *tv = cols[COL_TIMEOUT];
    int64_t t = 0;
    if (sqlite3_value_type(tv) != SQLITE_NULL && (!old || !sqlite3_value_nochange(tv))) {
        if (!redlock_value_whole(tv, &t) || t < 1 || t > RL_TIMEOUT_MAX_MS)
            return redlock_vtab_error(vt, "timeout_ms must be a whole number from 1 to %d, or NULL for the url's own",
                                      RL_TIMEOUT_MAX_MS);
        ep->timeout_ms = (int)t;
    }
    return SQLITE_OK;
}

/* The endpoint of a row given by columns (host, port, db, username,
 * password, timeout_ms, tls), copied into *ep; an UPDATE starts from the
 * node's present endpoint old, whose password and TLS options stay unless
 * the statement changes them. */
static int column_endpoint(sqlite3_vtab *vt, sqlite3_value **cols, const rl_endpoint *old, int tls_given,
                           rl_endpoint *ep, int *kept_password) {
    if (old && rl_endpoint_copy(ep, old) != 0) return SQLITE_NOMEM;
    sqlite3_value *h = cols[COL_HOST], *p = cols[COL_PASSWORD];
    if (sqlite3_value_type(h) != SQLITE_TEXT || sqlite3_value_bytes(h) == 0)
        return redlock_vtab_error(vt, "host must be a non-empty text, as in INSERT INTO redlock_nodes(host, port) "
                                      "VALUES ('127.0.0.1', %d)", RL_PORT_DEFAULT);
    int rc = copy_text(vt, h, "host", &ep->host);
    if (rc != SQLITE_OK) return rc;
    const struct { int col; int *dst; int dflt, lo, hi; const char *name, *tail; } ints[] = {
        {COL_PORT, &ep->port, RL_PORT_DEFAULT, 1, RL_PORT_MAX, "port", ""},
        {COL_DB, &ep->db, 0, 0, RL_DB_MAX, "db", ""},
        {COL_TIMEOUT, &ep->timeout_ms, 0, 1, RL_TIMEOUT_MAX_MS, "timeout_ms", ", or NULL for the default"},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        sqlite3_value *v = cols[ints[i].col];
        /* timeout_ms not set by this UPDATE: the node keeps its own value, or none. */
        if (ints[i].col == COL_TIMEOUT && old && sqlite3_value_nochange(v)) continue;
        if (sqlite3_value_type(v) == SQLITE_NULL) {
            *ints[i].dst = ints[i].dflt;
            continue;
        }
        int64_t n = 0;
        if (!redlock_value_whole(v, &n) || n < ints[i].lo || n > ints[i].hi)
            return redlock_vtab_error(vt, "%s must be a whole number from %d to %d%s", ints[i].name, ints[i].lo,
                                      ints[i].hi, ints[i].tail);
        *ints[i].dst = (int)n;
    }
    if ((rc = copy_text(vt, cols[COL_USERNAME], "username", &ep->username)) != SQLITE_OK) return rc;
    if (ep->username && !ep->username[0]) {
        free(ep->username);
        ep->username = NULL;
    }
    /* The password reads back masked: writing the mask back keeps it. */
    int keep_password = old && (sqlite3_value_nochange(p) ||
                                (sqlite3_value_type(p) == SQLITE_TEXT && sqlite3_value_bytes(p) == (int)strlen(MASK) &&
                                 memcmp(sqlite3_value_text(p), MASK, strlen(MASK)) == 0));
    if (!keep_password && (rc = copy_text(vt, p, "password", &ep->password)) != SQLITE_OK) return rc;
    *kept_password = keep_password && ep->password;
    /* An UPDATE that leaves tls on keeps the node's own TLS options (set by its url). */
    ep->tls = tls_given ? (int)sqlite3_value_int64(cols[COL_TLS]) : old ? old->tls : 0;
    if (!(old && old->tls && ep->tls)) {
        rl_endpoint clear_opts = {.tls_opts = ep->tls_opts};
        rl_endpoint_clear(&clear_opts);
        memset(&ep->tls_opts, 0, sizeof ep->tls_opts);
    }
    return SQLITE_OK;
}

static int same_text(const char *a, const char *b) { return a == b || (a && b && strcmp(a, b) == 0); }

/* Whether ep still names old's server (host, port) and user, and reaches
 * it no less safely: TLS where old had it, with the same verification and
 * trust anchors (from plain TCP, any TLS is no weaker). The user counts
 * because Redis checks a password for its user: kept for another, it
 * would tell whether it opens that user too. */
static int same_server_same_way(const rl_endpoint *old, const rl_endpoint *ep) {
    if (!same_text(old->host, ep->host) || old->port != ep->port || !same_text(old->username, ep->username)) return 0;
    if (!old->tls) return 1;
    return ep->tls && old->tls_opts.verify == ep->tls_opts.verify &&
           same_text(old->tls_opts.ca_file, ep->tls_opts.ca_file) && same_text(old->tls_opts.ca_dir, ep->tls_opts.ca_dir);
}

/* Builds the endpoint of an INSERT or UPDATE row from its column values
 * (argv[2 + column]) into *ep, which owns every string; old is the row's
 * present endpoint for an UPDATE. On failure *ep is cleared, in this one
 * place. */
static int row_endpoint(sqlite3_vtab *vt, sqlite3_value **cols, const rl_endpoint *old, rl_endpoint *ep) {
    memset(ep, 0, sizeof *ep);
    if (given(cols[COL_STATE]) || given(cols[COL_LAST_ERROR]))
        return redlock_vtab_error(vt, "state and last_error are read-only");
    if (given(cols[COL_TLS_RESUMED])) return redlock_vtab_error(vt, "tls_resumed is read-only");
    /* tls: 0 or 1; NULL on INSERT is 0 (or what the url says). */
    sqlite3_value *tv = cols[COL_TLS];
    int tls_given = given(tv);
    int64_t tls = 0;
    if (tls_given && (!redlock_value_whole(tv, &tls) || (tls != 0 && tls != 1)))
        return redlock_vtab_error(vt, "tls must be 0 (plain TCP) or 1 (TLS)");
    int kept_password = 0;
    int rc = given(cols[COL_URL]) ? url_endpoint(vt, cols, old, tls_given, ep, &kept_password)
                                  : column_endpoint(vt, cols, old, tls_given, ep, &kept_password);
    /* Whoever may UPDATE the table cannot read the password: it must not be
     * able to send it to a server of its choosing either. */
    if (rc == SQLITE_OK && kept_password && !same_server_same_way(old, ep))
        rc = redlock_vtab_error(vt, "the node's password is kept (written back masked, or left out) only while "
                                    "host, port and user name stay the same and TLS and its checks stay on; give the "
                                    "password again to point the node at another server or user, or to connect to "
                                    "it another way");
    if (rc != SQLITE_OK) rl_endpoint_clear(ep);
    return rc;
}

/* Finds the present endpoint of node id into *out (owned copy). */
static int find_node(rl_client *cl, int64_t id, rl_endpoint *out) {
    int n = rl_client_node_count(cl);
    for (int i = 0; i < n; i++) {
        rl_node_view v;
        if (rl_client_node_view(cl, i, &v) != 0) break;
        if (v.id == id) {
            *out = v.ep;
            return 0;
        }
        rl_endpoint_clear(&v.ep);
    }
    return -1;
}

static int nodes_begin(sqlite3_vtab *vt) {
    nodes_vtab *v = (nodes_vtab *)vt;
    rl_error err;
    rl_session_check_fork(v->t.st->session);
    if (v->in_write) return SQLITE_OK;
    if (rl_session_nodes_begin(v->t.st->session, &err) != 0) return redlock_vtab_error(vt, "%s", err.msg);
    if (rl_client_undo_start(&v->undo) != 0) {
        rl_session_nodes_done(v->t.st->session);
        return SQLITE_NOMEM;
    }
    v->in_write = 1;
    return SQLITE_OK;
}

/* Ends the change: kept (xCommit) or undone (xRollback). */
static int end_change(nodes_vtab *v, int rollback) {
    if (!v->in_write) return SQLITE_OK;
    int dflt = 0;
    if (rl_client_undo_end(&v->undo, rl_session_client(v->t.st->session), rollback, &dflt))
        v->t.st->default_nodes = dflt;
    v->in_write = 0;
    rl_session_nodes_done(v->t.st->session);
    return SQLITE_OK;
}

static int nodes_commit(sqlite3_vtab *vt) { return end_change((nodes_vtab *)vt, 0); }

static int nodes_rollback(sqlite3_vtab *vt) { return end_change((nodes_vtab *)vt, 1); }

static int nodes_savepoint(sqlite3_vtab *vt, int level) {
    nodes_vtab *v = (nodes_vtab *)vt;
    if (!v->in_write) return SQLITE_OK;
    return rl_client_undo_mark(&v->undo, level) == 0 ? SQLITE_OK : SQLITE_NOMEM;
}

static int nodes_release(sqlite3_vtab *vt, int level) {
    nodes_vtab *v = (nodes_vtab *)vt;
    if (v->in_write) rl_client_undo_release(&v->undo, level);
    return SQLITE_OK;
}

static int nodes_rollback_to(sqlite3_vtab *vt, int level) {
    nodes_vtab *v = (nodes_vtab *)vt;
    rl_client *cl = rl_session_client(v->t.st->session);
    int dflt = 0;
    if (v->in_write && rl_client_undo_back_to(&v->undo, cl, level, &dflt))
        v->t.st->default_nodes = dflt;
    return SQLITE_OK;
}

/* Whether a statement that writes, other than the one running, is under
 * way on db (stepped, not reset). Two writes stepped in turn would share
 * one undo point: undoing either would undo the other's rows too, and in
 * autocommit mode the first one's failing half way would keep its rows
 * until the second ended. */
static int other_write_under_way(sqlite3 *db) {
    int writers = 0;
    for (sqlite3_stmt *s = sqlite3_next_stmt(db, NULL); s; s = sqlite3_next_stmt(db, s))
        if (sqlite3_stmt_busy(s) && !sqlite3_stmt_readonly(s)) writers++;
    return writers > 1;
}

static int nodes_update(sqlite3_vtab *vt, int argc, sqlite3_value **argv, sqlite_int64 *rowid) {
    nodes_vtab *v = (nodes_vtab *)vt;
    rl_session_check_fork(v->t.st->session);
    rl_client *cl = rl_session_client(v->t.st->session);
    rl_error err;
    if (!v->in_write) return redlock_vtab_error(vt, "internal: redlock_nodes written before xBegin");
    if (other_write_under_way(v->t.db))
        return redlock_vtab_error(vt, "another statement that writes is still under way on this connection (stepped "
                                      "but not finished); finish or reset it first, so that each change of "
                                      "redlock_nodes is all or nothing");
    /* The list as it is goes to the undo point first: a ROLLBACK (TO) puts it back. */
    if (rl_client_undo_before_change(&v->undo, cl, v->t.st->default_nodes) != 0)
        return SQLITE_NOMEM;
    if (argc == 1) { /* DELETE */
        rl_client_remove_node(cl, sqlite3_value_int64(argv[0]));
        v->t.st->default_nodes = 0;
        return SQLITE_OK;
    }
    sqlite3_value **cols = argv + 2;
    if (sqlite3_value_type(argv[0]) == SQLITE_NULL) { /* INSERT */
        int64_t id = 0;
        sqlite3_value *idv = sqlite3_value_type(argv[1]) != SQLITE_NULL ? argv[1] : cols[COL_ID];
        if (sqlite3_value_type(idv) != SQLITE_NULL) {
            if (!redlock_value_whole(idv, &id) || id < 1)
                return redlock_vtab_error(vt, "id must be a positive whole number or NULL");
        }
        rl_endpoint ep;
        int rc = row_endpoint(vt, cols, NULL, &ep);
        if (rc != SQLITE_OK) return rc;
        int64_t nid = rl_client_add_node(cl, &ep, id, &err);
        rl_endpoint_clear(&ep);
        if (nid < 0) return redlock_vtab_error(vt, "%s", err.msg);
        *rowid = nid;
        v->t.st->default_nodes = 0;
        return SQLITE_OK;
    }
    /* UPDATE */
    int64_t id = sqlite3_value_int64(argv[0]), new_id = 0;
    if (sqlite3_value_int64(argv[1]) != id ||
        (!sqlite3_value_nochange(cols[COL_ID]) && (!redlock_value_whole(cols[COL_ID], &new_id) || new_id != id)))
        return redlock_vtab_error(vt, "a node's id cannot be changed; DELETE the row and INSERT a new one");
    rl_endpoint old, ep;
    if (find_node(cl, id, &old) != 0) return redlock_vtab_error(vt, "the node was removed");
    int rc = row_endpoint(vt, cols, &old, &ep);
    if (rc == SQLITE_OK) {
        if (rl_client_update_node(cl, id, &ep, &err) != 0) rc = redlock_vtab_error(vt, "%s", err.msg);
        else v->t.st->default_nodes = 0;
        rl_endpoint_clear(&ep);
    }
    rl_endpoint_clear(&old);
    return rc;
}

static sqlite3_module nodes_module = {
    .iVersion = 2,
    .xCreate = 0,
    .xConnect = nodes_connect,
    .xBestIndex = redlock_vtab_best_index,
    .xDisconnect = nodes_disconnect,
    .xDestroy = nodes_disconnect,
    .xOpen = nodes_open,
    .xClose = nodes_close,
    .xFilter = nodes_filter,
    .xNext = redlock_cursor_next,
    .xEof = redlock_cursor_eof,
    .xColumn = nodes_column,
    .xRowid = nodes_rowid,
    .xUpdate = nodes_update,
    .xBegin = nodes_begin,
    .xCommit = nodes_commit,
    .xRollback = nodes_rollback,
    .xSavepoint = nodes_savepoint,
    .xRelease = nodes_release,
    .xRollbackTo = nodes_rollback_to,
};

int redlock_register_nodes_table(sqlite3 *db, redlock_state *st) {
    return sqlite3_create_module_v2(db, "redlock_nodes", &nodes_module, redlock_state_ref(st), redlock_state_unref);
}
