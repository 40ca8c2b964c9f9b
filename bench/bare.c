/* bare: the limit for one Redlock acquire+release cycle.
 *
 * A bare hiredis client that sends exactly the commands the engine sends
 * (the script texts come from src/rl_scripts.h at build time) to every node
 * at once over non-blocking connections, and waits for every reply before
 * going on:
 *
 *   once per node, first (not with "noholder", as the engine with holder_info 0):
 *                EVAL <RL_SCRIPT_DETAILS_PUT> 1 redlock-client:<id> details life
 *   then each cycle:
 *   fencing on:  EVAL <RL_SCRIPT_ACQUIRE_FENCED> 3 key key:fence floor token ttl fence_ttl
 *   fencing off: SET key token NX PX ttl
 *   (floor: the fencing floor of the key, src/rl_floor.h: RL_FLOOR_NAME, as
 *   the key prefix is "" and the keys have no hash tag)
 *   then:        EVAL <RL_SCRIPT_RELEASE> 1 key token key:released
 *                (the release script publishes on that channel, to wake waiters;
 *                the key prefix is the engine's default, "": KEYPREFIX below
 *                is only part of the key names)
 *   From the second cycle on, each script goes as EVALSHA <digest> (the
 *   first EVAL cached it on the node), as the engine sends it; with
 *   "noevalsha" always in full, as the engine with evalsha 0.
 *
 * No SQLite, no quorum logic, no health tracking, no error handling beyond
 * checking that every reply has the success shape (the run fails loudly
 * otherwise). Tokens have the engine's shape (rl_random.h): a details id
 * (fixed for the run, as for one connection), the time in ms of the acquire
 * in hex, and 32 hex characters from a cheap counter hash instead of
 * getrandom(2).
 *
 * The holder details are the engine's (rl_lock_holder.c): "redlock1", host,
 * pid and program name, separated by 0x1f, written once per connection
 * with the life the engine gives them for a TTL of 10 s (RL_HOLDER_LIFE_MS),
 * which a run of a few seconds never has to write again.
 *
 * With "quorum" it goes on as soon as a majority has answered each round,
 * like the engine, and reads the late replies during the next rounds.
 *
 * usage: bare HOST:PORT[,HOST:PORT...] FENCING(0|1) KEYPREFIX SECONDS [quorum] [noholder] [noevalsha]
 * prints one JSON line: cycles, seconds, rate, p50_us, p99_us, mean_us.
 * SPDX-License-Identifier: BSD-3-Clause */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "rl_evalsha.h"
#include "rl_floor.h"   /* RL_FLOOR_NAME only */
#include "rl_random.h"  /* RL_TOKEN_LEN only */
#include "rl_lock.h"    /* RL_HOLDER_LIFE_MS only */
#include "rl_scripts.h"
#include "rl_wait.h"    /* RL_RELEASED_SUFFIX only */
#include "measure.h"

#define MAXN 16
#define TTL_MS "10000"
#define FENCE_TTL_MS "604800000" /* the engine's default fence_ttl_ms (7 days), > ttl */

static void die(const char *fmt, const char *a) {
    fprintf(stderr, "bare: ");
    fprintf(stderr, fmt, a);
    fprintf(stderr, "\n");
    exit(1);
}

static redisContext *ctx[MAXN];
static int n;

static redisContext *connect_nb(const char *hostport) {
    char host[256];
    const char *colon = strrchr(hostport, ':');
    if (!colon || (size_t)(colon - hostport) >= sizeof host) die("bad node '%s' (want HOST:PORT)", hostport);
    memcpy(host, hostport, (size_t)(colon - hostport));
    host[colon - hostport] = '\0';
    redisContext *c = redisConnectNonBlock(host, atoi(colon + 1));
    if (!c || c->err) die("cannot connect to %s", hostport);
    struct pollfd p = {.fd = c->fd, .events = POLLOUT};
    if (poll(&p, 1, 2000) != 1) die("connect to %s timed out", hostport);
    int e = 0;
    socklen_t len = sizeof e;
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &e, &len) != 0 || e != 0) die("connect to %s failed", hostport);
    return c;
}

static int ok_fenced(const redisReply *r) { return r->type == REDIS_REPLY_INTEGER && r->integer > 0; }
static int ok_set(const redisReply *r) { return r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0; }
static int ok_release(const redisReply *r) { return r->type == REDIS_REPLY_INTEGER && r->integer == 1; }

/* Sends argv to every node, then reads until every node has answered (or,
 * with wait_quorum, until a majority has: the replies still on their way are
 * owed, read and checked during later rounds, as the engine does); checks
 * each reply with ok(). */
static int wait_quorum;
static int owed[MAXN];

static int by_digest; /* send the engine's cycle scripts as EVALSHA */

