"""Regression tests for the holes an adversarial review found:
the restart guard judged a node only when its connection opened; a node
listed twice could vote before it was known to be the same server; a
fencing number could be handed out that was stored on one node only; and
two smaller ones in sessions (an outer hold of a lock that expired and was
taken anew; a user's extend racing the auto-extension thread).

Each test rebuilds the reviewer's scenario on real redis-server processes,
with the fault proxy where a fault must hit at a chosen moment, and asserts
what a user would check: no two holders, no repeated fencing number, the
documented return value."""
# SPDX-License-Identifier: BSD-3-Clause

import threading
import time

import harness as h
from faultproxy import FaultProxy
from harness import check, eq, is_token, node_rows, report, value

LONG_TTL = 60000      # ms: the lock the first holder keeps during the restart
SHORT_TTL = 1000      # ms: what the guarded connection used before asking for LONG_TTL
ROUNDS = 1000         # user extends racing the keeper (the old engine failed in about 1 of 200)


def _uptime(node):
    for line in node.cmd("INFO", "server").splitlines():
        if line.startswith("uptime_in_seconds:"):
            return int(line.split(":")[1])
    raise AssertionError("no uptime in INFO")


def _row(con, port):
    for r in node_rows(con):
        if r["port"] == port:
            return r
    raise AssertionError("no redlock_nodes row for port %d" % port)


def _attempt(con, sql, *params):
    """The value of sql, or the exception it raised."""
    try:
        return value(con, sql, *params)
    except Exception as e:     # an error is an answer here: no lock
        return e


def _warm(con, res="warm"):
    """One short call: every node gets (or keeps) a connection and its INFO is read."""
    _attempt(con, "SELECT redlock_release(?, redlock_acquire(?, ?))", res, res, SHORT_TTL)


