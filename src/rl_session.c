/* rl_session: held locks of one owner (see rl_session.h). */
#include "rl_session.h"

#include <stdlib.h>
#include <string.h>

#include "rl_clock.h"

rl_session *rl_session_new(void) {
    rl_session *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->client = rl_client_new();
    if (!s->client || pthread_mutex_init(&s->mu, NULL) != 0) {
        rl_client_free(s->client);
        free(s);
        return NULL;
    }
    return s;
}

void rl_session_free(rl_session *s) {
    if (!s) return;
    rl_session_release_all(s);
    rl_client_free(s->client);
    free(s->held);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* Index of the held lock on res, or -1. Caller holds s->mu. */
static int find(const rl_session *s, const char *res, size_t reslen) {
    for (int i = 0; i < s->nheld; i++)
        if (s->held[i].reslen == reslen && memcmp(s->held[i].res, res, reslen) == 0) return i;
    return -1;
}

/* Caller holds s->mu. */
static void forget(rl_session *s, int i) {
    free(s->held[i].res);
    s->held[i] = s->held[--s->nheld];
}

/* Records a new lock; returns 0 or -1 on OOM. Caller holds s->mu. */
static int remember(rl_session *s, const char *res, size_t reslen, const char *token, int64_t ttl_ms,
                    const rl_outcome *o) {
    if (s->nheld == s->capheld) {
        int cap = s->capheld ? s->capheld * 2 : 8;
        rl_held *h = realloc(s->held, (size_t)cap * sizeof *h);
        if (!h) return -1;
        s->held = h;
        s->capheld = cap;
    }
    rl_held *h = &s->held[s->nheld];
    memset(h, 0, sizeof *h);
    h->res = malloc(reslen + 1);
    if (!h->res) return -1;
    memcpy(h->res, res, reslen);
    h->res[reslen] = '\0';
    h->reslen = reslen;
    memcpy(h->token, token, RL_TOKEN_LEN + 1);
    h->ttl_ms = ttl_ms;
    h->valid_until_us = o->valid_until_us;
    h->fence = o->fence;
    h->count = 1;
    h->yes_nodes = o->yes;
    s->nheld++;
    return 0;
}

rl_status rl_session_acquire(rl_session *s, const char *res, size_t reslen, int64_t ttl_ms, int64_t wait_ms,
                             char token[RL_TOKEN_LEN + 1], rl_outcome *out) {
    memset(out, 0, sizeof *out);
    if (rl_lock_check_resource(s->client, res, reslen, out) != RL_OK) return out->status;
    pthread_mutex_lock(&s->mu);
    int i = find(s, res, reslen);
    if (i >= 0) {
        rl_held *h = &s->held[i];
        int64_t left = h->valid_until_us - rl_now_us();
        if (left > 0 && ttl_ms >= 1 && ttl_ms <= RL_TTL_MAX_MS && wait_ms >= 0) {
            h->count++;
            memcpy(token, h->token, RL_TOKEN_LEN + 1);
            out->status = RL_OK;
            out->validity_ms = left / 1000;
            out->valid_until_us = h->valid_until_us;
            out->fence = h->fence;
            pthread_mutex_unlock(&s->mu);
            return RL_OK;
        }
        if (left <= 0) forget(s, i); /* expired: take it anew */
    }
    pthread_mutex_unlock(&s->mu);
    rl_status st = rl_lock_acquire(s->client, res, reslen, ttl_ms, wait_ms, token, out);
    if (st == RL_OK) {
        pthread_mutex_lock(&s->mu);
        int rc = remember(s, res, reslen, token, ttl_ms, out);
        pthread_mutex_unlock(&s->mu);
        if (rc != 0) {
            rl_outcome tmp;
            rl_lock_release(s->client, res, reslen, token, RL_TOKEN_LEN, &tmp);
            token[0] = '\0';
            out->status = RL_NOMEM;
            strcpy(out->msg, "out of memory");
            return RL_NOMEM;
        }
    }
    return st;
}

rl_status rl_session_release(rl_session *s, const char *res, size_t reslen, const char *token, size_t toklen,
                             int *not_held, rl_outcome *out) {
    char mine[RL_TOKEN_LEN + 1];
    memset(out, 0, sizeof *out);
    *not_held = 0;
    if (rl_lock_check_resource(s->client, res, reslen, out) != RL_OK) return out->status;
    pthread_mutex_lock(&s->mu);
    int i = find(s, res, reslen);
    if (!token) {
        if (i < 0) {
            pthread_mutex_unlock(&s->mu);
            *not_held = 1;
            out->status = RL_MISUSE;
            return RL_MISUSE;
        }
        if (s->held[i].count > 1) {
            s->held[i].count--;
            pthread_mutex_unlock(&s->mu);
            out->status = RL_OK;
            return RL_OK;
        }
        memcpy(mine, s->held[i].token, sizeof mine);
        token = mine;
        toklen = RL_TOKEN_LEN;
    }
    pthread_mutex_unlock(&s->mu);
    rl_status st = rl_lock_release(s->client, res, reslen, token, toklen, out);
    if (st == RL_OK || st == RL_REFUSED) {
        pthread_mutex_lock(&s->mu);
        i = find(s, res, reslen);
        if (i >= 0 && toklen == RL_TOKEN_LEN && memcmp(s->held[i].token, token, toklen) == 0) forget(s, i);
        pthread_mutex_unlock(&s->mu);
    }
    return st;
}

rl_status rl_session_extend(rl_session *s, const char *res, size_t reslen, const char *token, size_t toklen,
                            int64_t ttl_ms, int *not_held, rl_outcome *out) {
    char mine[RL_TOKEN_LEN + 1];
    memset(out, 0, sizeof *out);
    *not_held = 0;
    if (rl_lock_check_resource(s->client, res, reslen, out) != RL_OK) return out->status;
    pthread_mutex_lock(&s->mu);
    int i = find(s, res, reslen);
    int ours = i >= 0 && (!token || (toklen == RL_TOKEN_LEN && memcmp(s->held[i].token, token, toklen) == 0));
    if (!token && i < 0) {
        pthread_mutex_unlock(&s->mu);
        *not_held = 1;
        out->status = RL_MISUSE;
        return RL_MISUSE;
    }
    if (ours && s->held[i].valid_until_us <= rl_now_us()) {
        /* Our validity has ended: someone else may hold it by now. Never bring it back. */
        forget(s, i);
        pthread_mutex_unlock(&s->mu);
        out->status = RL_REFUSED;
        strcpy(out->msg, "the lock had expired before it was extended");
        return RL_REFUSED;
    }
    if (!token) {
        memcpy(mine, s->held[i].token, sizeof mine);
        token = mine;
        toklen = RL_TOKEN_LEN;
    }
    pthread_mutex_unlock(&s->mu);
    rl_status st = rl_lock_extend(s->client, res, reslen, token, toklen, ttl_ms, out);
    pthread_mutex_lock(&s->mu);
    i = find(s, res, reslen);
    if (i >= 0 && toklen == RL_TOKEN_LEN && memcmp(s->held[i].token, token, toklen) == 0) {
        if (st == RL_OK) {
            s->held[i].valid_until_us = out->valid_until_us;
            s->held[i].ttl_ms = ttl_ms;
            s->held[i].extensions++;
        } else if (st == RL_REFUSED) {
            forget(s, i);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}

int rl_session_release_all(rl_session *s) {
    int n = 0;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        if (s->nheld == 0) {
            pthread_mutex_unlock(&s->mu);
            return n;
        }
        rl_held h = s->held[s->nheld - 1];
        s->nheld--;
        pthread_mutex_unlock(&s->mu);
        rl_outcome o;
        rl_lock_release(s->client, h.res, h.reslen, h.token, RL_TOKEN_LEN, &o);
        free(h.res);
        n++;
    }
}
