"""Fencing numbers: every acquisition gets a number, strictly greater
than every earlier holder's while a majority of nodes keeps its data. The
counter is key_prefix || resource || ':fence' on every node, incremented by
the acquire script; the acquisition takes the maximum over its quorum and
writes it back to the quorum nodes that lag. Tested across processes (sqlite3
shells one after another, python workers, a holder killed -9) with a
minority of nodes killed -9 and restarted empty between acquisitions. A
number is handed out only once it is stored on a quorum (a write-back cut
off used to let a later holder draw the same one), and the documented SQL
check refuses a write carrying an equal number.

Run: /usr/bin/python3 sql-tests/run.py test_fencing
 or: /usr/bin/python3 sql-tests/test_fencing.py   (prints the fence sequences)
"""
# SPDX-License-Identifier: BSD-3-Clause

import os
import sys
import tempfile
import threading

import harness as h
from faultproxy import FaultProxy
from harness import check, eq, holds, is_token, no_key, node_rows, report, value
from harness import (lock_row, note, probe, probed, run_directly as _run_directly, sh,
                     timeout_env as env)

WEEK_MS = 7 * 24 * 3600 * 1000


def _counters(nodes, key):
    """The fence counter on every node (None: no counter; '-' dead node)."""
    out = []
    for n in nodes:
        if not n.alive:
            out.append("-")
            continue
        v = n.get(key)
        out.append(None if v is None else int(v))
    return out


def _settled(nodes, key, want, timeout=1.0):
    """True once every live node's counter equals want (a node that answered
    after the quorum was reached may still be running the script)."""
    try:
        h.wait_until(lambda: all(x == want for x in _counters(nodes, key) if x != "-"), timeout,
                     what="counters")
        return True
    except AssertionError:
        return False


def _shell_fence(nodes, res="fz", ttl=5000, wait_ms=3000, release=True, what="shell"):
    """One sqlite3 shell process takes res with redlock_lock (.bail on),
    prints its fence, releases it; returns the fence."""
    out = sh(".bail on\n"
             "SELECT redlock_lock('%s', %d, %d) IS NOT NULL;\n"
             "SELECT fence, nodes, redlock_fence('%s') FROM redlock_locks;\n"
             % (res, ttl, wait_ms, res)
             + ("SELECT redlock_release('%s');\n" % res if release else ""), nodes, what)
    eq(len(out), 3 if release else 2, "%s: output %r" % (what, out))
    fence, _, fn = out[1].split("|")
    eq(fence, fn, "%s: redlock_locks.fence and redlock_fence()" % what)
    if release:
        eq(out[2], "1", "%s: release" % what)
    return int(fence)


# --------------------------------------------------------------------------
# basics
# --------------------------------------------------------------------------