static void round_all(int argc, const char **argv, const size_t *lens, int (*ok)(const redisReply *)) {
    const char *sha_argv[16];
    size_t sha_lens[16];
    int script = by_digest && argc <= 16 && strcmp(argv[0], "EVAL") == 0 ? rl_evalsha_index(argv[1], lens[1]) : -1;
    if (script >= 0 && rl_evalsha_digest(script)) {
        memcpy(sha_argv, argv, (size_t)argc * sizeof *argv);
        memcpy(sha_lens, lens, (size_t)argc * sizeof *lens);
        sha_argv[0] = "EVALSHA", sha_lens[0] = 7;
        sha_argv[1] = rl_evalsha_digest(script), sha_lens[1] = 40;
        argv = sha_argv;
        lens = sha_lens;
    }
    struct pollfd pfd[MAXN];
    int done_write[MAXN], got[MAXN], have = 0, need = wait_quorum ? n / 2 + 1 : n;
    for (int i = 0; i < n; i++) {
        redisAppendCommandArgv(ctx[i], argc, argv, lens);
        int done = 0;
        if (redisBufferWrite(ctx[i], &done) != REDIS_OK) die("write failed: %s", ctx[i]->errstr);
        done_write[i] = done;
        got[i] = 0;
    }
    while (have < need) {
        for (int i = 0; i < n; i++) {
            pfd[i].fd = got[i] && !owed[i] ? -1 : ctx[i]->fd;
            pfd[i].events = (short)(POLLIN | (done_write[i] ? 0 : POLLOUT));
            pfd[i].revents = 0;
        }
        int k = poll(pfd, (nfds_t)n, 5000);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) die("%s", "no reply within 5 s (a hung node?)");
        for (int i = 0; i < n; i++) {
            if (!pfd[i].revents) continue;
            if (!done_write[i] && (pfd[i].revents & POLLOUT)) {
                if (redisBufferWrite(ctx[i], &done_write[i]) != REDIS_OK) die("write failed: %s", ctx[i]->errstr);
            }
            if (pfd[i].revents & (POLLIN | POLLERR | POLLHUP)) {
                if (redisBufferRead(ctx[i]) != REDIS_OK) die("read failed: %s", ctx[i]->errstr);
                void *r = NULL;
                for (;;) {
                    if (redisGetReply(ctx[i], &r) != REDIS_OK) die("protocol error: %s", ctx[i]->errstr);
                    if (!r) break;
                    redisReply *rep = r;
                    if (owed[i]) {
                        /* a late reply of an earlier round: acquire or release, either success shape */
                        if (!ok_fenced(rep) && !ok_set(rep) && !ok_release(rep)) die("unexpected late reply: %s", rep->str ? rep->str : "?");
                        owed[i]--;
                    } else {
                        if (!ok(rep)) die("unexpected reply: %s", rep->str ? rep->str : "(not the success shape)");
                        got[i] = 1;
                        have++;
                    }
                    freeReplyObject(rep);
                }
            }
        }
    }
    for (int i = 0; i < n; i++)
        if (!got[i]) owed[i]++;
}

static int ok_details(const redisReply *r) { return r->type == REDIS_REPLY_INTEGER && r->integer == 1; }

static uint64_t mix(uint64_t x) { /* splitmix64 */
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static const char hex[] = "0123456789abcdef";

/* The engine's shape: id, '0' (no set), time (ms, 11 hex digits), then the random part. */
static void make_token(const char id[RL_TOKEN_ID_LEN], uint64_t seq, char out[RL_TOKEN_LEN + 1]) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    unsigned long long ms = (unsigned long long)tv.tv_sec * 1000 + (unsigned long long)tv.tv_usec / 1000;
    memcpy(out, id, RL_TOKEN_ID_LEN);
    out[RL_TOKEN_ID_LEN] = '0';
    for (int i = RL_TOKEN_PUBLIC_LEN - 1; i > RL_TOKEN_ID_LEN; i--, ms >>= 4) out[i] = hex[ms & 15];
    uint64_t a = mix(seq * 2), b = mix(seq * 2 + 1);
    for (int i = 0; i < 16; i++) {
        out[RL_TOKEN_PUBLIC_LEN + i] = hex[(a >> (4 * i)) & 15];
        out[RL_TOKEN_PUBLIC_LEN + 16 + i] = hex[(b >> (4 * i)) & 15];
    }
    out[RL_TOKEN_LEN] = '\0';
}

