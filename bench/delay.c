/* delay: a TCP proxy that puts a node at a chosen round-trip time, for the
 * latency rows of make bench (bench/run.py).
 *
 * Every chunk read from one side is written to the other side a fixed time
 * after it was read (the requests' delay one way, the replies' the other),
 * in order, so a node behind it answers one round-trip time later than it
 * would, and pipelined commands stay pipelined. One thread, ppoll(2) with
 * nanosecond timeouts and a timer slack of 1 ns: the delays hold to a few
 * tens of microseconds on an idle machine, where Python's selectors round
 * every wait up to a whole millisecond (sql-tests/faultproxy.py, which has
 * the faults this one lacks). Loopback only; ends on SIGTERM or when its
 * parent dies (PR_SET_PDEATHSIG).
 *
 * usage: delay TARGET_PORT REQUEST_US REPLY_US READY_FILE
 *   listens on a free loopback port, writes it to READY_FILE, and forwards
 *   each connection to 127.0.0.1:TARGET_PORT.
 * SPDX-License-Identifier: BSD-3-Clause */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "measure.h"

#define MAXC 64 /* connections at once */

typedef struct chunk {
    struct chunk *next;
    int64_t due_ns;
    size_t len, off; /* len 0: the end of the stream */
    char data[];
} chunk;

/* One direction of a connection: read from fd `from`, written to `to`. */
typedef struct pipe_ {
    int from, to;
    int64_t delay_ns;
    chunk *head, *tail;
    int eof_in;  /* `from` ended: read no more */
    int done;    /* its end was passed on */
} pipe_;

typedef struct conn {
    int used;
    pipe_ p[2]; /* 0: client to node (requests), 1: node to client (replies) */
} conn;

static conn conns[MAXC];
static volatile sig_atomic_t stop;

static void on_term(int sig) {
    (void)sig;
    stop = 1;
}

