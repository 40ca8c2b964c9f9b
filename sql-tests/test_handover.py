"""Locks for jobs of several steps: redlock_detach hands a lock over to its
TTL, redlock_adopt takes it into another connection after checking it on a
quorum; the cron job of the shell guide (examples/nightly_steps.sh)
run as three real sqlite3 invocations while a second copy tries to get in;
a plain acquire that dies with its sqlite3 process; and what a review of
detach and adopt found: a hostile PTTL on the nodes, the keeper's extend
on its way at detach, two names whose keys hold one token.

Run: /usr/bin/python3 sql-tests/run.py test_handover
"""
# SPDX-License-Identifier: BSD-3-Clause

import os
import re
import sqlite3
import stat
import subprocess
import tempfile

import harness as h
from harness import check, eq, holds, is_token, no_key, value

h.default_config(timeout_ms=h.RELAXED_TIMEOUT_MS)

ROWS = "SELECT resource, token, holds, fence, state FROM redlock_locks ORDER BY resource"
TTL_MAX_MS = 2147483647


def cluster():
    return h.shared_cluster(3)


def evals(c):
    return sum(n.calls("eval") + n.calls("set") for n in c)


# --------------------------------------------------------------------------
# detach
# --------------------------------------------------------------------------

def test_detach_hands_the_lock_to_its_ttl_3n():
    c = cluster()
    a = h.connect(c)
    tok = is_token(value(a, "SELECT redlock_acquire('ho:a', 60000)"))
    check(value(a, "SELECT redlock_fence('ho:a')") is not None, "a fence number before detach")
    eq(value(a, "SELECT redlock_detach('ho:a')"), tok, "detach returns the token")
    eq(h.rows(a, ROWS), [], "redlock_locks after detach")
    eq(value(a, "SELECT redlock_validity('ho:a')"), None, "validity after detach")
    eq(value(a, "SELECT redlock_fence('ho:a')"), None, "fence after detach")
    eq(value(a, "SELECT redlock_release('ho:a')"), None, "release without token: holds none")
    eq(value(a, "SELECT redlock_release_all()"), 0, "release_all counts no detached lock")
    eq(value(a, "SELECT redlock_detach('ho:a')"), None, "a second detach: holds none")
    a.close()
    holds(c, "ho:a", tok, 60000, "after the detaching connection closed")
    b = h.connect(c)
    eq(value(b, "SELECT redlock_acquire('ho:a', 1000)"), None, "another connection is refused")
    check(value(b, "SELECT redlock_extend('ho:a', 90000, ?)", tok) > 60000, "extend by token from another connection")
    holds(c, "ho:a", tok, 90000, "extended by token", settle_cons=(b,))
    check(min(n.pttl("ho:a") for n in c) > 60000, "the new TTL is on every node")
    eq(value(b, "SELECT count(*) FROM redlock_locks"), 0, "extend by token takes nothing into the connection")
    eq(value(b, "SELECT redlock_release('ho:a', ?)", tok), 1, "release by token from another connection")
    no_key(c, "ho:a", "after the release by token", settle_cons=(b,))


def test_detach_of_several_holds_hands_over_the_lock():
    """Decided: detach hands over the lock whatever its count of holds."""
    c = cluster()
    a = h.connect(c)
    tok = is_token(value(a, "SELECT redlock_acquire('ho:r', 60000)"))
    eq(value(a, "SELECT redlock_acquire('ho:r', 60000)"), tok, "re-entry")
    eq(value(a, "SELECT holds FROM redlock_locks"), 2, "two holds")
    eq(value(a, "SELECT redlock_detach('ho:r')"), tok, "detach")
    eq(value(a, "SELECT count(*) FROM redlock_locks"), 0, "no row left")
    eq(value(a, "SELECT redlock_release('ho:r')"), None, "no hold left to release")
    a.close()
    holds(c, "ho:r", tok, 60000, "after close")