def _fence_basics_python(n):
    c = h.shared_cluster(n)
    con = h.connect(env(c))
    eq((value(con, "SELECT redlock_config('fencing')"),
        value(con, "SELECT redlock_config('fence_ttl_ms')")), (1, WEEK_MS),
       "fencing and fence_ttl_ms by default")
    eq(value(con, "SELECT redlock_fence('fb')"), None, "fence of a name not held")
    is_token(value(con, "SELECT redlock_acquire('fb', 20000)"))
    f1 = value(con, "SELECT redlock_fence('fb')")
    eq(f1, 1, "first fence of a new name")
    eq(lock_row(con, "fb")["fence"], f1, "redlock_locks.fence")
    check(_settled(c, "fb:fence", 1), "counter fb:fence on the nodes: %r" % _counters(c, "fb:fence"))
    eq(value(con, "SELECT redlock_acquire('fb', 20000) IS NOT NULL"), 1, "re-acquire")
    eq(value(con, "SELECT redlock_fence('fb')"), f1, "fence after a reentrant acquisition")
    eq(_counters(c, "fb:fence"), [1] * n, "counters after a reentrant acquisition")
    eq(value(con, "SELECT redlock_release('fb', (SELECT token FROM redlock_locks))"), 1, "release")
    eq(value(con, "SELECT redlock_fence('fb')"), None, "fence after release")
    is_token(value(con, "SELECT redlock_acquire('fb', 20000)"))
    eq(value(con, "SELECT redlock_fence('fb')"), 2, "second acquisition")
    eq(value(con, "SELECT redlock_release('fb')"), 1, "release")
    other = h.SqlProc(env(c))
    is_token(other.value("SELECT redlock_acquire('fb', 20000)"))
    eq(other.value("SELECT redlock_fence('fb'), fence FROM redlock_locks"), 3,
       "another process's acquisition")
    eq(other.execute("SELECT fence FROM redlock_locks"), [(3,)], "its redlock_locks.fence")
    eq(other.value("SELECT redlock_release('fb')"), 1, "its release")
    # key_prefix: the counter is key_prefix || resource || ':fence', per name
    con.execute("SELECT redlock_config('key_prefix', 'app:')")
    is_token(value(con, "SELECT redlock_acquire('fb', 20000)"))
    eq(value(con, "SELECT redlock_fence('fb')"), 1, "first fence of app:fb")
    holds(c, "app:fb", lock_row(con, "fb")["token"], 20000, "the prefixed lock")
    check(_settled(c, "app:fb:fence", 1), "app:fb:fence: %r" % _counters(c, "app:fb:fence"))
    check(_settled(c, "fb:fence", 3), "fb:fence untouched by app:fb: %r" % _counters(c, "fb:fence"))
    # fencing off: a plain SET, no counter, no number
    con.execute("SELECT redlock_config('fencing', 0)")
    tok = is_token(value(con, "SELECT redlock_acquire('nf', 20000)"))
    eq((value(con, "SELECT redlock_fence('nf')"), lock_row(con, "nf")["fence"]), (None, None),
       "fence with fencing off")
    holds(c, "app:nf", tok, 20000, "lock taken with fencing off")
    no_key(c, "app:nf:fence", "fencing off")
    h.redlock_error(con, "SELECT redlock_config('fencing', 2)", what="fencing = 2")
    h.redlock_error(con, "SELECT redlock_config('fence_ttl_ms', -1)", what="fence_ttl_ms = -1")


h.for_nodes(globals(), _fence_basics_python, (1, 3, 5))


def test_fence_shell_processes():
    c = h.shared_cluster(3)
    seq = [_shell_fence(c, "fs", what="shell %d" % i) for i in range(4)]
    eq(seq, [1, 2, 3, 4], "fences of four sqlite3 shells one after another")
    with tempfile.TemporaryDirectory() as d:
        f = os.path.join(d, "p")
        out = sh("SELECT redlock_config('fencing'), redlock_config('fence_ttl_ms');\n"
                 "SELECT redlock_fence('fs');\n"
                 "SELECT redlock_acquire('fs', 20000) IS NOT NULL, redlock_fence('fs');\n"
                 + h.SHELL_SETTLE + probe(c, f, "GET", "fs:fence") +
                 "SELECT redlock_acquire('fs', 20000) IS NOT NULL, redlock_fence('fs');\n"
                 "SELECT redlock_release('fs'), redlock_fence('fs');\n"
                 "SELECT redlock_release('fs'), redlock_fence('fs');\n", c, "fence in one shell")
        eq(out, ["1|%d" % WEEK_MS, "NULL", "1|5", "1|5", "1|5", "1|NULL"], "shell output")
        eq(probed(f), ["5"] * 3, "fs:fence on every node, read from the shell")


# --------------------------------------------------------------------------
# the counter's expiry
# --------------------------------------------------------------------------

def _pttls(c, key):
    return [n.pttl(key) for n in c]