int main(int argc, char **argv) {
    int holder = 1, evalsha = 1;
    for (int i = 5; i < argc; i++) {
        if (strcmp(argv[i], "quorum") == 0) wait_quorum = 1;
        else if (strcmp(argv[i], "noholder") == 0) holder = 0;
        else if (strcmp(argv[i], "noevalsha") == 0) evalsha = 0;
        else argc = 0;
    }
    if (argc < 5) {
        fprintf(stderr, "usage: bare HOST:PORT[,HOST:PORT...] FENCING(0|1) KEYPREFIX SECONDS [quorum] [noholder] [noevalsha]\n");
        return 2;
    }
    char *nodes = strdup(argv[1]);
    for (char *save = NULL, *tok = strtok_r(nodes, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (n == MAXN) die("%s", "too many nodes");
        ctx[n++] = connect_nb(tok);
    }
    int fencing = atoi(argv[2]);
    const char *prefix = argv[3];
    double seconds = atof(argv[4]);
    size_t cap = 1 << 16, cnt = 0;
    int64_t *lat = malloc(cap * sizeof *lat);
    uint64_t seed = (uint64_t)now_ns();
    char id[RL_TOKEN_ID_LEN];
    for (int i = 0; i < RL_TOKEN_ID_LEN; i++) id[i] = hex[(mix(seed ^ 0x5bd1e995u) >> (4 * i)) & 15];
    if (holder) { /* the connection's details, once, ahead of its first lock */
        char host[256] = "", details[300], dkey[64];
        gethostname(host, sizeof host - 1);
        int dl = snprintf(details, sizeof details, "redlock1\x1f%.64s\x1f%ld\x1f" "bare", host,
                          (long)getpid());
        int kl = snprintf(dkey, sizeof dkey, RL_CLIENT_DETAILS_TAG "%.*s", RL_TOKEN_ID_LEN, id);
        char life[32]; /* as rl_holder_before_send gives them for this TTL */
        int ttl = atoi(TTL_MS);
        int ll = snprintf(life, sizeof life, "%d", 4 * ttl > RL_HOLDER_LIFE_MS ? 4 * ttl : RL_HOLDER_LIFE_MS);
        const char *a[] = {"EVAL", RL_SCRIPT_DETAILS_PUT, "1", dkey, details, life};
        size_t l[] = {4, sizeof RL_SCRIPT_DETAILS_PUT - 1, 1, (size_t)kl, (size_t)dl, (size_t)ll};
        round_all(6, a, l, ok_details);
    }

    int64_t t_start = now_ns(), t_end = t_start + (int64_t)(seconds * 1e9), t = t_start;
    const int warmup = 200;
    double cpu0 = 0, user0 = 0;
    for (uint64_t i = 1;; i++) {
        char key[128], fkey[160], chan[160], token[RL_TOKEN_LEN + 1];
        int kl = snprintf(key, sizeof key, "%s%llu", prefix, (unsigned long long)i);
        int fl = snprintf(fkey, sizeof fkey, "%s:fence", key);
        int cl = snprintf(chan, sizeof chan, "%s" RL_RELEASED_SUFFIX, key);
        make_token(id, seed + i, token);
        if (fencing) {
            const char *a[] = {"EVAL", RL_SCRIPT_ACQUIRE_FENCED, "3", key, fkey, RL_FLOOR_NAME, token, TTL_MS,
                               FENCE_TTL_MS};
            size_t l[] = {4, sizeof RL_SCRIPT_ACQUIRE_FENCED - 1, 1, (size_t)kl, (size_t)fl, sizeof RL_FLOOR_NAME - 1,
                          RL_TOKEN_LEN, sizeof TTL_MS - 1, sizeof FENCE_TTL_MS - 1};
            round_all(9, a, l, ok_fenced);
        } else {
            const char *a[] = {"SET", key, token, "NX", "PX", TTL_MS};
            size_t l[] = {3, (size_t)kl, RL_TOKEN_LEN, 2, 2, sizeof TTL_MS - 1};
            round_all(6, a, l, ok_set);
        }
        const char *r[] = {"EVAL", RL_SCRIPT_RELEASE, "1", key, token, chan};
        size_t rl[] = {4, sizeof RL_SCRIPT_RELEASE - 1, 1, (size_t)kl, RL_TOKEN_LEN, (size_t)cl};
        round_all(6, r, rl, ok_release);
        by_digest = evalsha; /* every script ran once in full: the nodes have it cached */
        int64_t t2 = now_ns();
        if (i == warmup) t_start = t2, t_end = t2 + (int64_t)(seconds * 1e9), cpu0 = cpu_us(), user0 = user_cpu_us();
        else if (i > warmup) {
            if (cnt == cap) lat = realloc(lat, (cap *= 2) * sizeof *lat);
            lat[cnt++] = t2 - t;
        }
        t = t2;
        if (i > warmup && t2 >= t_end) break;
    }
    double secs = (double)(t - t_start) / 1e9, cpu = cpu_us() - cpu0, user = user_cpu_us() - user0;
    qsort(lat, cnt, sizeof *lat, cmp_i64);
    double sum = 0;
    for (size_t i = 0; i < cnt; i++) sum += (double)lat[i];
    printf("{\"cycles\": %zu, \"seconds\": %.4f, \"rate\": %.1f, \"p50_us\": %.1f, \"p99_us\": %.1f, \"mean_us\": %.1f, \"cpu_us\": %.1f, \"user_us\": %.1f}\n",
           cnt, secs, (double)cnt / secs, lat[cnt / 2] / 1e3, lat[(size_t)(cnt * 0.99)] / 1e3, sum / (double)cnt / 1e3,
           cpu / (double)cnt, user / (double)cnt);
    for (int i = 0; i < n; i++) redisFree(ctx[i]);
    free(lat);
    free(nodes);
    return 0;
}