def test_detached_lock_is_not_auto_extended():
    c = cluster()
    a = h.connect(c, auto_extend=1)
    tok = is_token(value(a, "SELECT redlock_acquire('ho:x', 900)"))
    eq(value(a, "SELECT redlock_detach('ho:x')"), tok, "detach")
    # The keeper would extend it at a third of its TTL; left alone it expires.
    no_key(c, "ho:x", "a detached lock must expire with its TTL", timeout=5.0)
    eq(value(a, "SELECT count(*) FROM redlock_locks"), 0, "nothing listed")


def test_detach_expired_is_null_and_cleans_up():
    c = cluster()
    a = h.connect(c)
    is_token(value(a, "SELECT redlock_acquire('ho:e', 300)"))
    h.wait_until(lambda: value(a, "SELECT redlock_validity('ho:e')") is None, 5, what="validity to run out")
    eq(value(a, "SELECT redlock_detach('ho:e')"), None, "detach of an expired lock")
    eq(value(a, "SELECT count(*) FROM redlock_locks"), 0, "forgotten")
    no_key(c, "ho:e", "what was left of it", settle_cons=(a,))


def _pending_to_server(p):
    return sum(conn.c2s.queued for conn in list(p._conns))


def test_detach_waits_for_the_keepers_extend_on_its_way_3n():
    """The keeper's extend, sent with the lock's TTL from before, must not
    reach the nodes after detach has handed the token on: the next step's
    longer extend by token would be cut back to the old TTL, and a third
    client would get the lock while that step believes it holds it."""
    from faultproxy import FaultProxy
    c = cluster()
    proxies = [FaultProxy(n.host, n.port) for n in c]
    try:
        a = h.connect([p.url for p in proxies], auto_extend=1, timeout_ms=5000)
        b = h.connect(c)
        tok = is_token(value(a, "SELECT redlock_acquire('rvh:kp', 3000)"))
        h.settle(a)
        for p in proxies:
            p.delay_requests(1500)
        # the keeper extends at a third of the TTL: its EVAL now waits in the proxies
        h.wait_until(lambda: all(_pending_to_server(p) > 0 for p in proxies), 5,
                     what="the keeper's extend to be on its way")
        eq(value(a, "SELECT redlock_detach('rvh:kp')"), tok, "detach")
        v = value(b, "SELECT redlock_extend('rvh:kp', 60000, ?)", tok)
        check(isinstance(v, int) and v > 50000, "the next step extends it by token: %r" % v)
        # whatever A sent before detach has reached the nodes by now
        h.wait_until(lambda: all(_pending_to_server(p) == 0 for p in proxies), 10,
                     what="the proxies to deliver")
        h.settle(a)
        # The keeper's round ends at a quorum of answers: what it sent to the
        # rest may still land later (as any late command may), so the lock
        # must stand on a quorum, which is what the next step relies on.
        pttls = [n.pttl("rvh:kp") for n in c]
        check(sum(p > 50000 for p in pttls) >= 2,
              "after the next step's extend to 60000 ms the nodes have PTTLs %r: a stale extend sent "
              "before detach cut the lock back on a quorum, so it expires while its holder believes it "
              "holds it" % (pttls,))
        eq(value(b, "SELECT redlock_release('rvh:kp', ?)", tok), 1, "release by token")
    finally:
        for p in proxies:
            p.close()


