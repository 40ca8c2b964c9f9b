"""Adversarial review of detach/adopt and the release-before-COMMIT
refusal: hostile PTTLs on the nodes, ways around the refusal, races with
the keeper.

Run: /usr/bin/python3 sql-tests/run.py test_review_handover
"""
# SPDX-License-Identifier: BSD-3-Clause

import harness as h
from harness import check, eq, is_token, value

h.default_config(timeout_ms=h.RELAXED_TIMEOUT_MS)

TTL_MAX_MS = 2147483647


def cluster():
    return h.shared_cluster(3)


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
