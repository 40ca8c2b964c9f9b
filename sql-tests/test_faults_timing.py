"""Faults, bounded time: with a minority of 3 or 5 nodes dead (kill -9), hung
(SIGSTOP), write-paused (CLIENT PAUSE WRITE), slow (replies delayed through a
FaultProxy far beyond timeout_ms) or blackholed (FaultProxy), acquire, extend
and release succeed and return soon; with a majority in that state they fail
with the 'redlock: ' error naming the failing nodes, just as soon (per
attempt). The release after a failed attempt and the releases at connection
close are bounded too.

The bound is generous (BOUND, per-node timeout 50 ms): it only catches calls
that wait without a deadline or pay a timeout many times over. The measured
times are printed (and appended to $REDLOCK_FAULT_REPORT when set) so the
worst cases can be reported."""
# SPDX-License-Identifier: BSD-3-Clause

import os
import time

import harness as h
from harness import check, eq, holds, is_token, no_key, redlock_error, report, value
from faultproxy import FaultProxy

TIMEOUT_MS = 50          # the default per-node timeout, set explicitly
# Its time bounds are about this client and its nodes alone: run.py runs it
# by itself, after the other modules.
RUN_ALONE = True

PAUSE_TIMEOUT_MS = 250   # the client-pause test's timeout, below its pause
PAUSE_S = 0.3            # that test's pause of the client, longer than its timeout
PAUSES = 30              # how many pauses that test lasts
BOUND = 1.5              # seconds; ~30 per-node timeouts
WAIT_MS = 400            # wait_ms of the acquire that keeps retrying
SLOW_MS = 600            # reply delay of a "slow" node, far above TIMEOUT_MS

FAULTS = ("kill9", "sigstop", "pause_write", "slow", "blackhole")
PROXIED = ("slow", "blackhole")


class Rig:
    """n redis-server nodes, each behind a FaultProxy when proxied; the
    extension is configured with the addresses a client would use."""

    def __init__(self, n, proxied):
        self.cluster = h.Cluster(n)
        self.proxies = []
        try:
            if proxied:
                self.proxies = [FaultProxy(x.host, x.port) for x in self.cluster]
        except BaseException:
            self.close()
            raise
        self.faulted = {}

    @property
    def urls(self):
        if self.proxies:
            return [p.url for p in self.proxies]
        return [x.url for x in self.cluster]

    def addr(self, i):
        """host:port of node i as the extension knows it (for error texts)."""
        return self.urls[i][len("redis://"):]

    def fault(self, i, kind):
        node = self.cluster[i]
        if kind == "kill9":
            node.kill9()
        elif kind == "sigstop":
            node.stop()
        elif kind == "pause_write":
            node.cmd("CLIENT", "PAUSE", 10000, "WRITE")
        elif kind == "slow":
            self.proxies[i].delay_replies(SLOW_MS)
        elif kind == "blackhole":
            self.proxies[i].blackhole()
        else:
            raise ValueError(kind)
        self.faulted[i] = kind

    def heal(self, i):
        kind = self.faulted.pop(i)
        node = self.cluster[i]
        if kind == "kill9":
            node.restart()
        elif kind == "sigstop":
            node.cont()
        elif kind == "pause_write":
            node.cmd("CLIENT", "UNPAUSE")
        else:
            self.proxies[i].pass_()

    def heal_all(self):
        for i in list(self.faulted):
            self.heal(i)

    def close(self):
        for p in self.proxies:
            p.close()
        self.cluster.terminate()


def gone(nodes, key, what, timeout=2.0):
    """The key disappears from every given node soon: cleanups are sent
    without waiting for their replies, so poll."""
    h.wait_until(lambda: all(x.cmd("EXISTS", key) == 0 for x in nodes), timeout, what=what)


def timed(fn):
    t0 = time.monotonic()
    r = fn()
    return r, time.monotonic() - t0