def _late_extend_after_handover(take, extend_own, res):
    """A holds res through three proxies; its copy of an extend to node 0
    is held back in that proxy (a link that delivers late, as a kernel's
    send queue does after a partition heals) while nodes 1 and 2 decide
    the round. A detaches; B extends by token to 60 s on every node; then
    node 0 receives A's old extend. No command sent with the token before
    the hand-off may cut B's lock back: with it cut on node 0, the key
    expires on a quorum (0 and 2, where B's extend could be the one that
    is late) while B still counts on 60 s."""
    from faultproxy import FaultProxy
    c = cluster()
    proxies = [FaultProxy(n.host, n.port) for n in c]
    try:
        a = h.connect([p.url for p in proxies], auto_extend=0 if extend_own else 1, timeout_ms=300)
        b = h.connect(c)
        tok = is_token(value(a, take, res))
        h.settle(a)
        proxies[0].delay_requests(1500)
        if extend_own:
            check(value(a, "SELECT redlock_extend(?, 3000)", res) > 0, "A's own extend, decided by nodes 1 and 2")
        # else the keeper extends at a third of the TTL
        h.wait_until(lambda: _pending_to_server(proxies[0]) > 0, 5,
                     what="A's extend to node 0 to be held in its proxy")
        eq(value(a, "SELECT redlock_detach(?)", res), tok, "detach")
        v = value(b, "SELECT redlock_adopt(?, ?)", res, tok)
        check(isinstance(v, int) and v > 0, "B adopts: %r" % v)
        v = value(b, "SELECT redlock_extend(?, 60000)", res)
        check(isinstance(v, int) and v > 50000, "B extends to 60 s: %r" % v)
        h.settle(b)
        scripts = lambda: c[0].calls("evalsha") + c[0].calls("eval")  # noqa: E731
        before = scripts()
        h.wait_until(lambda: _pending_to_server(proxies[0]) == 0 and scripts() > before, 10,
                     what="node 0 to run A's held-back extend")
        pttl0 = c[0].pttl(res) if take.find("shared") < 0 else _shared_left(c[0], res, tok)
        check(pttl0 > 50000,
              "node 0 kept %r ms of B's 60 s lock: A's extend, sent before the hand-off and delivered "
              "after it, cut the lock back" % pttl0)
        eq(value(b, "SELECT redlock_release(?)", res), 1, "B's release")
    finally:
        for p in proxies:
            p.close()


def _shared_left(node, res, tok):
    tm = node.cmd("TIME")
    now = int(tm[0]) * 1000 + int(tm[1]) // 1000
    sc = node.cmd("ZSCORE", res, tok)
    return -1 if sc is None else int(float(sc)) - now


def test_a_keepers_extend_delivered_after_a_handover_never_shortens_it_3n():
    _late_extend_after_handover("SELECT redlock_acquire(?, 3000)", False, "ho:late-keeper")


def test_an_own_extend_delivered_after_a_handover_never_shortens_it_3n():
    _late_extend_after_handover("SELECT redlock_acquire(?, 3000)", True, "ho:late-own")


def test_a_shared_extend_delivered_after_a_handover_never_shortens_it_3n():
    _late_extend_after_handover("SELECT redlock_acquire_shared(?, 3000, 0, 1)", True, "ho:late-shared")


# --------------------------------------------------------------------------
# adopt
# --------------------------------------------------------------------------

def test_adopt_takes_the_lock_into_the_connection_3n():
    c = cluster()
    a = h.connect(c)
    tok = is_token(value(a, "SELECT redlock_acquire('ho:b', 60000)"))
    eq(value(a, "SELECT redlock_detach('ho:b')"), tok, "detach")
    a.close()
    before = max(n.pttl("ho:b") for n in c)
    b = h.connect(c)
    v = value(b, "SELECT redlock_adopt('ho:b', ?)", tok)
    check(isinstance(v, int) and 0 < v <= before, "adopt's validity %r within the PTTL %r" % (v, before))
    h.settle(b)
    after = [n.pttl("ho:b") for n in c]
    check(all(0 < p <= before for p in after), "adopt lengthened or deleted the key: %r then %r" % (before, after))
    eq(h.rows(b, ROWS), [("ho:b", tok, 1, None, "held")], "redlock_locks after adopt (no fence number)")
    check(0 < value(b, "SELECT redlock_validity('ho:b')") <= v, "validity after adopt")
    eq(value(b, "SELECT redlock_fence('ho:b')"), None, "no fence number for an adopted lock")
    # behaves like its own: re-entry, extend without token, release at close
    eq(value(b, "SELECT redlock_acquire('ho:b', 60000)"), tok, "re-entry gives the same token")
    eq(value(b, "SELECT redlock_release('ho:b')"), 1, "one hold back")
    check(value(b, "SELECT redlock_extend('ho:b', 90000)") > 0, "extend without token")
    holds(c, "ho:b", tok, 90000, "extended to the new TTL", settle_cons=(b,))
    check(all(n.pttl("ho:b") > before for n in c), "the extend lengthened the lock on every node")
    b.close()
    no_key(c, "ho:b", "an adopted lock is released when its connection closes")