def test_fence_counter_expiry():
    c = h.shared_cluster(3)
    con = h.connect(env(c))

    def take(res, ttl=20000):
        is_token(value(con, "SELECT redlock_acquire(?, ?)", res, ttl))
        eq(value(con, "SELECT redlock_release(?)", res), 1, "release " + res)

    take("fx")
    h.wait_until(lambda: all(WEEK_MS - 60000 < p <= WEEK_MS for p in _pttls(c, "fx:fence")), 1,
                 what="fx:fence PTTL of 7 days on every node (%r)" % _pttls(c, "fx:fence"))
    # A shorter fence_ttl_ms (another client's, say) never shortens a counter's expiry.
    con.execute("SELECT redlock_config('fence_ttl_ms', 100000)")
    take("fx")
    h.settle(con)
    check(all(WEEK_MS - 60000 < p <= WEEK_MS for p in _pttls(c, "fx:fence")),
          "fx:fence keeps its 7 days after an acquisition with fence_ttl_ms 100 s (%r)" % _pttls(c, "fx:fence"))
    take("fw")
    h.wait_until(lambda: all(90000 < p <= 100000 for p in _pttls(c, "fw:fence")), 1,
                 what="fw:fence with 100 s (%r)" % _pttls(c, "fw:fence"))
    con.execute("SELECT redlock_config('fence_ttl_ms', 200000)")
    take("fw")
    h.wait_until(lambda: all(190000 < p <= 200000 for p in _pttls(c, "fw:fence")), 1,
                 what="fw:fence lengthened to 200 s (%r)" % _pttls(c, "fw:fence"))
    con.execute("SELECT redlock_config('fence_ttl_ms', 1)")
    take("fy", 30000)
    h.wait_until(lambda: all(20000 < p <= 30000 for p in _pttls(c, "fy:fence")), 1,
                 what="fy:fence at least the lock TTL of 30 s (%r)" % _pttls(c, "fy:fence"))
    con.execute("SELECT redlock_config('fence_ttl_ms', 0)")
    take("fz")
    h.wait_until(lambda: _pttls(c, "fz:fence") == [-1] * 3, 1,
                 what="fz:fence without expiry with fence_ttl_ms 0 (%r)" % _pttls(c, "fz:fence"))
    eq(_counters(c, "fz:fence"), [1] * 3, "fz:fence")


def test_fence_ttl_zero_removes_an_earlier_expiry():
    """fence_ttl_ms 0 means the counter never expires: an acquisition made
    with it must leave no expiry, also on a counter that had one."""
    c = h.shared_cluster(3)
    con = h.connect(env(c))
    value(con, "SELECT redlock_acquire('fp', 20000)")
    value(con, "SELECT redlock_release('fp')")
    h.settle(con)  # both calls returned at a quorum: the last node's script may still be on its way
    check(all(p > 0 for p in _pttls(c, "fp:fence")), "default expiry: %r" % _pttls(c, "fp:fence"))
    con.execute("SELECT redlock_config('fence_ttl_ms', 0)")
    value(con, "SELECT redlock_acquire('fp', 20000)")
    h.wait_until(lambda: _counters(c, "fp:fence") == [2] * 3, 1, what="counters at 2")
    eq(_pttls(c, "fp:fence"), [-1] * 3,
       "PTTL of fp:fence after an acquisition with fence_ttl_ms 0 (it had the 7-day expiry)")


def test_fence_counter_expiry_shell():
    c = h.shared_cluster(3)
    with tempfile.TemporaryDirectory() as d:
        f1, f2 = os.path.join(d, "p1"), os.path.join(d, "p2")
        out = sh("SELECT redlock_config('fence_ttl_ms', 100000);\n"
                 "SELECT redlock_lock('se', 5000) IS NOT NULL, redlock_fence('se');\n"
                 + h.SHELL_SETTLE + probe(c, f1, "PTTL", "se:fence") +
                 "SELECT redlock_config('fence_ttl_ms', 0);\n"
                 "SELECT redlock_lock('sz', 5000) IS NOT NULL, redlock_fence('sz');\n"
                 "SELECT redlock_release_all();\n"
                 + h.SHELL_SETTLE + probe(c, f2, "PTTL", "sz:fence"), c, "counter expiry in the shell")
        eq(out, ["100000", "1|1", "0", "1|1", "2"], "shell output")
        check(all(90000 < int(p) <= 100000 for p in probed(f1)), "se:fence PTTL %r" % probed(f1))
        eq(probed(f2), ["-1"] * 3, "sz:fence PTTL")


def test_fence_counter_outlives_an_extended_lock():
    """The counter lives at least the lock's TTL; an auto-extended lock lives
    longer than its TTL, and the next holder must still get a greater number."""
    c = h.shared_cluster(3)
    con = h.connect(env(c), fence_ttl_ms=1, auto_extend=1)
    value(con, "SELECT redlock_acquire('fo', 300)")
    f1 = value(con, "SELECT redlock_fence('fo')")
    h.wait_until(lambda: lock_row(con, "fo")["extensions"] >= 7, 5,
                 what="the lock to live past twice its TTL")
    eq(lock_row(con, "fo")["state"], "held", "the extended lock")
    eq(value(con, "SELECT redlock_release('fo')"), 1, "release")
    f2 = _shell_fence(c, "fo", what="next holder")
    check(f2 > f1, "the next holder's fence %d is not greater than %d (counters now %r; the "
          "counter expired while the lock was still held)" % (f2, f1, _counters(c, "fo:fence")))


