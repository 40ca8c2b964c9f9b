"""redlock_stats (per node) and redlock_lock_stats (per name): the counts
after known sequences of calls, a refusal, a timeout (SIGSTOP) and a kill."""
# SPDX-License-Identifier: BSD-3-Clause

import harness as h
from harness import check, eq, is_token, value

h.default_config(timeout_ms=h.RELAXED_TIMEOUT_MS, fencing=0)

COLS = ("calls", "yes", "no", "errors", "timeouts", "down")


def node_stats(con):
    cur = con.execute("SELECT * FROM redlock_stats ORDER BY id")
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


def counts(con):
    return [tuple(r[c] for c in COLS) for r in node_stats(con)]


def lock_stats(con, res):
    cur = con.execute("SELECT * FROM redlock_lock_stats WHERE resource = ?", (res,))
    names = [d[0] for d in cur.description]
    r = cur.fetchall()
    eq(len(r), 1, "rows for %r" % res)
    return dict(zip(names, r[0]))


def test_counts_after_acquire_refusal_release_3n():
    with h.Cluster(3) as cl:
        a, b = h.connect(cl), h.connect(cl)
        eq(counts(a), [(0, 0, 0, 0, 0, 0)] * 3, "nothing sent yet")
        eq(value(a, "SELECT count(*) FROM redlock_lock_stats"), 0, "no name used yet")
        is_token(value(a, "SELECT redlock_acquire('s1', 10000)"))
        eq(counts(a), [(1, 1, 0, 0, 0, 0)] * 3, "after one acquisition")
        eq(value(b, "SELECT redlock_acquire('s1', 10000)"), None, "held by a")
        eq(counts(b), [(1, 0, 1, 0, 0, 0)] * 3, "b after a refusal")
        eq(value(a, "SELECT redlock_release('s1')"), 1, "release")
        eq(counts(a), [(2, 2, 0, 0, 0, 0)] * 3, "after the release")
        for r in node_stats(a):
            check(r["p50_ms"] is not None and 0 <= r["p50_ms"] <= r["p99_ms"],
                  "latency percentiles of node %s: %r %r" % (r["id"], r["p50_ms"], r["p99_ms"]))
            eq(r["last_error"], None, "no error")
        la, lb = lock_stats(a, "s1"), lock_stats(b, "s1")
        eq((la["acquisitions"], la["refusals"], la["lost"]), (1, 0, 0), "a's counts for s1")
        eq((lb["acquisitions"], lb["refusals"], lb["lost"]), (0, 1, 0), "b's counts for s1")
        check(la["hold_max_ms"] >= 0 and la["wait_max_ms"] >= 0, "hold and wait recorded: %r" % la)
        # a wait that ends in a refusal counts its whole wait
        eq(value(a, "SELECT redlock_acquire('s2', 10000)") is not None, True, "a takes s2")
        eq(value(b, "SELECT redlock_acquire('s2', 10000, 300)"), None, "b waits 300 ms in vain")
        lb2 = lock_stats(b, "s2")
        check(lb2["wait_total_ms"] >= 300 and lb2["wait_max_ms"] >= 300, "b's wait on s2: %r" % lb2)


def test_timeout_through_sigstop_3n():
    with h.Cluster(3) as cl:
        con = h.connect(cl, timeout_ms=200)
        value(con, "SELECT redlock_ping()")
        cl[2].stop()
        try:
            is_token(value(con, "SELECT redlock_acquire('st', 10000)"), "two of three")
            h.settle(con)
            s = node_stats(con)[2]
            eq((s["timeouts"], s["down"], s["errors"]), (1, 1, 0), "the stopped node's timeouts, down, errors")
            check(s["last_error"] and "no answer" in s["last_error"], "last_error: %r" % s["last_error"])
            eq(node_stats(con)[0]["timeouts"], 0, "a live node had none")
        finally:
            cl[2].cont()


def test_latency_of_a_late_reply_after_a_timeout_change_3n():
    """A reply read after timeout_ms changed is timed from when its command
    was sent, not from its deadline less the new timeout: raising the
    timeout to ten minutes made a reply of a few seconds read as ten
    minutes in p99_ms."""
    with h.Cluster(3) as cl:
        con = h.connect(cl, timeout_ms=30000)
        value(con, "SELECT redlock_ping()")
        cl[2].stop()
        try:
            is_token(value(con, "SELECT redlock_acquire('lat', 10000)"), "decided by the two live nodes")
            value(con, "SELECT redlock_config('timeout_ms', 600000)")
        finally:
            cl[2].cont()
        h.settle(con)
        p99 = node_stats(con)[2]["p99_ms"]
        check(p99 is not None and p99 < 30 * 1000,
              "the stopped node's p99_ms: %r (its reply came within the 30 s timeout)" % p99)


def test_kill_counts_error_and_down_3n():
    with h.Cluster(3) as cl:
        con = h.connect(cl)
        is_token(value(con, "SELECT redlock_acquire('k', 10000)"))
        h.settle(con)  # every reply read: the connection is idle when the node dies
        cl[0].kill9()
        eq(value(con, "SELECT redlock_release('k')"), 1, "released on the two others")
        s = node_stats(con)[0]
        eq((s["down"], s["timeouts"]), (1, 0), "the killed node was marked down once, no timeout")
        check(s["errors"] >= 1, "the killed node's error counted: %r" % s)


def test_lost_lock_counted_1n():
    c = h.shared_cluster(1)
    con = h.connect(c)
    is_token(value(con, "SELECT redlock_acquire('lost1', 100)"))
    h.wait_until(lambda: value(con, "SELECT redlock_validity('lost1')") is None, what="validity ran out")
    eq(value(con, "SELECT redlock_release('lost1')"), 0, "release of an expired lock")
    eq(lock_stats(con, "lost1")["lost"], 1, "counted as lost")


def test_lock_stats_keep_a_bounded_size_of_names_1n():
    """redlock_lock_stats keeps at most 1 MiB of names (each may be 64 KiB,
    and each scan copies them): names past that are not counted, the ones
    kept stay exact."""
    with h.Cluster(1) as cl:
        con = h.connect(cl)
        names = ["%03d" % i + "n" * 60000 for i in range(30)]
        for name in names:
            is_token(value(con, "SELECT redlock_acquire(?, 10000)", name))
            eq(value(con, "SELECT redlock_release(?)", name), 1, "release")
        kept = con.execute("SELECT resource FROM redlock_lock_stats").fetchall()
        eq(len(kept), 1024 * 1024 // 60003, "names kept (60,003 bytes each, 1 MiB in all)")
        eq(sorted(r[0] for r in kept), names[:len(kept)], "the names kept are the first ones, whole")