def test_adopt_again_in_the_same_connection():
    c = cluster()
    a = h.connect(c)
    tok = is_token(value(a, "SELECT redlock_acquire('ho:s', 60000)"))
    h.settle(a)
    calls = evals(c)
    v = value(a, "SELECT redlock_adopt('ho:s', ?)", tok)
    check(isinstance(v, int) and 0 < v <= 60000, "adopting what it holds: its validity, got %r" % v)
    eq(evals(c), calls, "no call to the nodes")
    eq(value(a, "SELECT holds FROM redlock_locks"), 1, "no hold added")
    other = "0" * 60
    h.redlock_error(a, "SELECT redlock_adopt('ho:s', ?)", other, contains=("another token", "release it"))
    eq(value(a, "SELECT token FROM redlock_locks"), tok, "still its own lock")
    eq(value(a, "SELECT redlock_release('ho:s')"), 1, "release")


def test_adopt_wrong_expired_or_someone_elses():
    c = cluster()
    a = h.connect(c)
    b = h.connect(c)
    tok = is_token(value(a, "SELECT redlock_acquire('ho:w', 60000)"))
    eq(value(b, "SELECT redlock_adopt('ho:w', ?)", "f" * 60), None, "a wrong token on a held lock")
    eq(value(b, "SELECT count(*) FROM redlock_locks"), 0, "nothing adopted")
    holds(c, "ho:w", tok, 60000, "the holder's lock is untouched", settle_cons=(b,))
    eq(value(a, "SELECT redlock_release('ho:w')"), 1, "release")
    eq(value(b, "SELECT redlock_adopt('ho:w', ?)", tok), None, "a released lock")
    exp = is_token(value(a, "SELECT redlock_acquire('ho:gone', 200)"))
    eq(value(a, "SELECT redlock_detach('ho:gone')"), exp, "detach")
    no_key(c, "ho:gone", "expired")
    eq(value(b, "SELECT redlock_adopt('ho:gone', ?)", exp), None, "an expired lock")
    eq(value(b, "SELECT count(*) FROM redlock_locks"), 0, "nothing adopted")
    h.redlock_error(b, "SELECT redlock_adopt('ho:w', 'abc')", contains=("60-character",))


def test_adopt_needs_a_quorum_3n():
    c = cluster()
    a = h.connect(c)
    tok = is_token(value(a, "SELECT redlock_acquire('ho:q', 60000)"))
    eq(value(a, "SELECT redlock_detach('ho:q')"), tok, "detach")
    h.settle(a)
    b = h.connect(c)
    c[0].cmd("DEL", "ho:q")
    check(value(b, "SELECT redlock_adopt('ho:q', ?)", tok) > 0, "two of three nodes still hold it")
    eq(value(b, "SELECT redlock_detach('ho:q')"), tok, "detach again")
    c[1].cmd("DEL", "ho:q")
    eq(value(b, "SELECT redlock_adopt('ho:q', ?)", tok), None, "one of three is no quorum")
    eq(value(b, "SELECT count(*) FROM redlock_locks"), 0, "nothing adopted")
    eq(c[2].get("ho:q"), tok, "adopt deletes nothing")