def test_extend_with_fencing_off_still_stretches_the_counter():
    """A fleet in the middle of a settings change: the lock was taken with
    fencing on, and is extended (by token, or by the keeper) from a
    connection with fencing off. The extend must still make the counter
    and the floor live as long as the lock, or the counter expires under
    the lock and the next holder's number starts again at 1."""
    c = h.shared_cluster(3)
    a = h.connect(env(c), fence_ttl_ms=1)
    b = h.connect(env(c), fencing=0)
    k = h.connect(env(c), fencing=1, fence_ttl_ms=1, auto_extend=1)
    for con, how in ((b, "by token from a fencing-off connection"), (k, "by its keeper, fencing turned off")):
        tok = is_token(value(a if con is b else k, "SELECT redlock_acquire('fx', 1000)"), "the lock " + how)
        if con is b:
            check(value(b, "SELECT redlock_extend('fx', 60000, ?)", tok) > 0, "extend " + how)
        else:
            value(k, "SELECT redlock_config('fencing', 0)")
            before = lock_row(k, "fx")["extensions"]
            h.wait_until(lambda: lock_row(k, "fx")["extensions"] > before, 30, what="a keeper extension")
        h.settle(a, b, k)
        locks, counters = _pttls(c, "fx"), _pttls(c, "fx:fence")
        check(all(f >= l - 100 for l, f in zip(locks, counters)),
              "extended %s: the counter should live as long as the lock (PTTLs of the lock %r, of the counter %r)"
              % (how, locks, counters))
        eq(value(a if con is b else k, "SELECT redlock_release('fx', ?)", tok), 1, "release")


def test_extend_leaves_a_long_digit_string_under_the_counters_name_alone():
    """A key x:fence whose value is digits only but longer than any fencing
    number (16 digits at most) is not x's counter: another program's lock,
    say, whose token happens to be all digits. An extend of x stretches its
    counter, and must not stretch that key instead."""
    c = h.shared_cluster(3)
    con = h.connect(env(c), fencing=0)
    # 32 digits; and 16 digits, but above 2^53 - 1, which no fencing number reaches
    for foreign in ("12345678901234567890123456789012", "9999999999999999"):
        for n in c:
            n.cmd("SET", "lx:fence", foreign, "PX", "5000")
        tok = is_token(value(con, "SELECT redlock_acquire('lx', 10000)"), "the lock")
        check(value(con, "SELECT redlock_extend('lx', 60000)") > 0, "the extend")
        h.settle(con)
        pttls = _pttls(c, "lx:fence")
        check(all(0 < p <= 5000 for p in pttls),
              "the other key (%s) keeps its own expiry (PTTLs %r, set to 5000)" % (foreign, pttls))
        eq([n.cmd("GET", "lx:fence") for n in c], [foreign] * 3, "the other key's value")
        eq(value(con, "SELECT redlock_release('lx', ?)", tok), 1, "release")
        for n in c:
            n.cmd("DEL", "lx:fence")


# --------------------------------------------------------------------------
# write-back and restarts
# --------------------------------------------------------------------------

