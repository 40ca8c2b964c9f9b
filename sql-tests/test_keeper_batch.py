"""The keeper extends many locks in one round: every lock due at a wake-up
goes to each node in one script call, each key still compared with its own
token, and a key that is not ours any more costs only its own lock (marked
lost; the others go on).

Run: /usr/bin/python3 sql-tests/run.py test_keeper_batch
 or: /usr/bin/python3 sql-tests/test_keeper_batch.py   (prints the evidence)
"""
# SPDX-License-Identifier: BSD-3-Clause

import sys

import harness as h
from harness import check, eq, lock_rows, note, run_directly as _run_directly, timeout_env as env

N = 200            # locks kept alive at once
TTL = 1500         # ms: extended every 500 ms


def _take_all(con, n=N, ttl=TTL):
    got = h.value(con, "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?) "
                       "SELECT count(redlock_acquire('job:' || i, ?)) FROM s", n, ttl)
    eq(got, n, "locks taken")
    return {r["resource"]: r["token"] for r in lock_rows(con)}


def _extensions(con):
    return {r["resource"]: (r["state"], r["extensions"]) for r in lock_rows(con)}


def _all_extended(con, at_least, skip=()):
    rows = _extensions(con)
    return all(e >= at_least for res, (st, e) in rows.items() if res not in skip)


def test_keeper_many_locks_one_stolen_on_a_quorum():
    c = h.shared_cluster(3)
    con = h.connect(env(c, 1000), auto_extend=1)
    toks = _take_all(con)
    h.wait_until(lambda: _all_extended(con, 1), 10, what="every lock extended once")
    # job:7 is taken over on two of the three nodes (its key expired there
    # and someone else set it): our keeper must lose that one lock only.
    for n in c.nodes[:2]:
        n.cmd("SET", "job:7", "someone-else", "PX", 60000)
    h.wait_until(lambda: _extensions(con)["job:7"][0] == "lost", 10, what="job:7 marked lost")
    before = {res: e for res, (st, e) in _extensions(con).items()}
    h.wait_until(lambda: all(e >= before[res] + 3 for res, (st, e) in _extensions(con).items() if res != "job:7"),
                 20, what="every other lock extended three more times")
    rows = {r["resource"]: r for r in lock_rows(con)}
    lost = sorted(res for res, r in rows.items() if r["state"] != "held")
    eq(lost, ["job:7"], "locks not held after three more periods")
    check(rows["job:7"]["lost_reason"], "job:7 has a lost_reason: %r" % rows["job:7"]["lost_reason"])
    note("lost_reason: %r" % rows["job:7"]["lost_reason"])
    # every other key is still ours on every node, with its own token
    for res in ("job:1", "job:8", "job:100", "job:200"):
        eq(c.values(res), [toks[res]] * 3, "%s on the nodes" % res)
    # the thief's value is untouched; ours was deleted where it was left
    eq([n.get("job:7") for n in c.nodes[:2]], ["someone-else"] * 2, "job:7 on the nodes that gave it away")
    h.wait_until(lambda: c.nodes[2].get("job:7") is None, 5, what="our job:7 cleaned up on the third node")
    eq(h.value(con, "SELECT redlock_release_all()"), N, "locks released")
    con.close()


def test_keeper_one_script_call_per_node_per_wakeup():
    c = h.shared_cluster(3)
    con = h.connect(env(c, 1000), auto_extend=1)
    _take_all(con)
    h.wait_until(lambda: _all_extended(con, 1), 10, what="every lock extended once")
    start = {res: e for res, (st, e) in _extensions(con).items()}
    evals = [n.calls("eval") for n in c]
    h.wait_until(lambda: all(e >= start[res] + 2 for res, (st, e) in _extensions(con).items()), 20,
                 what="every lock extended twice more")
    done = sum(e - start[res] for res, (st, e) in _extensions(con).items())
    calls = [n.calls("eval") - b for n, b in zip(c, evals)]
    note("%d extensions of %d locks took %s EVAL calls on the three nodes" % (done, N, calls))
    # One call per lock would be at least 2 x 200 on each node; batched, a
    # wake-up costs each node one call (a few wake-ups per period at most).
    for n, k in zip(c, calls):
        check(k <= 20, "%s ran %d EVALs for %d extensions (one per lock and node?)" % (n.addr, k, done))
    eq([r["state"] for r in lock_rows(con)], ["held"] * N, "states")
    h.value(con, "SELECT redlock_release_all()")
    con.close()


def _members(node, key):
    """Live shared holders' tokens on one node (the '' member is the limit)."""
    if node.cmd("TYPE", key) != "zset":
        return []
    return sorted(m for m in node.cmd("ZRANGE", key, 0, -1) if m)


def test_keeper_batch_with_shared_holds_and_holder_details():
    """Shared holds are kept alive beside a batch of exclusive locks (their
    keys are sorted sets the batch's script cannot read), an exclusive lock's
    holder details live as long as the lock, and a name someone else took
    as a shared lock since costs only that lock."""
    c = h.shared_cluster(3)
    con = h.connect(env(c, 1000), auto_extend=1)
    toks = _take_all(con, 30)
    rt = h.value(con, "SELECT redlock_acquire_shared('mix-r', ?)", TTL)
    kt = h.value(con, "SELECT redlock_acquire_shared('mix-k', ?, 0, 2)", TTL)
    check(rt and kt, "shared holds taken: %r %r" % (rt, kt))
    # Four extensions take longer than a TTL: what was not extended is gone.
    h.wait_until(lambda: _all_extended(con, 4), 20, what="every lock and hold extended four times")
    eq(sorted(set(r["state"] for r in lock_rows(con))), ["held"], "states")
    for n in c:
        eq(_members(n, "mix-r"), [rt], "the shared hold mix-r on %s" % n.addr)
        eq(_members(n, "mix-k"), [kt], "the shared hold mix-k on %s" % n.addr)
        for res in ("job:1", "job:30"):
            dk = "redlock-client:" + n.get(res)[:16]
            check(n.pttl(dk) >= n.pttl(res) > 0, "%s's holder details live as long on %s" % (res, n.addr))
    # job:3 expires on two nodes and another connection takes it shared there.
    other = h.connect(c)
    for n in c.nodes[:2]:
        n.cmd("DEL", "job:3")
    check(h.value(other, "SELECT redlock_acquire_shared('job:3', 60000)"), "job:3 taken shared by another")
    h.wait_until(lambda: _extensions(con)["job:3"][0] == "lost", 10, what="job:3 marked lost")
    before = {res: e for res, (st, e) in _extensions(con).items()}
    h.wait_until(lambda: all(e >= before[res] + 3 for res, (st, e) in _extensions(con).items() if res != "job:3"),
                 20, what="every other lock and hold extended three more times")
    rows = {r["resource"]: r for r in lock_rows(con)}
    eq(sorted(res for res, r in rows.items() if r["state"] != "held"), ["job:3"], "locks not held")
    for res in ("job:1", "job:30"):
        eq(c.values(res), [toks[res]] * 3, "%s on the nodes" % res)
    eq(h.value(con, "SELECT redlock_release_all()"), 32, "locks and holds released")
    eq(h.value(other, "SELECT redlock_release('job:3')"), 1, "the other's shared hold released")
    con.close()
    other.close()


if __name__ == "__main__":
    sys.exit(_run_directly(globals()))