def test_adopted_lock_is_auto_extended():
    c = cluster()
    a = h.connect(c)
    tok = is_token(value(a, "SELECT redlock_acquire('ho:k', 1500)"))
    eq(value(a, "SELECT redlock_detach('ho:k')"), tok, "detach")
    b = h.connect(c, auto_extend=1)
    check(value(b, "SELECT redlock_adopt('ho:k', ?)", tok) is not None, "adopt")
    eq(value(b, "SELECT auto_extend FROM redlock_locks"), 1, "auto_extend")
    h.wait_until(lambda: value(b, "SELECT extensions FROM redlock_locks") >= 3, 10,
                 what="three extensions of the adopted lock")
    eq(value(b, "SELECT state FROM redlock_locks"), "held", "still held")
    holds(c, "ho:k", tok, 1500, "extended, never longer than the TTL it had left")
    b.close()
    no_key(c, "ho:k", "released at close")


def test_adopt_of_a_key_with_a_huge_pttl_stays_within_the_longest_ttl_3n():
    """A key holding the token whose PTTL is far beyond any TTL this
    extension sets (another client's PEXPIRE, a hostile server) must not
    overflow the validity arithmetic: the validity adopt reports, and the
    TTL the connection keeps for the lock, stay within the longest TTL."""
    c = cluster()
    a = h.connect(c)
    b = h.connect(c, auto_extend=1)
    for res, pttl in (("rvh:huge", "9000000000000000000"), ("rvh:big", str(10 ** 13))):
        tok = is_token(value(a, "SELECT redlock_acquire(?, 60000)", res))
        eq(value(a, "SELECT redlock_detach(?)", res), tok, "detach")
        h.settle(a)  # the acquire returned at a quorum: the last node's SET may still be on its way
        for n in c:
            eq(n.cmd("PEXPIRE", res, pttl), 1, "PEXPIRE on %s" % n.addr)
        v = value(b, "SELECT redlock_adopt(?, ?)", res, tok)
        check(isinstance(v, int) and 0 < v <= TTL_MAX_MS,
              "adopt of a key with PTTL %s: validity %r must be within 1..%d" % (pttl, v, TTL_MAX_MS))
        ttl, left = h.rows(b, "SELECT ttl_ms, validity_ms FROM redlock_locks WHERE resource = ?", res)[0]
        check(0 < ttl <= TTL_MAX_MS and 0 < left <= TTL_MAX_MS,
              "redlock_locks after adopt: ttl_ms %r, validity_ms %r within 1..%d" % (ttl, left, TTL_MAX_MS))
        eq(value(b, "SELECT redlock_release(?)", res), 1, "release of the adopted lock")
        h.no_key(c, res, "after release", settle_cons=(b,))


def test_keeper_tells_apart_two_names_that_hold_one_token_3n():
    """Two locks of one connection whose keys hold the same token (adopt
    takes whatever key holds the token on a quorum): the keeper's extend of
    one must never be booked on the other. Booked on the wrong one, it gave
    that lock a validity from the other's TTL and moved its next extension
    out, so its key expired while redlock_validity still said it was held."""
    c = cluster()
    a = h.connect(c, auto_extend=1)
    is_token(value(a, "SELECT redlock_acquire('rvh:k0', 60000)"))
    tok = is_token(value(a, "SELECT redlock_acquire('rvh:k1', 3000)"))
    for n in c:
        n.cmd("SET", "rvh:k2", tok, "PX", "600")
    v = value(a, "SELECT redlock_adopt('rvh:k2', ?)", tok)
    check(isinstance(v, int) and 0 < v <= 600, "adopt of rvh:k2: %r" % v)
    eq(value(a, "SELECT redlock_release('rvh:k0')"), 1, "release of rvh:k0 (the list is reordered)")
    bad = []

    def key_gone_but_validity_left():
        left = value(a, "SELECT redlock_validity('rvh:k2')")
        gone = all(n.get("rvh:k2") is None for n in c)
        if gone and left and left > 0:
            bad.append(left)
            return True
        # done once the keeper has extended rvh:k1 (at a third of its TTL) and
        # rvh:k2 a few times after that
        return value(a, "SELECT extensions FROM redlock_locks WHERE resource = 'rvh:k1'") >= 2
    h.wait_until(key_gone_but_validity_left, 10, what="rvh:k1 extended twice, or rvh:k2 gone while valid")
    eq(bad, [], "redlock_validity('rvh:k2') while its key was gone from every node")
    check(all(n.get("rvh:k2") == tok for n in c), "rvh:k2 kept by the keeper")


