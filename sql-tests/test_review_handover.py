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