def _restart_scenario(c):
    """Nodes n1, n2, n3. Holder A takes 'rl' for LONG_TTL while n3 is down for
    it (a refusing proxy stands in for n3), so the lock is on n1 and n2. Then
    n2 is killed and restarted without persistence: it forgot the lock.
    Returns (A, the lock's token, the proxy)."""
    n1, n2, n3 = c.nodes
    h.wait_until(lambda: all(_uptime(x) >= SHORT_TTL // 1000 + 2 for x in c), 6, interval=0.1,
                 what="nodes older than the short TTL")
    p3 = FaultProxy(n3.host, n3.port)
    p3.refuse()
    a = h.connect([n1.url, n2.url, p3.url])
    tok = is_token(value(a, "SELECT redlock_acquire('rl', ?)", LONG_TTL), "holder A's acquire")
    eq([n1.get("rl"), n2.get("rl"), n3.get("rl")], [tok, tok, None], "A's lock on the nodes")
    return a, tok, p3


def _restart_n2(c):
    n2 = c.nodes[1]
    n2.kill9()
    n2.restart()
    eq(n2.get("rl"), None, "n2 after its restart without persistence")


def _second_holder_refused(c, b, tok, what):
    """b (restart guard on) asks for 'rl' with LONG_TTL: n1 says no (A's key),
    n3 says yes, and n2 (restarted seconds ago, empty) must not count."""
    n1, n2, n3 = c.nodes
    r = _attempt(b, "SELECT redlock_acquire('rl', ?)", LONG_TTL)
    vals = [n1.get("rl"), n2.get("rl"), n3.get("rl")]
    check(not isinstance(r, str),
          "%s: a second holder got the lock A holds (token %r, validity %r ms, values on the "
          "nodes %r, A's token %s); n2 restarted %d s ago" %
          (what, r, value(b, "SELECT redlock_validity('rl')"), vals, tok, _uptime(n2)))
    eq(n1.get("rl"), tok, "%s: A's key on n1" % what)
    return r


def test_restart_guard_judges_every_call_by_its_ttl_3n():
    """Hole 1: a guarded connection used a short TTL, so a node it reconnected
    to after a restart was held back only for that short TTL; then, on the
    same open connection, a long-TTL acquire let that node (restarted two
    seconds before, empty) vote yes next to the node A could not reach: two
    holders. The guard must judge each call by its own TTL."""
    with h.Cluster(3) as c:
        n2 = c.nodes[1]
        b = h.connect(c, restart_guard=1, reconnect_min_ms=20, reconnect_max_ms=50)
        _warm(b)
        a, tok, p3 = _restart_scenario(c)
        try:
            _restart_n2(c)
            t_restart = time.monotonic()
            # b reconnects to n2 with short calls, and waits until n2 counts for them
            h.wait_until(lambda: (_warm(b), _row(b, n2.port)["state"])[1] == "up", 10,
                         interval=0.05, what="n2 to count again for b's short calls")
            r = _second_holder_refused(c, b, tok, "guard on, short TTL first")
            row = _row(b, n2.port)
            eq(row["state"], "restarting", "n2's state for b after the long-TTL call")
            report("review hole 1: %.1f s after n2's restart, b's %d ms acquire gave %r; n2 %s"
                   % (time.monotonic() - t_restart, LONG_TTL, r, row["state"]))
        finally:
            p3.close()


def test_restart_guard_turned_on_after_connecting_3n():
    """Hole 1, second half: a connection that read the restarted node's INFO
    with the guard off, then turned the guard on, still let it vote yes."""
    with h.Cluster(3) as c:
        a, tok, p3 = _restart_scenario(c)
        try:
            _restart_n2(c)
            b = h.connect(c)
            _warm(b)
            eq(_row(b, c.nodes[1].port)["state"], "up", "n2 for b before the guard")
            eq(value(b, "SELECT redlock_config('restart_guard', 1)"), 1, "turning the guard on")
            r = _second_holder_refused(c, b, tok, "guard turned on after connecting")
            report("review hole 1b: guard turned on after connecting: acquire gave %r" % (r,))
        finally:
            p3.close()


def test_duplicate_never_votes_before_it_is_known_3n():
    """Hole 3: the same server listed twice (db 0 and db 1) with the third
    node dead. One real server can never be a majority of three, so every
    acquire must fail, on every fresh connection, whichever row's INFO comes
    first. Half the connections reach db 0 through a proxy that delays its
    replies by a few ms, so the higher-id row always answers first."""
    s = h.RedisNode()
    p = FaultProxy(s.host, s.port)
    dead = "redis://127.0.0.1:%d" % h.free_port()
    got = []
    try:
        for i in range(200):
            delayed = i % 2 == 0
            if delayed:
                p.delay_replies(3)
            first = p.url if delayed else s.url
            con = h.connect([first, "%s/1" % s.url, dead], timeout_ms=1000)
            r = _attempt(con, "SELECT redlock_acquire('dup', 10000)")
            if isinstance(r, str):
                got.append((i, "delayed" if delayed else "direct",
                            [x["state"] for x in node_rows(con)]))
            con.close()
            s.cmd("FLUSHALL")
        check(not got, "acquired on one server listed twice in %d of 200 fresh connections: %r"
              % (len(got), got[:5]))
        report("review hole 3: 200 fresh connections, one server listed twice: 0 acquisitions")
    finally:
        p.close()
        s.terminate()


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
            _warm(con1)                                   # X's connection is open
            node_rows(con1)                               # and owes no reply any more
            b.cmd("SET", "fx", "someone-else", "PX", 60000)
            p.delay_requests(300)                         # X's write-back waits in the proxy...
            base = p.stats()["bytes_to_client"]
            res = {}
            th = threading.Thread(target=lambda: res.update(
                r=_attempt(con1, "SELECT redlock_acquire('fx', 30000)")), daemon=True)
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


def test_outer_release_after_lock_was_retaken_says_lost():
    """Hole 5: an outer hold's lock expired; an inner acquire took it anew
    (one hold) and its release deleted the key; the outer release then
    returned NULL ("holds none") instead of 0 ("lost"). The same when the
    lock expired under two holds of it."""
    c = h.shared_cluster(3)
    con = h.connect(c)
    tok = is_token(value(con, "SELECT redlock_acquire('nest', 200)"), "outer acquire")
    h.wait_until(lambda: value(con, "SELECT redlock_validity('nest')") == 0, 5,
                 what="the outer hold's validity to run out")
    tok2 = is_token(value(con, "SELECT redlock_acquire('nest', 5000)"), "inner acquire, taken anew")
    check(tok2 != tok, "the inner acquire took the lock anew")
    eq(value(con, "SELECT redlock_release('nest')"), 1, "inner release (its own lock)")
    eq(value(con, "SELECT redlock_release('nest')"), 0, "outer release after its lock expired")
    eq(value(con, "SELECT redlock_release('nest')"), None, "a third release: no hold left")
    # two holds, then the lock expires under both
    is_token(value(con, "SELECT redlock_acquire('nest2', 200)"), "outer acquire")
    is_token(value(con, "SELECT redlock_acquire('nest2', 200)"), "inner acquire")
    h.wait_until(lambda: value(con, "SELECT redlock_validity('nest2')") == 0, 5,
                 what="the validity to run out")
    eq(value(con, "SELECT redlock_release('nest2')"), 0, "inner release after expiry")
    eq(value(con, "SELECT redlock_release('nest2')"), 0, "outer release after expiry")
    eq(value(con, "SELECT redlock_release('nest2')"), None, "no hold left")


def test_user_extend_racing_keeper_never_overstates_validity():
    """Hole 5: a user's redlock_extend racing the auto-extension thread could
    leave the connection reporting the validity of the extend whose PEXPIRE
    reached the node first (whichever of the two wrote its result last won).
    With a 30 ms TTL the keeper extends every 10 ms, so the user's 3000 ms
    extend keeps meeting one of its 30 ms extensions. Whatever the
    interleaving, what the connection reports must not outlive the key: the
    reported validity is at most the key's remaining life on the node (PTTL,
    read afterwards; 1 s of slack for the reads themselves)."""
    c = h.shared_cluster(1)
    node = c.nodes[0]
    con = h.connect(c, auto_extend=1)
    is_token(value(con, "SELECT redlock_acquire('race', 3000)"), "acquire")
    bad, met = [], 0
    for i in range(ROUNDS):
        value(con, "SELECT redlock_extend('race', 30)")     # the keeper now extends every 10 ms
        time.sleep(0.001 * (i % 11))
        before = lock_extensions(con)
        v = value(con, "SELECT redlock_extend('race', 3000)")
        reported = value(con, "SELECT redlock_validity('race')")
        pttl = node.pttl("race")
        met += lock_extensions(con) - before > 1
        if v is not None and reported > max(pttl, 0) + 1000:
            bad.append((i, v, reported, pttl))
        if v is None:
            is_token(value(con, "SELECT redlock_acquire('race', 3000)"), "acquire again")
    check(not bad, "the connection reported more validity than the key had (iteration, "
          "extend's result, redlock_validity, PTTL): %r" % bad[:5])
    report("review hole 5b: %d user extends racing the keeper (%d met a keeper extension): "
           "reported validity never above the key's PTTL" % (ROUNDS, met))


def lock_extensions(con):
    return value(con, "SELECT coalesce(sum(extensions), 0) FROM redlock_locks WHERE resource = 'race'")


def test_unanswered_extend_counts_as_possibly_run_3n():
    """An extend whose answers come too late may still have run on every
    node. It never shortens the keys there (an extend only lengthens), and
    the connection counts the lock by no more than the shorter TTL it
    asked for, which is sure either way."""
    with h.Cluster(3) as c:
        ps = [FaultProxy(n.host, n.port) for n in c]
        try:
            a = h.connect([p.url for p in ps], timeout_ms=200, reconnect_min_ms=20, reconnect_max_ms=40)
            b = h.connect(c)
            tok = is_token(value(a, "SELECT redlock_acquire('x', 60000)"), "a takes x for a minute")
            for p in ps:
                p.delay_replies(600)                # every answer comes after the 200 ms timeout
            h.redlock_error(a, "SELECT redlock_extend('x', 1000)", contains=("nodes failed",))
            for p in ps:
                p.delay_replies(0)
            left = value(a, "SELECT redlock_validity('x')")
            check(left is None or left <= 1000,
                  "a's validity after an unanswered extend to 1000 ms: %r ms (the keys were cut to 1 s)" % left)
            h.settle(a)
            pttls = [n.pttl("x") for n in c]
            check(all(p > 50000 for p in pttls), "the late extend to 1 s cut the minute back: PTTLs %r" % pttls)
            eq(value(b, "SELECT redlock_acquire('x', 60000)"), None, "b is kept out while the keys last")
        finally:
            for p in ps:
                p.close()


def test_unanswered_keeper_extend_counts_as_possibly_run_3n():
    """The same for the auto-extension: its extend, gathered with the TTL
    of before while the owner's longer extend was on its way, runs after
    that one on every node, and must not cut the keys back; the
    connection counts no more than the keys have."""
    # Margins wide enough for a build under the sanitizers: the owner's
    # extend answers 2.8 s inside its timeout, the keeper's 1 s after it.
    with h.Cluster(3) as c:
        ps = [FaultProxy(n.host, n.port) for n in c]
        try:
            a = h.connect([p.url for p in ps], timeout_ms=3500, auto_extend=1, reconnect_min_ms=5000,
                          reconnect_max_ms=5000)
            t0 = time.monotonic()
            is_token(value(a, "SELECT redlock_acquire('k', 9000)"), "a takes k for 9 s")
            time.sleep(max(0.0, t0 + 2.4 - time.monotonic()))  # the keeper is due at 3 s
            for p in ps:
                p.delay_replies(700)                # the owner's extend answers in time, at 3.1 s
            got = value(a, "SELECT redlock_extend('k', 60000)")
            # (it says no more than the keeper's extend, gathered meanwhile, leaves sure)
            check(got is not None and got > 0, "the owner's extend to a minute: %r" % got)
            for p in ps:
                p.delay_replies(4500)               # the keeper's, sent next, answers too late
            h.wait_until(lambda: value(a, "SELECT count(*) FROM redlock_nodes WHERE state = 'down'") == 3,
                         15, what="the keeper's extend times out on every node")
            pttls = [n.pttl("k") for n in c]
            check(min(pttls) > 50000, "the keeper's late extend to 9 s cut the owner's minute (PTTLs %r)" % pttls)
            left = value(a, "SELECT redlock_validity('k')")
            check(left is None or left <= max(pttls), "a counts %r ms left where the keys have %r" % (left, pttls))
        finally:
            for p in ps:
                p.close()


def test_extend_that_never_went_out_changes_nothing_3n():
    """An extend refused before it reached any node (every node known down,
    so nothing was sent) cannot have run: the lock keeps its validity."""
    with h.Cluster(3) as c:
        a = h.connect(c, timeout_ms=200, reconnect_max_ms=60000, reconnect_min_ms=60000)
        is_token(value(a, "SELECT redlock_acquire('y', 60000)"), "a takes y for a minute")
        for n in c:
            n.stop()
        try:
            h.redlock_error(a, "SELECT redlock_extend('y', 60000)", contains=("nodes failed",))
            h.redlock_error(a, "SELECT redlock_extend('y', 1000)", contains=("nodes failed",))
            left = value(a, "SELECT redlock_validity('y')")
            check(left is not None and left > 50000,
                  "y's validity after an extend that went to no node: %r ms (the keys keep a minute)" % left)
        finally:
            for n in c:
                n.cont()
        h.settle(a)
        check(all(n.pttl("y") > 50000 for n in c), "the keys: %r" % [n.pttl("y") for n in c])


def test_auto_extension_comes_before_the_cap_of_an_unanswered_extend_3n():
    """After an unanswered redlock_extend to 3 s (which ran: the keys were
    cut), the auto-extension must renew the lock before those 3 s are up,
    with the lock's own TTL, once the nodes answer again; it used to wait
    for its usual time (a third of 30 s), and the lock was lost though
    every node was back."""
    with h.Cluster(3) as c:
        a = h.connect(c, timeout_ms=200, auto_extend=1, reconnect_min_ms=20, reconnect_max_ms=40)
        is_token(value(a, "SELECT redlock_acquire('x', 30000)"), "a takes x for 30 s, auto-extended")
        for n in c[1:]:
            n.stop()
        try:
            h.redlock_error(a, "SELECT redlock_extend('x', 3000)", contains=("nodes failed",))
        finally:
            for n in c[1:]:
                n.cont()
        left = value(a, "SELECT redlock_validity('x')")
        check(left is not None and left <= 3000, "a counts %r ms left after the unanswered extend to 3 s" % left)
        h.wait_until(lambda: (value(a, "SELECT redlock_validity('x')") or 0) > 3000, 10,
                     what="the auto-extension renews x to its 30 s before the 3 s are up")
        pttls = [n.pttl("x") for n in c]
        check(sum(p > 3000 for p in pttls) >= 2, "the keys after the renewal: %r" % pttls)


class _Waiter:
    """On one node: a holder takes name for a minute, and a waiter whose
    retry delay is a minute (so only wake-ups make it try early) waits
    wait_ms for it in a thread, subscribed once start() returns. tries()
    counts the waiter's acquire attempts (SET calls) since then."""

    def __init__(self, name, wait_ms):
        self.name, self.node = name, h.shared_cluster(1)[0]
        self.holder = h.connect([self.node], fencing=0)
        is_token(value(self.holder, "SELECT redlock_acquire(?, 60000)", name))
        self.waiter = h.connect([self.node], fencing=0, retry_delay_ms=60000, retry_jitter_ms=0)
        self.sql, self.result = "SELECT redlock_acquire('%s', 10000, %d)" % (name, wait_ms), {}
        self.thread = threading.Thread(target=self._wait)

    def _wait(self):
        start = time.monotonic()
        self.result["value"] = value(self.waiter, self.sql)
        self.result["took"] = time.monotonic() - start

    def start(self):
        self.before = self.node.calls("set")
        self.thread.start()
        h.wait_until(lambda: self.node.cmd("PUBSUB", "NUMSUB", self.name + ":released")[1] >= 1,
                     what="the waiter subscribed")

    def tries(self):
        return self.node.calls("set") - self.before

    def end(self):
        self.thread.join()
        eq(self.result["value"], None, "the lock stayed the holder's")
        eq(value(self.holder, "SELECT redlock_release(?)", self.name), 1, "the holder's release")
        return self.tries(), self.result["took"]


def test_a_flood_of_release_messages_does_not_flood_the_nodes_1n():
    """Anyone allowed to PUBLISH on <name>:released (or to write keys when
    keyspace events are on) woke a waiter for one more attempt per message:
    a publisher's loop became as many acquire rounds as the waiter could
    run. Messages now bring forward at most RL_WAKE_BURST (8) attempts at
    once and then one per RL_WAKE_GAP_US (2 ms), however many come."""
    gap_ms, burst = 2, 8
    w = _Waiter("flood", 1500)
    w.start()
    published = 0
    while w.thread.is_alive():
        w.node.cmd("PUBLISH", "flood:released", "x")
        published += 1
    attempts, took = w.end()
    bound = 3 + burst + int(took * 1000 / gap_ms)  # the first try, the one after subscribing, the last
    check(attempts <= bound, "%d attempts for %d messages in %.2f s (at most %d: %d, then one per %d ms)"
          % (attempts, published, took, bound, burst, gap_ms))


def test_a_message_read_in_pieces_wakes_a_waiter_once_1n():
    """A waiter's pause ended at the first bytes on its subscription even
    when they were only part of a message: a large message (or one sent a
    piece at a time) made it try again once per piece, neither at a real
    release nor after its retry delay. A pause now ends only at a whole
    message, its delay, the deadline or an interrupt."""
    w = _Waiter("pieces", 3000)
    w.start()
    h.wait_until(lambda: w.tries() >= 2, what="the waiter's try after subscribing")
    w.node.cmd("PUBLISH", "pieces:released", "x" * (12 << 20))
    attempts, _ = w.end()
    check(attempts <= 4, "%d tries: the first, the one after subscribing, one for the message and one at the "
                         "end of the wait" % attempts)