def test_adopt_and_detach_refused_from_a_check_constraint():
    c = cluster()
    a = h.connect(c)
    tok = is_token(value(a, "SELECT redlock_acquire('ho:g', 60000)"))
    eq(value(a, "SELECT redlock_detach('ho:g')"), tok, "detach")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "hostile.db")
        db = sqlite3.connect(path, isolation_level=None)
        db.create_function("redlock_adopt", 2, lambda *x: 1, deterministic=True)
        db.execute("CREATE TABLE t(x CHECK (redlock_adopt('ho:g', x) IS NOT NULL))")
        db.close()
        b = h.connect(c)
        b.execute("ATTACH ? AS aux", (path,))
        msg = h.sql_error(b, "INSERT INTO aux.t VALUES (?)", tok)
        check("redlock_adopt() refused" in msg, "the CHECK's adopt is refused: %r" % msg)
        eq(value(b, "SELECT count(*) FROM redlock_locks"), 0, "nothing adopted")
        b.execute("DETACH aux")
        b.close()
    holds(c, "ho:g", tok, 60000, "the lock is still the token's")


# --------------------------------------------------------------------------
# the shell: a plain acquire dies with its process; the cron job done right
# --------------------------------------------------------------------------

def test_plain_acquire_dies_with_its_sqlite3_process():
    c = cluster()
    rc, out, err = h.shell("SELECT redlock_acquire('ho:cron', 600000);", c)
    eq(rc, 0, "step 1 exit status (stderr %r)" % err)
    tok = is_token(out.strip(), "step 1's token")
    no_key(c, "ho:cron", "the lock of a sqlite3 process that exited")
    rc, out, _ = h.shell("SELECT redlock_acquire('ho:cron', 600000);", c)
    is_token(out.strip(), "a second copy gets in at once")
    rc, out, _ = h.shell("SELECT redlock_release('ho:cron', '%s');" % tok, c)
    eq(out.strip(), "0", "step 3's release by token finds nothing of its own")


SCHEMA = """
CREATE TABLE orders(id INTEGER PRIMARY KEY, day TEXT, amount_cents INTEGER, reported INTEGER NOT NULL DEFAULT 0);
CREATE TABLE daily_report(day TEXT PRIMARY KEY, orders INTEGER NOT NULL, revenue_cents INTEGER NOT NULL);
INSERT INTO orders(day, amount_cents) VALUES ('2026-01-01', 100), ('2026-01-01', 250), ('2026-01-02', 75);
"""

# Put first on PATH: runs the real sqlite3, then (after it exited) a second
# copy of the job's first step, and logs what that copy got.
WRAPPER = """#!/bin/bash
set -u
%(sqlite3)s "$@"
rc=$?
got=$(%(sqlite3)s -cmd ".load %(ext)s" :memory: "SELECT coalesce(redlock_acquire('nightly-report', 600000), 'NULL');" 2>&1)
echo "after step: rc=$rc second copy: $got" >> "%(log)s"
exit $rc
"""