def test_fence_writeback_to_a_lagging_quorum_node():
    """Deterministic: node B's replies are slowed so the quorum is A and the
    restarted (empty) C; C must be raised to the quorum's maximum, so that
    after A is restarted too, A+C still give a greater number."""
    with h.Cluster(3) as c:
        a, b, cc = c
        with FaultProxy("127.0.0.1", b.port) as pb:
            env = ",".join([a.url, pb.url, cc.url])
            seq = []

            def take(what):
                out = sh(".bail on\nSELECT redlock_config('timeout_ms', 2000);\n"
                         "SELECT redlock_lock('fw', 5000, 3000) IS NOT NULL;\n"
                         "SELECT fence, nodes FROM redlock_locks;\n"
                         "SELECT redlock_release('fw');\n", env, what)
                eq((out[0], out[1], out[3]), ("2000", "1", "1"), what + ": output %r" % out)
                fence, nodes = map(int, out[2].split("|"))
                seq.append(fence)
                return fence, nodes

            take("first")
            take("second")
            eq(seq, [1, 2], "first fences")
            h.wait_until(lambda: _counters(c, "fw:fence") == [2, 2, 2], 1, what="counters at 2")
            cc.kill9()
            cc.restart()
            pb.delay_replies(300)
            f, nodes = take("C restarted, B slow")
            eq((f, nodes), (3, 2), "fence and yes votes with A and the empty C as the quorum")
            eq(cc.get("fw:fence"), "3", "C's counter after the acquisition (written back from 1)")
            h.wait_until(lambda: b.get("fw:fence") == "3" and b.cmd("EXISTS", "fw") == 0, 3,
                         what="slow B to run its late script and the release")
            a.kill9()
            a.restart()
            f, nodes = take("A restarted, B slow")
            eq((f, nodes), (4, 2), "fence from the empty A and the written-back C")
            pb.pass_()
            f, _ = take("all back")
            note("write-back with B slowed: fences %s; counters A,B,C now %r"
                 % (seq, _counters(c, "fw:fence")))
            eq(seq, [1, 2, 3, 4, 5], "fence sequence")


def _fence_of(con, res):
    return value(con, "SELECT redlock_fence(?)", res)


def test_fence_number_only_once_stored_on_a_quorum_3n():
    """Hole 4: A's counter is ahead. The first acquisition is decided by A and
    X; X's counter lags, and X's connection is reset right after X answered,
    so the write-back that raises X's counter never arrives. A later holder
    on B and X (overlapping the first only on X) then drew the same number.
    A number may only be handed out once it is stored on a quorum."""
    with h.Cluster(3) as c:
        a, b, x = c.nodes
        p = FaultProxy(x.host, x.port)
        try:
            a.cmd("SET", "fx:fence", 5)
            b.cmd("SET", "fx:fence", 5)
            x.cmd("SET", "fx:fence", 4)
            cfg = dict(timeout_ms=3000, reconnect_min_ms=20, reconnect_max_ms=50)
            con1 = h.connect([a.url, b.url, p.url], **cfg)
            h.attempt(con1, "SELECT redlock_release('warm', redlock_acquire('warm', 1000))")
            #                                             X's connection is open
            node_rows(con1)                               # and owes no reply any more
            b.cmd("SET", "fx", "someone-else", "PX", 60000)
            p.delay_requests(300)                         # X's write-back waits in the proxy...
            base = p.stats()["bytes_to_client"]
            res = {}
            th = threading.Thread(target=lambda: res.update(
                r=h.attempt(con1, "SELECT redlock_acquire('fx', 30000)")), daemon=True)
            th.start()
            # ...and is cut off with the connection as soon as X's answer is through
            h.wait_until(lambda: p.stats()["bytes_to_client"] > base, 10, interval=0.001,
                         what="X's answer to the acquire")
            p.reset()
            th.join(20)
            check(not th.is_alive(), "the first acquire did not return")
            p.pass_()
            eq(x.get("fx:fence"), "5", "X's counter after the cut (the write-back was lost)")
            handed = []
            first = res["r"]
            if isinstance(first, str):
                handed.append(("first", _fence_of(con1, "fx")))
            else:
                check(isinstance(first, Exception) and str(first).startswith("redlock: "),
                      "the first acquire: expected a token or a redlock error, got %r" % (first,))
            # the first lock is over (expired, say); the next holder gets B and X
            for n in c:
                n.cmd("DEL", "fx")
            a.cmd("SET", "fx", "someone-else", "PX", 60000)
            con2 = h.connect([a.url, b.url, p.url], **cfg)
            is_token(value(con2, "SELECT redlock_acquire('fx', 30000)"), "the second acquire")
            handed.append(("second", _fence_of(con2, "fx")))
            nums = [f for _, f in handed]
            check(all(u < v for u, v in zip(nums, nums[1:])),
                  "fencing numbers handed out, in order: %r (counters now %r)"
                  % (handed, [n.get("fx:fence") for n in c]))
            report("review hole 4: write-back cut: first acquire gave %r; numbers handed out %r"
                   % (first if isinstance(first, str) else str(first)[:120], handed))
        finally:
            p.close()