static void nonblock(int fd) {
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void drop(conn *c) {
    for (int d = 0; d < 2; d++) {
        for (chunk *k = c->p[d].head, *n; k; k = n) {
            n = k->next;
            free(k);
        }
        c->p[d].head = c->p[d].tail = NULL;
    }
    close(c->p[0].from);
    close(c->p[0].to);
    c->used = 0;
}

static void push(pipe_ *p, const char *data, size_t len, int64_t now) {
    chunk *k = malloc(sizeof *k + len);
    if (!k) return; /* out of memory: the bytes are lost, as on a bad link */
    k->next = NULL;
    k->due_ns = now + p->delay_ns;
    k->len = len;
    k->off = 0;
    memcpy(k->data, data, len);
    if (p->tail) p->tail->next = k;
    else p->head = k;
    p->tail = k;
}

/* Reads what `from` has; -1 when the connection is to be dropped. */
static int pump_in(pipe_ *p, int64_t now) {
    char buf[65536];
    for (;;) {
        ssize_t n = recv(p->from, buf, sizeof buf, 0);
        if (n > 0) {
            push(p, buf, (size_t)n, now);
            continue;
        }
        if (n == 0) {
            p->eof_in = 1;
            push(p, NULL, 0, now);
            return 0;
        }
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
    }
}

/* Writes the chunks that are due; -1 when the connection is to be dropped. */
static int pump_out(pipe_ *p, int64_t now) {
    while (p->head && p->head->due_ns <= now) {
        chunk *k = p->head;
        if (k->len == 0) {
            shutdown(p->to, SHUT_WR);
            p->done = 1;
        } else {
            ssize_t n = send(p->to, k->data + k->off, k->len - k->off, MSG_NOSIGNAL);
            if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
            k->off += (size_t)n;
            if (k->off < k->len) return 0; /* the rest when it can take more */
        }
        p->head = k->next;
        if (!p->head) p->tail = NULL;
        free(k);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: delay TARGET_PORT REQUEST_US REPLY_US READY_FILE\n");
        return 2;
    }
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    prctl(PR_SET_TIMERSLACK, 1UL);
    signal(SIGTERM, on_term);
    signal(SIGINT, on_term);
    int target = atoi(argv[1]);
    int64_t req_ns = atoll(argv[2]) * 1000, rep_ns = atoll(argv[3]) * 1000;
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) != 0 || listen(ls, 64) != 0 ||
        getsockname(ls, (struct sockaddr *)&a, &alen) != 0) {
        perror("delay: listen");
        return 1;
    }
    nonblock(ls);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", argv[4]);
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%d\n", ntohs(a.sin_port)) < 0 || fclose(f) != 0 || rename(tmp, argv[4]) != 0) {
        perror("delay: ready file");
        return 1;
    }
    struct pollfd pfd[1 + 2 * MAXC];
    int who[1 + 2 * MAXC];
    while (!stop) {
        int64_t now = now_ns(), wake = INT64_MAX;
        int k = 0;
        pfd[k++] = (struct pollfd){.fd = ls, .events = POLLIN};
        for (int i = 0; i < MAXC; i++) {
            conn *c = &conns[i];
            if (!c->used) continue;
            for (int d = 0; d < 2; d++) {
                pipe_ *p = &c->p[d];
                short ev = p->eof_in ? 0 : POLLIN;
                if (p->head && p->head->due_ns <= now) ev |= POLLOUT; /* due but the socket was full */
                else if (p->head && p->head->due_ns < wake) wake = p->head->due_ns;
                /* the fd polled is `from` for reading; `to` for writing */
                if (ev & POLLIN) pfd[k] = (struct pollfd){.fd = p->from, .events = POLLIN}, who[k++] = i * 2 + d;
                if (ev & POLLOUT) pfd[k] = (struct pollfd){.fd = p->to, .events = POLLOUT}, who[k++] = i * 2 + d;
            }
        }
        struct timespec ts, *tp = NULL;
        if (wake != INT64_MAX) {
            int64_t w = wake > now ? wake - now : 0;
            ts = (struct timespec){.tv_sec = w / 1000000000, .tv_nsec = w % 1000000000};
            tp = &ts;
        }
        int n = ppoll(pfd, (nfds_t)k, tp, NULL);
        if (n < 0 && errno != EINTR) break;
        now = now_ns();
        if (n > 0 && (pfd[0].revents & POLLIN)) {
            int cs = accept(ls, NULL, NULL);
            int slot = 0;
            while (slot < MAXC && conns[slot].used) slot++;
            if (cs >= 0 && slot < MAXC) {
                int us = socket(AF_INET, SOCK_STREAM, 0);
                struct sockaddr_in t = {.sin_family = AF_INET, .sin_port = htons((uint16_t)target),
                                        .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
                if (us >= 0 && connect(us, (struct sockaddr *)&t, sizeof t) == 0) {
                    nonblock(cs);
                    nonblock(us);
                    conns[slot] = (conn){.used = 1};
                    conns[slot].p[0] = (pipe_){.from = cs, .to = us, .delay_ns = req_ns};
                    conns[slot].p[1] = (pipe_){.from = us, .to = cs, .delay_ns = rep_ns};
                } else {
                    if (us >= 0) close(us);
                    close(cs);
                }
            } else if (cs >= 0) {
                close(cs);
            }
        }
        for (int j = 1; n > 0 && j < k; j++) {
            if (!pfd[j].revents) continue;
            conn *c = &conns[who[j] / 2];
            if (!c->used) continue;
            pipe_ *p = &c->p[who[j] % 2];
            if (pfd[j].fd == p->from && pump_in(p, now) != 0) drop(c);
        }
        for (int i = 0; i < MAXC; i++) {
            conn *c = &conns[i];
            for (int d = 0; c->used && d < 2; d++)
                if (pump_out(&c->p[d], now) != 0) drop(c);
            if (c->used && c->p[0].done && c->p[1].done) drop(c);
        }
    }
    for (int i = 0; i < MAXC; i++)
        if (conns[i].used) drop(&conns[i]);
    close(ls);
    return 0;
}