def test_cron_job_of_three_invocations_3n():
    c = cluster()
    script = os.path.join(h.REPO, "examples", "nightly_steps.sh")
    with tempfile.TemporaryDirectory() as d:
        db = os.path.join(d, "shop.db")
        con = sqlite3.connect(db)
        con.executescript(SCHEMA)
        con.close()
        log = os.path.join(d, "log")
        wrapper = os.path.join(d, "sqlite3")
        with open(wrapper, "w") as f:
            f.write(WRAPPER % {"sqlite3": h.SQLITE3, "ext": h.EXT, "log": log})
        os.chmod(wrapper, stat.S_IRWXU)
        env = dict(os.environ, PATH=d + ":" + os.environ["PATH"], REDLOCK_NODES=h.nodes_env_of(c),
                   REDLOCK_EXT=h.EXT, DB=db)
        r = subprocess.run(["bash", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=60)
        eq(r.returncode, 0, "the cron job's exit status (stderr %r)" % r.stderr)
        with open(log) as f:
            lines = f.read().splitlines()
        eq(len(lines), 3, "three sqlite3 invocations: %r" % lines)
        for i, line in enumerate(lines[:2]):
            eq(line, "after step: rc=0 second copy: NULL", "a second copy after step %d" % (i + 1))
        # after step 3 the lock is free: the second copy got a token (and
        # released it when it exited)
        check(re.fullmatch(r"after step: rc=0 second copy: [0-9a-f]{60}", lines[2]),
              "a second copy after step 3: %r" % lines[2])
        con = sqlite3.connect(db)
        eq(con.execute("SELECT day, orders, revenue_cents FROM daily_report ORDER BY day").fetchall(),
           [("2026-01-01", 2, 350), ("2026-01-02", 1, 75)], "the work of step 2")
        eq(con.execute("SELECT count(*) FROM orders WHERE reported = 0").fetchone()[0], 0, "orders marked")
        con.close()
    no_key(c, "nightly-report", "after the job")


def test_cron_job_stops_when_the_lock_is_taken_3n():
    c = cluster()
    holder = h.connect(c)
    is_token(value(holder, "SELECT redlock_acquire('nightly-report', 60000)"))
    script = os.path.join(h.REPO, "examples", "nightly_steps.sh")
    with tempfile.TemporaryDirectory() as d:
        db = os.path.join(d, "shop.db")
        con = sqlite3.connect(db)
        con.executescript(SCHEMA)
        con.close()
        env = dict(os.environ, REDLOCK_NODES=h.nodes_env_of(c), REDLOCK_EXT=h.EXT, DB=db)
        r = subprocess.run(["bash", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=60)
        check(r.returncode != 0, "the job must stop when the lock is taken")
        check("redlock: could not lock 'nightly-report'" in r.stderr, "why: %r" % r.stderr)
        con = sqlite3.connect(db)
        eq(con.execute("SELECT count(*) FROM daily_report").fetchone()[0], 0, "no work done")
        con.close()


def test_shell_guide_shows_the_cron_job():
    with open(os.path.join(h.REPO, "docs", "guides", "shell-and-cron.md")) as f:
        guide = f.read()
    with open(os.path.join(h.REPO, "examples", "nightly_steps.sh")) as f:
        script = f.read()
    body = script.split("set -euo pipefail\n", 1)[1]
    check(body in guide, "the shell guide shows examples/nightly_steps.sh from 'set -euo pipefail' on")
    check("A lock lives as long as the `sqlite3` process that took it" in guide
          and "redlock_detach" in guide and "redlock_adopt" in guide,
          "the shell guide says a plain acquire dies with its process")


def test_adopt_without_a_quorum_of_answers_is_an_error():
    c = h.shared_cluster(1)
    a = h.connect(c)
    tok = is_token(value(a, "SELECT redlock_acquire('ho:n', 60000)"))
    eq(value(a, "SELECT redlock_detach('ho:n')"), tok, "detach")
    dead = ["redis://127.0.0.1:%d" % h.free_port() for _ in range(2)]
    b = h.connect([c[0].url] + dead)
    msg = h.redlock_error(b, "SELECT redlock_adopt('ho:n', ?)", tok,
                          contains=("could not adopt 'ho:n'", "2 of 3 nodes failed"))
    check(tok not in msg, "no token in the error")
    eq(value(b, "SELECT count(*) FROM redlock_locks"), 0, "nothing adopted")
    eq(c[0].get("ho:n"), tok, "the lock is left as it was")
