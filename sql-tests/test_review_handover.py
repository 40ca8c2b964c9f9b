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
        pttls = [n.pttl("rvh:kp") for n in c]
        check(all(p > 50000 for p in pttls),
              "after the next step's extend to 60000 ms the nodes have PTTLs %r: a stale extend sent "
              "before detach cut the lock back, so it expires while its holder believes it holds it" % (pttls,))
        eq(value(b, "SELECT redlock_release('rvh:kp', ?)", tok), 1, "release by token")
    finally:
        for p in proxies:
            p.close()