def test_fence_check_in_sql_rejects_an_equal_number():
    """Hole 4, the documented SQL pattern: a write that carries the number
    the resource has seen already is refused, not only an older one."""
    import sqlite3
    db = sqlite3.connect(":memory:", isolation_level=None)
    db.executescript("""
        CREATE TABLE fences(name TEXT PRIMARY KEY, last_fence INTEGER NOT NULL);
        INSERT INTO fences VALUES ('nightly-report', 0);
        CREATE TABLE results(day TEXT, total INTEGER);
        CREATE TABLE batch(day TEXT, total INTEGER);
        INSERT INTO batch VALUES ('2025-03-01', 7);
        CREATE TEMP TABLE me(token TEXT, fence INTEGER, claimed INTEGER);
    """)

    def write(fence):
        db.execute("DELETE FROM me")
        db.execute("INSERT INTO me VALUES ('t', ?, 0)", (fence,))
        # the pattern of README "Safety limits", statement by statement
        db.executescript("""
            BEGIN IMMEDIATE;
            UPDATE fences SET last_fence = (SELECT fence FROM me)
             WHERE name = 'nightly-report' AND last_fence < (SELECT fence FROM me);
            UPDATE me SET claimed = changes();
            INSERT INTO results(day, total)
            SELECT day, total FROM batch WHERE (SELECT claimed FROM me) = 1;
            COMMIT;
        """)
        return value(db, "SELECT count(*) FROM results")

    eq(write(6), 1, "a first writer with number 6")
    eq(write(6), 1, "a second writer with the same number 6 (must write nothing)")
    eq(write(5), 1, "an older number")
    eq(write(7), 2, "a newer number")


def _crashed_holder(nodes, res, ttl):
    """A python process takes res and is killed -9 holding it; returns its fence."""
    p = h.SqlProc(env(nodes))
    is_token(p.value("SELECT redlock_acquire(?, ?)", res, ttl), "crashing holder")
    f = p.value("SELECT redlock_fence(?)", res)
    p.kill()
    return f


def _fence_sequence_with_restarts(n):
    """sqlite3 shells take the lock one after another while a minority of
    nodes is killed -9 and restarted empty; one holder is a process killed -9
    with the lock (the next shell waits for its TTL). Before each kill every
    live node has caught up with the last number (the write-back reaches a
    restarted node once its vote is in a quorum), so a majority always has it."""
    with h.Cluster(n) as c:
        minority = n - c.quorum
        groups = [[i % n for i in range(g * minority, (g + 1) * minority)]
                  for g in range((n + minority - 1) // minority)]
        seq, log = [], []

        def step(label):
            f = _shell_fence(c, "fz", what="shell after %s" % label)
            seq.append(f)
            log.append("%d(catch-up)" % f if label == "catch-up" else "%d" % f)
            check(len(seq) < 2 or seq[-1] > seq[-2], "fence sequence not increasing: %s" % " ".join(log))

        def catch_up():
            for _ in range(20):
                if _settled(c, "fz:fence", seq[-1], 0.3):
                    return
                step("catch-up")
            raise AssertionError("restarted nodes never caught up: counters %r, fences %s"
                                 % (_counters(c, "fz:fence"), " ".join(log)))

        step("start")
        step("start")
        for gi, group in enumerate(groups):
            catch_up()
            names = ",".join("n%d" % i for i in group)
            for i in group:
                c[i].kill9()
            log.append("[kill -9 %s]" % names)
            step("kill")
            if gi == 0:
                f = _crashed_holder(c, "fz", 400)
                seq.append(f)
                log.append("%d(holder killed -9)" % f)
                check(seq[-1] > seq[-2], "crashed holder's fence: %s" % " ".join(log))
                step("the crashed holder's TTL")
            for i in group:
                c[i].restart()
            log.append("[restart %s]" % names)
            step("restart")
        catch_up()
        note("fence sequence, %d nodes, one shell per number: %s" % (n, " ".join(log)))
        eq(seq, sorted(set(seq)), "strictly increasing")
        check(len(seq) >= 4 + 2 * len(groups), "sequence too short: %s" % " ".join(log))


h.for_nodes(globals(), _fence_sequence_with_restarts, (3, 5))


if __name__ == "__main__":
    sys.exit(_run_directly(globals()))