def _bounded(n, kind):
    rig = Rig(n, kind in PROXIED)
    cfg = dict(timeout_ms=TIMEOUT_MS, retry_delay_ms=50, retry_jitter_ms=25)
    times = {}

    def note(op, secs, bound=BOUND):
        times[op] = secs
        check(secs < bound, "%s with %s on %d nodes took %.3fs (bound %.1fs)"
              % (op, kind, n, secs, bound))

    try:
        urls = rig.urls
        con = h.connect(urls, **cfg)
        minority = list(range((n - 1) // 2))
        majority = list(range(n // 2 + 1))
        healthy = [rig.cluster[i] for i in range(n) if i not in minority]

        # a lock taken before any fault, to extend and release under the majority fault
        held = is_token(value(con, "SELECT redlock_acquire('held', 30000)"), "acquire before faults")

        # ---- minority faulted: everything works, soon
        for i in minority:
            rig.fault(i, kind)
        for round_no in (1, 2):      # first call meets the fault, second knows of it
            tok, t = timed(lambda: value(con, "SELECT redlock_acquire('m', 10000)"))
            note("minority acquire #%d" % round_no, t)
            is_token(tok, "acquire with %d of %d nodes %s" % (len(minority), n, kind))
            holds(healthy, "m", tok, 10000, "healthy nodes")
            v, t = timed(lambda: value(con, "SELECT redlock_extend('m', 20000)"))
            note("minority extend #%d" % round_no, t)
            check(isinstance(v, int) and 0 < v <= 20000,
                  "extend with a minority %s returned %r" % (kind, v))
            r, t = timed(lambda: value(con, "SELECT redlock_release('m')"))
            note("minority release #%d" % round_no, t)
            eq(r, 1, "release with a minority %s" % kind)
            no_key(healthy, "m", "healthy nodes after release")

        # the releases at connection close, with the minority still faulted
        closing = h.connect(urls, **cfg)
        for j in range(3):
            is_token(value(closing, "SELECT redlock_acquire(?, 30000)", "close%d" % j))
        _, t = timed(closing.close)
        note("minority close(3 locks)", t)
        for j in range(3):
            no_key(healthy, "close%d" % j, "healthy nodes after the closing connection released")

        # ---- majority faulted: an error naming the failing nodes, soon
        for i in majority:
            if i not in rig.faulted:
                rig.fault(i, kind)
        failing = [rig.addr(i) for i in majority]
        alive = [rig.cluster[i] for i in range(n) if i not in majority]
        for round_no in (1, 2):
            t0 = time.monotonic()
            redlock_error(con, "SELECT redlock_acquire('M', 10000)", contains=failing,
                          what="acquire #%d with %d of %d nodes %s" % (round_no, len(majority), n, kind))
            note("majority acquire #%d" % round_no, time.monotonic() - t0)
            gone(alive, "M", "the key on reachable nodes to be cleaned up after a failed acquire")
        t0 = time.monotonic()
        redlock_error(con, "SELECT redlock_acquire('M', 10000, ?)", WAIT_MS, contains=failing,
                      what="acquire with wait_ms with a majority %s" % kind)
        note("majority acquire wait_ms=%d" % WAIT_MS, time.monotonic() - t0, WAIT_MS / 1000 + BOUND)
        gone(alive, "M", "the key on reachable nodes to be cleaned up after retried attempts")

        t0 = time.monotonic()
        try:
            r = value(con, "SELECT redlock_extend('held', 30000)")
        except Exception as e:      # an error or NULL: never a validity
            r = e
        note("majority extend", time.monotonic() - t0)
        check(not isinstance(r, int), "extend with a majority %s returned validity %r" % (kind, r))
        t0 = time.monotonic()
        redlock_error(con, "SELECT redlock_release('held', ?)", held,
                      what="release with a majority %s" % kind)
        note("majority release", time.monotonic() - t0)

        # the releases at close with a majority faulted: take the locks on
        # healed nodes first, then fault the majority and close
        closing = h.connect(urls, **cfg)
        rig.heal_all()
        h.wait_until(lambda: _can_lock(closing), 10, what="nodes to answer again after healing")
        for j in range(3):
            is_token(value(closing, "SELECT redlock_acquire(?, 30000)", "mclose%d" % j))
        for i in majority:
            rig.fault(i, kind)
        _, t = timed(closing.close)
        note("majority close(3 locks)", t)
        rig.heal_all()
    finally:
        rig.close()
    report("faults-timing n=%d %-11s " % (n, kind) +
           " ".join("%s=%.0fms" % (k.replace(" ", "_"), v * 1000) for k, v in times.items()))
    return times


def _can_lock(con):
    try:
        tok = value(con, "SELECT redlock_acquire('probe', 5000)")
    except Exception:
        return False
    if tok:
        value(con, "SELECT redlock_release('probe')")
    return bool(tok)


for _kind in FAULTS:
    for _n in (3, 5):
        h.register(globals(), "test_bounded_%s_%dn" % (_kind, _n), _bounded, _n, _kind)


def test_release_after_failed_attempt_is_bounded_3n():
    """A failed attempt (the lock held elsewhere on one node, one node hung)
    sends its cleanup without waiting on the hung node; the yes node's key
    is gone at once."""
    with h.Cluster(3) as c:
        con = h.connect(c, timeout_ms=TIMEOUT_MS)
        c[2].cmd("SET", "fa", "someone-else", "PX", 30000)
        c[0].stop()
        r, t = timed(lambda: value(con, "SELECT redlock_acquire('fa', 10000)"))
        check(t < BOUND, "failed attempt with a hung node took %.3fs" % t)
        eq(r, None, "acquire of a lock held elsewhere (one node hung)")
        # the yes node (c[1]) was cleaned up by the failed attempt
        h.wait_until(lambda: c[1].cmd("EXISTS", "fa") == 0, 2,
                     what="the failed attempt's key on the healthy node to be deleted")
        eq(c[2].get("fa"), "someone-else", "the other holder's key is untouched")
        report("faults-timing failed-attempt-with-hung-node n=3 %.0fms" % (t * 1000))


def _client_pauses_are_not_node_timeouts(count):
    """The client process itself is paused again and again (SIGSTOP for
    PAUSE_S, longer than timeout_ms: a GC pause, a loaded host) while it
    takes and gives back a lock on `count` healthy nodes (on one node, the
    connection waits inside recv, which a stop and continue interrupts;
    on five, inside ppoll). Replies that arrived
    while it was paused must be read, not taken for timeouts: no call may
    fail. timeout_ms is 250 here, not the default 50, so that a node slowed
    by a loaded host is not what fails a call: this test is about the
    client's pauses. Every other call is made on new connections, whose
    commands leave only once they are set up. A pause lands in a window that matters only now and then,
    so the test lasts PAUSES pauses."""
    import random
    import signal
    import threading
    with h.Cluster(count) as c:
        p = h.SqlProc(c, timeout_ms=PAUSE_TIMEOUT_MS)
        stop = threading.Event()
        pauses = [0]

        def pauser():
            while not stop.is_set():
                time.sleep(random.uniform(0.002, 0.01))
                os.kill(p.proc.pid, signal.SIGSTOP)
                time.sleep(PAUSE_S)
                os.kill(p.proc.pid, signal.SIGCONT)
                pauses[0] += 1
        t = threading.Thread(target=pauser, daemon=True)
        t.start()
        calls, errors = 0, []
        try:
            t0 = time.monotonic()
            while pauses[0] < PAUSES or time.monotonic() - t0 < 3.0:
                if calls % 2:
                    # every other call on new connections, whose first
                    # commands leave only once set up: a pause may come
                    # between two of them
                    p.execute("DELETE FROM redlock_nodes")
                    for n in c:
                        p.execute("INSERT INTO redlock_nodes(url) VALUES (?)", n.url)
                try:
                    eq(p.value("SELECT redlock_release('cp', redlock_acquire('cp', 10000))"), 1,
                       "acquire and release on healthy nodes")
                except Exception as e:
                    errors.append(str(e))
                calls += 1
        finally:
            stop.set()
            t.join()
            os.kill(p.proc.pid, signal.SIGCONT)
        report("faults-timing client paused %dms %d times on %d nodes: %d calls, %d failed"
               % (PAUSE_S * 1000, pauses[0], count, calls, len(errors)))
        check(not errors, "%d of %d calls failed while the client was paused now and then, "
              "e.g. %r" % (len(errors), calls, errors[:2]))


for _n in (1, 5):
    h.register(globals(), "test_client_pauses_are_not_node_timeouts_%dn" % _n, _client_pauses_are_not_node_timeouts, _n)


WHOLE_TIMEOUT_MS = 2000   # the next test's timeout_ms
LATE_REPLY_MS = 1870      # its reply delay: inside the last eighth of that timeout


def test_one_node_gets_its_whole_timeout_1n():
    """A connection waiting for one node alone waits inside recv, timed by
    SO_RCVTIMEO, which the kernel counts in coarse ticks, so that wait is set
    short of the deadline and the rest is polled. A reply late in
    timeout_ms (after that recv has given up) still counts; a node that
    never answers fails the call, and not before timeout_ms has passed."""
    with h.Cluster(1) as c, FaultProxy(c[0].host, c[0].port) as proxy:
        con = h.connect([proxy.url], timeout_ms=WHOLE_TIMEOUT_MS)
        eq(value(con, "SELECT redlock_release('whole', redlock_acquire('whole', 10000))"), 1, "a cycle, replies at once")
        proxy.delay_replies(LATE_REPLY_MS)
        tok, t = timed(lambda: value(con, "SELECT redlock_acquire('whole', 30000)"))
        is_token(tok, "acquire whose reply comes %d ms late, timeout_ms %d" % (LATE_REPLY_MS, WHOLE_TIMEOUT_MS))
        holds(c, "whole", tok, 30000, "the node")
        check(t >= LATE_REPLY_MS / 1000, "the acquire returned after %.3fs, before its reply could come" % t)
        eq(value(con, "SELECT redlock_release('whole')"), 1, "release whose reply comes late")
        proxy.blackhole()
        t0 = time.monotonic()
        redlock_error(con, "SELECT redlock_acquire('whole', 10000)",
                      contains=[proxy.url[len("redis://"):], "no answer within %d ms" % WHOLE_TIMEOUT_MS],
                      what="acquire on a node that never answers")
        t = time.monotonic() - t0
        check(WHOLE_TIMEOUT_MS / 1000 <= t < WHOLE_TIMEOUT_MS / 1000 + BOUND,
              "the node that never answers was given up after %.3fs (timeout_ms %d)" % (t, WHOLE_TIMEOUT_MS))
        report("faults-timing one node, reply %d ms late: acquired; silent: failed after %.0f ms"
               % (LATE_REPLY_MS, t * 1000))
