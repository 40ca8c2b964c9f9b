"""Several names at once: redlock_acquire_many(resources_json, ttl_ms
[, wait_ms]) takes every name of a JSON array or none, with one token and one
script per node; redlock_release_many(resources_json [, token]) gives them
back in one script per node and says how many. Each name is an ordinary lock
key holding the token: other clients see it locked, redlock_release(name)
and redlock_extend work on it alone, redlock_locks lists it, and it has its
own fencing number. Checked in Redis itself, on 1 and 3 nodes, from Python
and the sqlite3 shell, with another client holding one of the names, with
leftovers of a crashed attempt, and with a minority and a majority down;
a text with a NUL byte refused, and a waiting acquire_many not starved by
a stream of shared holders (both found by review).

Run: /usr/bin/python3 sql-tests/run.py test_many
"""
# SPDX-License-Identifier: BSD-3-Clause

import json
import os
import random
import sqlite3
import sys
import tempfile
import threading
import time

import harness as h
from faultproxy import FaultProxy
from harness import check, eq, holds, is_token, no_key, value
from harness import lock_rows, run_directly, sh, timeout_env as env

AM = "SELECT redlock_acquire_many(?, ?)"
AMW = "SELECT redlock_acquire_many(?, ?, ?)"
RM = "SELECT redlock_release_many(?)"
RMT = "SELECT redlock_release_many(?, ?)"


def js(*names):
    return json.dumps(list(names))


def _ours_left(c, names, token):
    """(node, name) pairs where a key of ours (token) is left."""
    return [(n.addr, k) for n in c.live() for k in names if n.get(k) == token]


def _basics(n):
    c = h.shared_cluster(n)
    con = h.connect(env(c))
    names = ["m:a", "m:b", "m:c"]
    tok = is_token(value(con, AM, js(*names), 10000), "acquire_many")
    for k in names:
        holds(c, k, tok, 10000, "key %s holds the one token on every node" % k, settle_cons=(con,))
    rows = lock_rows(con)
    eq([r["resource"] for r in rows], names, "one redlock_locks row per name")
    eq({r["token"] for r in rows}, {tok}, "one token for the set")
    eq({r["state"] for r in rows}, {"held"}, "every row held")
    fences = [value(con, "SELECT redlock_fence(?)", k) for k in names]
    eq(fences, [1, 1, 1], "a fence per name, each name's first")
    eq([r["fence"] for r in rows], fences, "redlock_locks.fence")
    # another client sees each name as an ordinary lock
    other = h.connect(env(c))
    eq(value(other, "SELECT redlock_acquire(?, 1000)", "m:b"), None, "another client cannot take m:b")
    eq(value(other, AM, js("m:x", "m:c"), 1000), None, "nor a set that contains m:c")
    no_key(c, "m:x", "all or none: m:x not taken", settle_cons=(other,))
    # one name released alone
    eq(value(con, "SELECT redlock_release(?)", "m:a"), 1, "redlock_release of one name of the set")
    no_key(c, "m:a", "m:a released", settle_cons=(con,))
    holds(c, "m:b", tok, 10000, "m:b still held")
    eq([r["resource"] for r in lock_rows(con)], ["m:b", "m:c"], "rows after releasing m:a")
    # the rest in one call; names not held are not counted
    eq(value(con, RM, js("m:b", "m:c", "m:nothere")), 2, "release_many counts what it released")
    for k in names:
        no_key(c, k, "all released", settle_cons=(con,))
    eq(lock_rows(con), [], "no rows left")
    eq(value(con, RM, js("m:b", "m:c")), None, "release_many of names this connection does not hold: NULL")


h.for_nodes(globals(), _basics, counts=(1, 3))


def _all_or_none(n):
    """One name held by another client: NULL, and no key of ours is left
    on any node."""
    c = h.shared_cluster(n)
    holder = h.SqlProc(env(c))
    htok = is_token(holder.value("SELECT redlock_acquire('n:b', 20000)"))
    con = h.connect(env(c))
    names = ["n:a", "n:b", "n:c", "n:d"]
    eq(value(con, AM, js(*names), 10000), None, "acquire_many while n:b is held elsewhere")
    h.settle(con)
    for k in ("n:a", "n:c", "n:d"):
        no_key(c, k, "nothing of ours left", settle_cons=(con,))
    holds(c, "n:b", htok, 20000, "the holder's key is untouched")
    eq(lock_rows(con), [], "no rows after a refusal")
    # with wait_ms: the holder's release lets the whole set through
    result = {}

    def waiter():
        w = h.connect(env(c))
        t0 = time.monotonic()
        result["tok"] = value(w, AMW, js(*names), 10000, 10000)
        result["s"] = time.monotonic() - t0
        result["rows"] = lock_rows(w)
        w.close()
    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.3)  # the waiter's first attempt is refused before the release below
    eq(holder.value("SELECT redlock_release('n:b')"), 1, "holder releases n:b")
    t.join(15)
    is_token(result.get("tok"), "the waiting acquire_many got the set")
    check(result["s"] < 9, "it did not wait out wait_ms (%.2fs)" % result["s"])
    eq(len(result["rows"]), 4, "all four names listed")


h.for_nodes(globals(), _all_or_none, counts=(1, 3))


def test_leftover_of_crashed_attempt_votes_no_3n():
    """A node that still holds one key of the set (from an attempt that
    crashed before its cleanup, with its own token) answers no and sets
    nothing; the other two nodes make the quorum."""
    c = h.shared_cluster(3)
    c[0].cmd("SET", "l:b", "0" * 32, "PX", "20000")
    con = h.connect(env(c))
    tok = is_token(value(con, AM, js("l:a", "l:b"), 10000), "acquire_many with a leftover on one node")
    h.settle(con)
    eq(c[0].get("l:a"), None, "node 1 (with the leftover) set nothing")
    eq(c[0].get("l:b"), "0" * 32, "node 1's leftover untouched")
    for k in ("l:a", "l:b"):
        holds(c[1:], k, tok, 10000, "%s on nodes 2 and 3" % k)
    eq({r["nodes"] for r in lock_rows(con)}, {2}, "two yes votes per row")
    # the same leftover on two nodes: a quorum says no
    c[1].cmd("SET", "l:y", "0" * 32, "PX", "20000")
    c[2].cmd("SET", "l:y", "0" * 32, "PX", "20000")
    eq(value(con, AM, js("l:x", "l:y"), 10000), None, "leftovers on a majority: refused")
    no_key(c, "l:x", "nothing of the refused set left", settle_cons=(con,))


def test_minority_down_majority_down_3n():
    with h.Cluster(3) as c:
        con = h.connect(env(c, 100))
        c[2].kill9()
        tok = is_token(value(con, AM, js("d:a", "d:b"), 10000), "one node of three down")
        for k in ("d:a", "d:b"):
            holds(c[:2], k, tok, 10000, "%s on the two live nodes" % k, settle_cons=(con,))
        check(value(con, "SELECT redlock_fence('d:b')") >= 1, "fence with a node down")
        eq(value(con, RM, js("d:a", "d:b")), 2, "release_many with one node down")
        c[1].kill9()
        msg = h.redlock_error(con, AM, js("d:a", "d:b"), 10000, contains=("could not lock 2 names",))
        check("2 of 3 nodes failed" in msg, "the error counts the failing nodes: %r" % msg)
        no_key(c, "d:a", "nothing left on the live node", settle_cons=(con,))
        eq(lock_rows(con), [], "nothing listed")
        # a held set cannot be released with a majority down: an error, not a count
        c[1].restart()
        c[2].restart()
        h.wait_until(lambda: c.healthy(), 10, what="nodes back")
        def took():
            try:
                return value(con, AM, js("d:c", "d:d"), 10000) is not None
            except sqlite3.OperationalError:
                return False  # the restarted nodes are still in their backoff
        h.wait_until(took, 10, what="acquire after the restart")
        c[1].kill9()
        c[2].kill9()
        h.redlock_error(con, RM, js("d:c", "d:d"), contains=("could not release 2 names",))


FLOOR = "redlock-fence-floor"
DAY_MS = 24 * 3600 * 1000


def _fences(n):
    """A set draws one number for all its names, above each name's counter
    and the fencing floor, and stores it in the floor only; a single
    acquire continues above both, so every name's numbers keep growing
    whichever way it is taken."""
    c = h.shared_cluster(n)
    con = h.connect(env(c))
    for nd in c:
        nd.cmd("SET", "f:a:fence", "5")
    is_token(value(con, AM, js("f:a", "f:b"), 10000))
    eq({r["resource"]: r["fence"] for r in lock_rows(con)}, {"f:a": 6, "f:b": 6}, "one number, above f:a's counter")
    h.wait_until(lambda: all(nd.get(FLOOR) == "6" for nd in c), 2, what="the floor holds 6 on every node")
    eq([(nd.get("f:a:fence"), nd.get("f:b:fence")) for nd in c], [("5", None)] * n, "no counter written by the set")
    eq(value(con, RM, js("f:a", "f:b")), 2, "release")
    is_token(value(con, "SELECT redlock_acquire('f:b', 10000)"))
    eq(value(con, "SELECT redlock_fence('f:b')"), 7, "a single acquire of f:b continues above the floor")
    h.wait_until(lambda: all(nd.get("f:b:fence") == "7" for nd in c), 2, what="f:b's counter holds 7")
    eq(value(con, "SELECT redlock_release('f:b')"), 1, "release")
    for nd in c:
        nd.cmd("SET", "f:c:fence", "40")
    is_token(value(con, AM, js("f:b", "f:a", "f:c"), 10000))
    eq({r["resource"]: r["fence"] for r in lock_rows(con)}, {"f:a": 41, "f:b": 41, "f:c": 41},
       "above f:c's counter, the highest of the set")
    eq(value(con, "SELECT redlock_release_all()"), 3, "release_all counts every name")
    is_token(value(con, "SELECT redlock_acquire('f:a', 10000)"))
    eq(value(con, "SELECT redlock_fence('f:a')"), 42, "f:a's counter (5) lags: the floor (41) decides")
    eq(value(con, "SELECT redlock_release('f:a')"), 1, "release")
    con.execute("SELECT redlock_config('fencing', 0)")
    is_token(value(con, AM, js("f:a", "f:b"), 10000))
    eq([r["fence"] for r in lock_rows(con)], [None, None], "no fences with fencing off")


h.for_nodes(globals(), _fences, counts=(1, 3))


def test_fence_lagging_counter_written_back_3n():
    """A node of the quorum whose counters and floor lag (restarted empty)
    gets its floor raised to the quorum's number before the number is
    handed out. Node 2 is down, so the quorum is nodes 1 and 3."""
    with h.Cluster(3) as c:
        c[0].cmd("SET", "w:a:fence", "7")
        c[0].cmd("SET", "w:b:fence", "3")
        c[1].kill9()
        con = h.connect(env(c))
        is_token(value(con, AM, js("w:a", "w:b"), 10000))
        eq({r["resource"]: r["fence"] for r in lock_rows(con)}, {"w:a": 8, "w:b": 8}, "highest of the quorum")
        eq(c[2].get(FLOOR), "8", "node 3's floor written back before the call returned")
        check(6 * DAY_MS < c[2].pttl(FLOOR) <= 7 * DAY_MS, "the written-back floor keeps fence_ttl_ms")
        # The next holder, on the quorum nodes 2 and 3 (node 1 down), still draws a larger number.
        eq(value(con, RM, js("w:a", "w:b")), 2, "release")
        c[1].restart()
        c[0].kill9()
        def took():
            try:
                return value(con, "SELECT redlock_acquire('w:b', 10000)") is not None
            except sqlite3.OperationalError:
                return False  # node 2 is still in its backoff
        h.wait_until(took, 10, what="acquire once node 2 is back")
        f = value(con, "SELECT redlock_fence('w:b')")
        check(f > 8, "above the number written back to node 3 (failed tries while node 2 came back count too): %r" % f)


def test_fence_late_node_written_back_3n():
    """Node 3's counters lag and its replies are slowed through a proxy, so
    its answer comes after the decision: its floor still ends up with the
    number handed out (the write-back is queued behind its script)."""
    with h.Cluster(3) as c:
        for nd in c[:2]:
            nd.cmd("SET", "v:a:fence", "7")
            nd.cmd("SET", "v:b:fence", "3")
        with FaultProxy("127.0.0.1", c[2].port) as slow:
            urls = "%s,%s,%s" % (c[0].url, c[1].url, slow.url)
            con = h.connect(env(urls))
            con.execute("SELECT redlock_config('timeout_ms', 2000)")
            value(con, "SELECT count(*) FROM redlock_nodes")
            slow.delay_replies(150)
            is_token(value(con, AM, js("v:a", "v:b"), 10000))
            eq([(r["resource"], r["fence"], r["nodes"]) for r in lock_rows(con)], [("v:a", 8, 2), ("v:b", 8, 2)],
               "the number and yes votes of the quorum (nodes 1 and 2)")
            h.wait_until(lambda: c[2].get(FLOOR) == "8", 3, what="node 3's floor raised after its late answer")
            h.settle(con)
            eq([r[0] for r in con.execute("SELECT last_error FROM redlock_nodes")], [None, None, None],
               "no node has an error")
            con.close()


def test_floor_outlives_an_extended_set_3n():
    """The fencing floor lives at least as long as the set's names: an
    extension (redlock_extend, one name; the keeper, many at once) makes it
    live as long as the lock, so the next holder of a name still draws a
    larger number after a set held past fence_ttl_ms."""
    c = h.shared_cluster(3)
    con = h.connect(env(c), fence_ttl_ms=1)
    is_token(value(con, AM, js("fe:a", "fe:b"), 300))
    check(all(0 < nd.pttl(FLOOR) <= 300 for nd in c), "floor as long as the set: %r" % [nd.pttl(FLOOR) for nd in c])
    check(value(con, "SELECT redlock_extend('fe:a', 60000)") > 0, "extended")
    check(all(50000 < nd.pttl(FLOOR) <= 60000 for nd in c),
          "floor as long as the extended name: %r" % [nd.pttl(FLOOR) for nd in c])
    eq(value(con, "SELECT redlock_release_all()"), 2, "released")
    for nd in c:
        nd.cmd("DEL", FLOOR)
    kept = h.connect(env(c), fence_ttl_ms=1, auto_extend=1)
    is_token(value(kept, AM, js("fo:a", "fo:b"), 300))
    f1 = value(kept, "SELECT redlock_fence('fo:b')")
    h.wait_until(lambda: all(r["extensions"] >= 7 for r in lock_rows(kept)), 5,
                 what="both names to live past twice their TTL")
    eq(value(kept, RM, js("fo:a", "fo:b")), 2, "released")
    is_token(value(con, "SELECT redlock_acquire('fo:b', 10000)"))
    f2 = value(con, "SELECT redlock_fence('fo:b')")
    check(f2 > f1, "the next holder's fence %r is not greater than the set's %r (the floor expired while the "
          "set was held)" % (f2, f1))


def test_floor_expiry_never_shortened_1n():
    """Clients may differ in fence_ttl_ms, and a floor is shared by every
    name of its prefix (or tag): no acquisition, set or single, shortens
    the expiry a counter or floor has, nor gives one to a floor kept for
    ever; a longer one is taken."""
    c = h.shared_cluster(1)
    week = h.connect(env(c))
    short = h.connect(env(c), fence_ttl_ms=1)
    forever = h.connect(env(c), fence_ttl_ms=0)
    is_token(value(week, AM, js("ft:a"), 60000))
    check(6 * DAY_MS < c[0].pttl(FLOOR) <= 7 * DAY_MS, "a week: %r" % c[0].pttl(FLOOR))
    is_token(value(short, AM, js("ft:b"), 200))
    check(6 * DAY_MS < c[0].pttl(FLOOR) <= 7 * DAY_MS, "still a week after a set with fence_ttl_ms 1: %r"
          % c[0].pttl(FLOOR))
    is_token(value(week, "SELECT redlock_acquire('ft:s', 60000)"))
    is_token(value(short, "SELECT redlock_acquire('ft:s2', 200)"))
    eq(value(week, "SELECT redlock_release('ft:s')"), 1, "released")
    is_token(value(short, "SELECT redlock_acquire('ft:s', 200)"))
    check(6 * DAY_MS < c[0].pttl("ft:s:fence") <= 7 * DAY_MS, "a counter too: %r" % c[0].pttl("ft:s:fence"))
    is_token(value(forever, AM, js("ft:c"), 60000))
    eq(c[0].pttl(FLOOR), -1, "kept for ever by a set with fence_ttl_ms 0")
    is_token(value(week, AM, js("ft:d"), 60000))
    eq(c[0].pttl(FLOOR), -1, "still for ever after a set with the default fence_ttl_ms")
    for con in (week, short, forever):
        value(con, "SELECT redlock_release_all()")


def test_floor_of_another_prefix_is_left_alone_1n():
    """Under the key prefix '', a name can be the key of the floor of the
    prefix 'app:'. A client with that prefix then refuses to draw numbers
    from it (it holds no number) and never overwrites, extends or deletes
    it, whether it is a shared or an exclusive lock."""
    c = h.shared_cluster(1)
    bare = h.connect(env(c))
    app = h.connect(env(c), key_prefix="app:")
    key = "app:" + FLOOR
    is_token(value(app, "SELECT redlock_acquire('job2', 60000)"), "a name held before")
    is_token(value(bare, "SELECT redlock_acquire_shared(?, 60000)", key))
    for sql in ((AM, js("job"), 10000), ("SELECT redlock_acquire(?, 10000)", "job")):
        h.redlock_error(app, *sql, contains=("fencing floor %s holds no number" % key,))
    eq(c[0].cmd("TYPE", key), "zset", "the shared lock is left as it was")
    check(value(bare, "SELECT redlock_validity(?)", key) > 0, "and still held")
    eq(value(bare, "SELECT redlock_release(?)", key), 1, "released")
    is_token(value(bare, "SELECT redlock_acquire(?, 3000)", key))
    h.redlock_error(app, AM, js("job"), 10000, contains=("fencing floor %s holds no number" % key,))
    check(value(app, "SELECT redlock_extend('job2', 60000)") > 0, "job2 extended")
    check(0 < c[0].pttl(key) <= 3000, "the exclusive lock is not extended with it: %r" % c[0].pttl(key))
    eq(value(bare, "SELECT redlock_release(?)", key), 1, "released by its holder")
    value(app, "SELECT redlock_release_all()")


def test_counter_key_held_by_another_is_not_extended_1n():
    """A name taken in a set has no counter: another client may meanwhile
    lock the name x:fence. Extending x, by redlock_extend or by the keeper,
    must not lengthen that lock; a prefix that leaves a '{' open must not
    let a name be its own floor."""
    c = h.shared_cluster(1)
    a = h.connect(env(c))
    b = h.connect(env(c))
    is_token(value(a, AM, js("xe"), 60000))
    is_token(value(b, "SELECT redlock_acquire('xe:fence', 3000)"))
    check(value(a, "SELECT redlock_extend('xe', 60000)") > 0, "xe extended")
    check(0 < c[0].pttl("xe:fence") <= 3000, "b's lock keeps its TTL: %r" % c[0].pttl("xe:fence"))
    kept = h.connect(env(c), auto_extend=1)
    is_token(value(kept, AM, js("xk"), 3000))
    is_token(value(b, "SELECT redlock_acquire('xk:fence', 1500)"))
    h.wait_until(lambda: lock_rows(kept)[0]["extensions"] >= 1, 5, what="the keeper to extend xk")
    check(c[0].pttl("xk:fence") <= 1500, "b's lock keeps its TTL: %r" % c[0].pttl("xk:fence"))
    for con in (a, b, kept):
        value(con, "SELECT redlock_release_all()")
    odd = h.connect(env(c), key_prefix="p{")
    h.redlock_error(odd, AM, js("t}" + FLOOR), 10000, contains=("its own fencing floor",))
    h.redlock_error(odd, "SELECT redlock_acquire(?, 10000)", "t}" + FLOOR, contains=("its own fencing floor",))


def test_reentrancy_and_tokens_3n():
    c = h.shared_cluster(3)
    con = h.connect(env(c))
    t1 = is_token(value(con, "SELECT redlock_acquire('r:a', 10000)"))
    h.redlock_error(con, AM, js("r:b", "r:a"), 10000,
                    contains=("'r:a' (name 2 of the list) is already listed in redlock_locks",))
    no_key(c, "r:b", "nothing taken for the refused set", settle_cons=(con,))
    t2 = is_token(value(con, AM, js("r:b", "r:c"), 10000))
    # a single acquire of a name of the set counts a hold, as for any lock
    eq(value(con, "SELECT redlock_acquire('r:b', 10000)"), t2, "re-entering one name of the set")
    eq(value(con, RM, js("r:a", "r:b", "r:c")), 3, "one hold of each given back")
    holds(c, "r:b", t2, 10000, "r:b still held (one hold left)", settle_cons=(con,))
    no_key(c, "r:a", "r:a (own token) released in the same call")
    no_key(c, "r:c", "r:c released")
    eq([(r["resource"], r["holds"]) for r in lock_rows(con)], [("r:b", 1)], "r:b left with one hold")
    eq(value(con, RM, js("r:b")), 1, "last hold")
    check(t1 != t2, "separate tokens")
    # release by token from another connection
    t3 = is_token(value(con, AM, js("r:x", "r:y"), 10000))
    other = h.connect(env(c))
    eq(value(other, RMT, js("r:x", "r:y", "r:z"), "f" * 32), 0, "a wrong token releases nothing")
    holds(c, "r:x", t3, 10000, "still held")
    eq(value(other, RMT, js("r:x", "r:y", "r:z"), t3), 2, "release_many with the token, elsewhere")
    no_key(c, "r:y", "released by token", settle_cons=(other,))
    eq(value(con, RM, js("r:x", "r:y")), 0, "the owner's own release finds them gone: 0")
    eq(lock_rows(con), [], "and forgets them")
    # redlock_release(name, token) works on a name of a set
    t4 = is_token(value(con, AM, js("r:p", "r:q"), 10000))
    eq(value(other, "SELECT redlock_release('r:q', ?)", t4), 1, "single release by token")
    holds(c, "r:p", t4, 10000, "r:p untouched", settle_cons=(other,))


def test_auto_extend_every_name_3n():
    """Names taken together share a token; the background thread extends
    each of them, not only the first it finds with that token."""
    c = h.shared_cluster(3)
    con = h.connect(env(c))
    con.execute("SELECT redlock_config('auto_extend', 1)")
    tok = is_token(value(con, AM, js("x:a", "x:b", "x:c"), 600))
    h.wait_until(lambda: min(r["extensions"] for r in lock_rows(con)) >= 3, 6,
                 what="3 extensions of every name: %r" % [(r["resource"], r["extensions"], r["state"])
                                                           for r in lock_rows(con)])
    eq({r["state"] for r in lock_rows(con)}, {"held"}, "all held")
    for k in ("x:a", "x:b", "x:c"):
        holds(c, k, tok, 600, "%s kept alive" % k)
    eq(value(con, RM, js("x:a", "x:b", "x:c")), 3, "all released")


def test_expired_names_count_0_3n():
    c = h.shared_cluster(3)
    con = h.connect(env(c))
    is_token(value(con, AM, js("e:a", "e:b"), 200))
    h.wait_until(lambda: value(con, "SELECT max(validity_ms) FROM redlock_locks") == 0, 3, what="expiry")
    eq(value(con, RM, js("e:a", "e:b")), 0, "expired names are not counted as released")
    eq(lock_rows(con), [], "forgotten")


def test_limits_3n():
    c = h.shared_cluster(3)
    con = h.connect(env(c))
    names = ["k%04d" % i for i in range(1000)]
    tok = is_token(value(con, AM, json.dumps(names), 10000), "1,000 names")
    h.settle(con)
    for nd in c:
        eq(nd.dbsize(), 1002, "1,000 keys, the fencing floor and the connection's holder details on %s" % nd.addr)
    eq(value(con, "SELECT count(DISTINCT token) || ':' || count(*) FROM redlock_locks"), "1:1000", "rows")
    eq(value(con, "SELECT redlock_validity('k0999', ?) > 0", tok), 1, "validity by name and token")
    eq(value(con, RM, json.dumps(names)), 1000, "all released")
    msg = h.redlock_error(con, AM, json.dumps(["n%d" % i for i in range(10001)]), 10000,
                          contains=("more than 10000 names",))
    check("split the set" in msg, msg)
    h.redlock_error(con, AM, json.dumps(["z" * 60000] * 1 + ["y" * 60000 + str(i) for i in range(80)]), 10000,
                    contains=("at most 4194304 can be taken at once",))
    h.redlock_error(con, AM, js("x", FLOOR + "{t}"), 10000, contains=("name 2 of the list", "kept for the keys of "
                                                                          "fencing floors"))
    h.redlock_error(con, "SELECT redlock_acquire(?, 10000)", FLOOR, contains=("kept for the keys of fencing floors",))
    h.settle(con)  # the release_many returned at a quorum: the last node's script may still be on its way
    eq(sum(nd.dbsize() for nd in c), 6, "nothing set by the refused calls (only the floors and the details are left)")


def test_names_read_alike_plain_or_escaped_1n():
    """A plain array of names is read without SQL, any other JSON by
    SQLite's functions: both must give the same names and the same errors."""
    c = h.shared_cluster(1)
    con = h.connect(env(c))
    names = ["caf\u00e9", 'q"uote', "back\\slash", "tab\tin", "\U0001F600", "plain"]
    escaped = json.dumps(names, ensure_ascii=True)
    check("\\u00e9" in escaped and "\\\\" in escaped, "the set is given with escapes: %s" % escaped)
    tok = is_token(value(con, AM, escaped, 10000), "acquire_many with escapes")
    eq(sorted(r["resource"] for r in lock_rows(con)), sorted(names), "names decoded by SQLite's JSON")
    for k in names:
        eq(c[0].get(k), tok, "key %r holds the token" % k)
    # the same names written plainly (raw UTF-8, no escape) are the same locks
    eq(value(con, RM, '["caf\u00e9" ,\n\t"plain"\r]'), 2, "release_many of a plain array finds them")
    eq(value(con, RM, escaped), 4, "the rest by the escaped array")
    eq(lock_rows(con), [], "none left")
    spaced = ' \n[ "s:1" ,\t"s:2",\r\n"s:3" ] \t'
    tok = is_token(value(con, AM, spaced, 10000), "whitespace around every token")
    eq([r["resource"] for r in lock_rows(con)], ["s:1", "s:2", "s:3"], "names of a spaced array")
    eq(value(con, RMT, spaced, tok), 3, "released by token")
    bad = [('["a"] x', "resources_json is not valid JSON"),
           ('["a",]', "resources_json is not valid JSON"),
           ('["a" "b"]', "resources_json is not valid JSON"),
           ('["a\tb"]', "resources_json is not valid JSON"),  # a raw control character in a string
           ('["a"', "resources_json is not valid JSON"),
           ('[["a"]]', "element 1 of resources_json is a JSON array"),
           ('["a", 1]', "element 2 of resources_json is a JSON integer"),
           ('["a", ""]', "element 2 of resources_json is an empty name"),
           ('["a", "b", "a"]', "'a' is in the list twice"),
           ('["a", "\\u0061"]', "'a' is in the list twice")]
    for text, want in bad:
        h.redlock_error(con, AM, text, 10000, what="acquire_many(%r)" % text, contains=(want,))
    for k in ("a", "b"):
        no_key(c, k, "nothing taken by the refused calls")


def test_raw_nul_in_resources_json_is_refused_3n():
    """A resources_json text with a NUL byte in it (possible when a program
    binds text with an explicit length) was read by SQLite's JSON functions
    only up to the NUL: acquire_many took the names before it, returned a
    token, and silently left out the names after it, so the caller believed
    it held names it did not. Such a text must be refused, like a name with
    a NUL in redlock_acquire, and nothing may be set on any node."""
    c = h.shared_cluster(3)
    con = h.connect(env(c))
    text = '["rnul:a"]\x00["rnul:b"]'
    h.redlock_error(con, "SELECT redlock_acquire_many(?, 10000)", text, contains=("NUL",))
    eq(value(con, "SELECT count(*) FROM redlock_locks"), 0, "no name listed after the refusal")
    h.settle(con)
    for k in ("rnul:a", "rnul:b"):
        no_key(c, k, "nothing taken by the refused call")
    # release_many reads its list the same way: the names after the NUL
    # must not be skipped without a word either
    h.redlock_error(con, "SELECT redlock_release_many(?)", text, contains=("NUL",))
    h.redlock_error(con, "SELECT redlock_release_many(?, ?)", text, "0" * 32, contains=("NUL",))


def test_a_table_named_json_each_does_not_change_the_names_1n():
    """A set with escapes (or one to refuse) was read through json_each,
    which any table of that name in a database the connection has open
    hides: with such a file attached, acquire_many of such a set failed
    for every statement, blaming the SQLite build. Names are now decoded
    without a table, so an attached file changes nothing."""
    c = h.shared_cluster(1)
    d = tempfile.mkdtemp(prefix="redlock-jsoneach-")
    path = os.path.join(d, "shadow.db")
    raw = sqlite3.connect(path)
    raw.execute("CREATE TABLE json_each(type, value)")
    raw.execute("INSERT INTO json_each VALUES ('text', 'not-a-name-of-the-set')")
    raw.commit()
    raw.close()
    for mode in ("attached", "main"):
        if mode == "main":
            con = h.connect(env(c), database=path)
        else:
            con = h.connect(env(c))
            con.execute("ATTACH ? AS aux", (path,))
        text = r'["q\"uote", "caf\u00e9", "\ud83d\ude00", "plain"]'
        tok = is_token(value(con, AM, text, 10000), "acquire_many with escapes (%s)" % mode)
        eq(sorted(r["resource"] for r in lock_rows(con)), sorted(['q"uote', "caf\u00e9", "\U0001F600", "plain"]),
           "the names decoded (%s)" % mode)
        eq(value(con, RMT, text, tok), 4, "released (%s)" % mode)
        h.redlock_error(con, AM, '["a", 1]', 10000, contains=("element 2 of resources_json is a JSON integer",))
        h.redlock_error(con, AM, json.dumps(["n%d" % i for i in range(10001)]), 10000,
                        contains=("more than 10000 names",))
        con.close()
    no_key(c, "not-a-name-of-the-set", "the shadowing table's row was never a name")


def test_escaped_names_decode_as_json_says_1n():
    """Names with escapes are decoded by the extension itself now: over
    random sets (every escape JSON has, characters from every UTF-8 length,
    pairs of surrogates), the locks taken must be the names JSON decodes."""
    c = h.shared_cluster(1)
    con = h.connect(env(c))
    rnd = random.Random(1729)
    alphabet = ['"', "\\", "/", "\b", "\f", "\n", "\r", "\t", "\x01", "a", "Z", "7", ":", " ",
                "\u00e9", "\u07ff", "\u0800", "\uffff", "\U0001F600", "\U0010FFFF"]
    for case in range(150):
        names = sorted({"".join(rnd.choice(alphabet) for _ in range(rnd.randint(1, 8))) + str(i)
                        for i in range(rnd.randint(1, 6))})
        text = json.dumps(names, ensure_ascii=rnd.random() < 0.5)
        tok = is_token(value(con, AM, text, 10000), "set %d: %s" % (case, text))
        eq(sorted(r["resource"] for r in lock_rows(con)), names, "set %d decoded: %s" % (case, text))
        eq(value(con, RMT, text, tok), len(names), "set %d released" % case)


def test_counter_not_a_whole_number_is_refused_1n():
    """A fence counter that is not a plain count (INCR would refuse it, Lua
    would read it as a number: inf, -1, 0x10, 1e20; or so large that the
    next number would reach 2^53 - 1, beyond which Lua's numbers are not
    exact) makes the whole set fail before any key is written, as for one
    lock, and leaves the fencing floor as it was, so the other names keep
    their numbers; so does a floor that is not a number. A name and its
    counter key are not one set."""
    c = h.shared_cluster(1)
    con = h.connect(env(c))
    for bad in ("1.5", "abc", "inf", "-1", "0x10", " 7 ", "1e20", "9007199254740991", "9007199254740990", ""):
        c[0].cmd("SET", "wc:b:fence", bad)
        msg = h.redlock_error(con, AM, js("wc:a", "wc:b", "wc:c"), 10000, what="counter %r" % bad,
                              contains=("could not lock 3 names", "fence counter wc:b:fence holds no number a "
                                        "fencing number can still be drawn from"))
        for k in ("wc:a", "wc:b", "wc:c"):
            no_key(c, k, "nothing written when a counter holds %r (%s)" % (bad, msg))
        eq(c[0].get("wc:a:fence"), None, "no counter written when wc:b's holds %r" % bad)
        eq(c[0].get(FLOOR), None, "no floor written when wc:b's counter holds %r" % bad)
    # One name whose numbers ran out stops neither its floor nor the other names.
    is_token(value(con, "SELECT redlock_acquire('wc:e', 10000)"), "another name, alone")
    is_token(value(con, AM, js("wc:f", "wc:g"), 10000), "other names, as a set")
    eq(value(con, "SELECT redlock_release_all()"), 3, "released")
    c[0].cmd("DEL", FLOOR)
    for ty, cmd in (("hash", ("HSET", FLOOR, "x", "1")), ("sorted set", ("ZADD", FLOOR, "1", "x"))):
        c[0].cmd(*cmd)
        h.redlock_error(con, AM, js("wc:a"), 10000, what="a floor that is a %s" % ty,
                        contains=("fencing floor %s holds no number" % FLOOR,))
        h.redlock_error(con, "SELECT redlock_acquire('wc:a', 10000)", what="a single acquire beside a %s floor" % ty,
                        contains=("fencing floor %s holds no number" % FLOOR,))
        eq(c[0].cmd("TYPE", FLOOR), ty.replace("sorted set", "zset"), "the %s is left as it was" % ty)
        no_key(c, "wc:a", "no lock key left beside a %s floor" % ty)
        c[0].cmd("DEL", FLOOR)
    other = h.connect(env(c))
    otok = is_token(value(other, "SELECT redlock_acquire(?, 10000)", "wc:c"), "another connection holds wc:c")
    eq(value(con, AM, js("wc:a", "wc:b", "wc:c"), 10000), None, "a name held elsewhere is the answer before a bad "
       "counter (refused, not an error)")
    eq(value(other, "SELECT redlock_release(?, ?)", "wc:c", otok), 1, "wc:c released")
    c[0].cmd("DEL", "wc:b:fence")
    tok = is_token(value(con, AM, js("wc:a", "wc:b", "wc:c"), 10000), "taken once the counter is gone")
    eq(value(con, RMT, js("wc:a", "wc:b", "wc:c"), tok), 3, "released")
    c[0].cmd("SET", "wc:b:fence", "9007199254740989")
    tok = is_token(value(con, AM, js("wc:a", "wc:b"), 10000), "the largest counter taken")
    eq(value(con, "SELECT redlock_fence('wc:b')"), 9007199254740990, "its fence one more")
    eq(value(con, RMT, js("wc:a", "wc:b"), tok), 2, "released")
    c[0].cmd("DEL", FLOOR)
    h.redlock_error(con, AM, js("wc:d", "wc:d:fence"), 10000, what="a name and its counter",
                    contains=("'wc:d:fence' is the key of the fencing counter of 'wc:d'",))
    for k in ("wc:d", "wc:d:fence"):
        no_key(c, k, "nothing written for a name and its counter key")
    con.execute("SELECT redlock_config('fencing', 0)")
    tok = is_token(value(con, AM, js("wc:d", "wc:d:fence"), 10000), "without fencing they are two names")
    eq(value(con, RMT, js("wc:d", "wc:d:fence"), tok), 2, "both released")


def test_set_taken_in_any_batch_is_all_or_none_1n():
    """Up to 1,000 names one MSETNX looks and sets; above, EXISTS looks 1,000
    at a time first: a name taken in any batch leaves no key of the set."""
    c = h.shared_cluster(1)
    con = h.connect(env(c))
    other = h.connect(env(c))
    for n, held in ((1000, 1), (1000, 1000), (1500, 3), (1500, 1200), (1500, 1500)):
        names = ["big:%d:%04d" % (n, i) for i in range(1, n + 1)]
        blocker = names[held - 1]
        tok = is_token(value(other, "SELECT redlock_acquire(?, 10000)", blocker), "another connection holds " + blocker)
        eq(value(con, AM, json.dumps(names), 10000), None, "%d names, name %d held elsewhere" % (n, held))
        eq(c[0].cmd("EXISTS", *[k for k in names if k != blocker]), 0, "no key of the %d-name set written" % n)
        eq(value(other, "SELECT redlock_release(?, ?)", blocker, tok), 1, "the blocker goes")
        tok = is_token(value(con, AM, json.dumps(names), 10000), "%d names once none is held" % n)
        eq(c[0].cmd("EXISTS", *names), n, "every key set")
        for k in (names[0], names[-1]):
            check(5000 < c[0].pttl(k) <= 10000, "%s has the set's TTL on the node's clock" % k)
        check(6 * DAY_MS < c[0].pttl(FLOOR) <= 7 * DAY_MS, "the fencing floor has fence_ttl_ms")
        eq(value(con, RMT, json.dumps(names), tok), n, "released")


def test_hundreds_of_held_locks_found_by_name_1n():
    """With hundreds of locks held, each call finds its name through the
    session's name index, kept through acquires, releases of any one (the
    last moves into its place), sets released at once, re-entrant holds and
    release_all: every answer must be what the list itself says."""
    c = h.shared_cluster(1)
    con = h.connect(env(c))
    singles = ["hl:s%03d" % i for i in range(150)]
    for k in singles:
        is_token(value(con, "SELECT redlock_acquire(?, 30000)", k), k)
    many = ["hl:m%03d" % i for i in range(150)]
    tok = is_token(value(con, AM, json.dumps(many), 30000), "a set of 150 beside them")
    held = set(singles) | set(many)
    for k in singles[::3] + many[1::4]:  # releases from everywhere in the list
        eq(value(con, "SELECT redlock_release(?)", k), 1, "release " + k)
        held.discard(k)
    eq(value(con, RM, json.dumps(many[2::4] + ["hl:never"])), len(many[2::4]), "release_many finds its names")
    held -= set(many[2::4])
    for k in ["hl:n%03d" % i for i in range(60)]:  # new locks take the places the set's release freed
        is_token(value(con, "SELECT redlock_acquire(?, 30000)", k), k)
        held.add(k)
    for k in singles[1::3]:  # re-entrant: a second hold of a name still held
        eq(value(con, "SELECT redlock_acquire(?, 30000) IS NOT NULL", k), 1, "re-entrant " + k)
    rows = {r["resource"]: r for r in lock_rows(con)}
    check(set(rows) == held, "redlock_locks lists exactly the names still held: extra %r, missing %r"
          % (sorted(set(rows) - held), sorted(held - set(rows))))
    for k in sorted(held & set(many))[::2]:  # names moved in the list by the set's release, released one by one
        eq(value(con, "SELECT redlock_release(?, ?)", k, tok), 1, "release %s after the set's release" % k)
        held.discard(k)
        no_key(c, k, "released")
    listed = [r["resource"] for r in lock_rows(con)]
    check(sorted(listed) == sorted(held), "the list after releases one by one: listed but not held %r, held but "
          "not listed %r" % (sorted(set(listed) - held), sorted(held - set(listed))))
    rows = {r["resource"]: r for r in lock_rows(con)}
    for k in sorted(held):
        check(value(con, "SELECT redlock_validity(?) > 0", k) == 1, "validity of " + k)
        eq(c[0].get(k), rows[k]["token"], "key %s holds the token listed" % k)
    for k in sorted((set(singles) | set(many)) - held) + ["hl:never"]:
        eq(value(con, "SELECT redlock_validity(?)", k), None, "validity 0 for %s, not held" % k)
    eq(value(con, "SELECT redlock_release(?)", singles[1]), 1, "one of two holds of %s" % singles[1])
    check(c[0].get(singles[1]) is not None, "the name stays held after one of two releases")
    is_token(value(con, "SELECT redlock_acquire(?, 30000)", singles[0]), "a released name taken again")
    held.add(singles[0])
    eq(value(con, "SELECT count(*) FROM redlock_locks"), len(held), "rows after taking one again")
    eq(value(con, "SELECT redlock_release_all()"), len(held), "release_all gives back every name once")
    eq(lock_rows(con), [], "nothing listed")
    for k in sorted(held):
        no_key(c, k, "released by release_all")
    check(tok, "token")


def test_shell_json_group_array_3n():
    c = h.shared_cluster(3)
    out = sh("CREATE TABLE jobs(name TEXT);\n"
             "INSERT INTO jobs VALUES ('s:1'), ('s:2'), ('s:3');\n"
             "SELECT length(redlock_acquire_many((SELECT json_group_array(name) FROM jobs), 10000));\n"
             "SELECT group_concat(resource) || '|' || count(DISTINCT token) FROM redlock_locks;\n"
             "SELECT redlock_release('s:2');\n"
             "SELECT redlock_release_many((SELECT json_group_array(name) FROM jobs));\n"
             "SELECT redlock_release_many('[\"s:1\"]');\n", c, "shell")
    eq(out, ["60", "s:1,s:2,s:3|1", "1", "2", "NULL"], "shell output")
    for k in ("s:1", "s:2", "s:3"):
        no_key(c, k, "released in the shell")


def test_release_many_before_commit_is_refused_3n():
    """As redlock_release: releasing while this connection's writes are not
    committed would let the next holder read the old data."""
    c = h.shared_cluster(3)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "shop.db")
        con = h.connect(env(c), database=path)
        con.execute("CREATE TABLE results(x)")
        tok = is_token(value(con, AM, js("t:a", "t:b"), 60000))
        con.execute("BEGIN")
        con.execute("INSERT INTO results VALUES (1)")
        for args in ((RM, js("t:a", "t:b")), (RMT, js("t:a", "t:b"), tok)):
            msg = h.redlock_error(con, *args, contains=("redlock_release_many() refused", "uncommitted writes",
                                                         "COMMIT first", "release_in_write_txn"))
            check(tok not in msg, "the token is not in the error")
        eq(len(lock_rows(con)), 2, "both names still listed")
        for k in ("t:a", "t:b"):
            holds(c, k, tok, 60000, "%s stays on the nodes" % k, settle_cons=(con,))
        con.execute("COMMIT")
        eq(value(con, RM, js("t:a", "t:b")), 2, "released after COMMIT")
        # the setting allows it, for locks that protect something else
        is_token(value(con, AM, js("t:c", "t:d"), 60000))
        con.execute("SELECT redlock_config('release_in_write_txn', 1)")
        con.execute("BEGIN")
        con.execute("INSERT INTO results VALUES (2)")
        eq(value(con, RM, js("t:c", "t:d")), 2, "released inside the transaction with release_in_write_txn 1")
        con.execute("COMMIT")
        no_key(c, "t:c", "released", settle_cons=(con,))
        con.close()


def test_interrupt_ends_wait_3n():
    """sqlite3_interrupt() ends a waiting acquire_many; nothing of the set is
    left, and the wait had subscribed to the release of the taken name."""
    c = h.shared_cluster(3)
    holder = h.connect(env(c))
    htok = is_token(value(holder, "SELECT redlock_acquire('i:b', 60000)"))
    h.settle(holder)
    con = h.connect(env(c))
    result = {}

    def run():
        try:
            result["rows"] = con.execute(AMW, (js("i:a", "i:b", "i:c"), 10000, 20000)).fetchall()
        except sqlite3.Error as e:
            result["error"] = str(e)
    t = threading.Thread(target=run)
    t.start()
    h.wait_until(lambda: all(n.cmd("PUBSUB", "NUMSUB", "i:b:released")[1] >= 1 for n in c), 5,
                 what="the waiter subscribed to the release of i:b on every node")
    t0 = time.monotonic()
    con.interrupt()
    t.join(10)
    check(not t.is_alive() and time.monotonic() - t0 < 5, "the wait ended after the interrupt")
    check(result.get("error", "").startswith("redlock: interrupted"), "the error says interrupted: %r" % result)
    for k in ("i:a", "i:c"):
        no_key(c, k, "nothing of the set left", settle_cons=(con,))
    holds(c, "i:b", htok, 60000, "the holder's key untouched")


def test_waiting_acquire_many_not_starved_by_shared_holders_3n():
    """Shared workers overlap without a gap (one always holds the name); an
    acquire_many of that name and another, waiting 8 s, must still get in,
    and while it holds them no shared holder is in. A waiting acquire_many
    used to leave no writer-waiting marker, as redlock_acquire does, so a
    stream of overlapping shared holders kept it out for as long as the
    stream lasted."""
    names = json.dumps(["stm:a", "stm:b"])
    h.check_not_starved_by_shared(
        env(h.shared_cluster(3)), "stm:a", lambda x: value(x, "SELECT redlock_acquire_many(?, 5000, 8000)", names),
        lambda x: eq(value(x, "SELECT redlock_release_many(?)", names), 2, "release"), "acquire_many")

def test_release_many_for_a_user_without_pubsub_1n():
    """A user allowed PUBLISH but not PUBSUB (an ACL some services hand
    out): release_many tells the waiters of every name instead of asking
    which names have any, and releases the set all the same."""
    n = h.RedisNode()
    try:
        n.cmd("ACL", "SETUSER", "nopubsub", "on", ">Pub-5ub-pw", "~*", "&*", "+@all", "-pubsub")
        con = h.connect("redis://nopubsub:Pub-5ub-pw@127.0.0.1:%d?timeout_ms=250" % n.port)
        names = json.dumps(["np:a", "np:b", "np:c"])
        tok = is_token(value(con, "SELECT redlock_acquire_many(?, 10000)", names), "token of the set")
        eq(value(con, "SELECT redlock_release_many(?)", names), 3, "names released")
        eq([n.get(k) for k in ("np:a", "np:b", "np:c")], [None] * 3, "the keys after release_many")
        eq(sorted(n.cmd("KEYS", "*")), ["redlock-client:" + tok[:16], "redlock-fence-floor"],
           "only the connection's holder details and the set's fencing floor left")
    finally:
        n.terminate()


def test_release_for_a_user_without_channel_rights_1n():
    """A user with no rights on any channel (Redis 7's default for a new
    ACL user, acl-pubsub-default resetchannels) cannot tell waiters by
    PUBLISH. Release deletes the key before telling them, so it must still
    answer that it released (an adversarial review saw the lock deleted and
    the call fail), and release_many must leave nothing of the set behind."""
    n = h.RedisNode()
    try:
        n.cmd("ACL", "SETUSER", "nochan", "on", ">No-chan-pw", "~*", "resetchannels", "+@all")
        con = h.connect("redis://nochan:No-chan-pw@127.0.0.1:%d?timeout_ms=250" % n.port)
        is_token(value(con, "SELECT redlock_acquire('nc:one', 10000)"), "token")
        eq(value(con, "SELECT redlock_release('nc:one')"), 1, "release of one lock")
        eq(n.get("nc:one"), None, "its key after release")
        is_token(value(con, "SELECT redlock_acquire_shared('nc:sh', 10000)"), "token of a shared hold")
        eq(value(con, "SELECT redlock_release('nc:sh')"), 1, "release of a shared hold")
        eq(n.cmd("EXISTS", "nc:sh"), 0, "the shared lock after its last holder left")
        names = json.dumps(["nc:a", "nc:b", "nc:c"])
        is_token(value(con, "SELECT redlock_acquire_many(?, 10000)", names), "token of the set")
        eq(value(con, "SELECT redlock_release_many(?)", names), 3, "names released")
        eq([n.get(k) for k in ("nc:a", "nc:b", "nc:c")], [None] * 3, "the keys after release_many")
        eq(n.cmd("KEYS", "nc:[abc]*"), [], "nothing of the set after release_many")
    finally:
        n.terminate()



def test_directonly_and_guard():
    c = h.shared_cluster(1)
    con = h.connect(env(c))
    con.execute("CREATE TABLE t(x)")
    con.execute("CREATE VIEW v AS SELECT redlock_acquire_many('[\"g:v\"]', 10000)")
    msg = h.sql_error(con, "SELECT * FROM v")
    check("unsafe use of redlock_acquire_many()" in msg, msg)
    con.execute("CREATE TRIGGER tr AFTER INSERT ON t BEGIN SELECT redlock_release_many('[\"g:v\"]'); END")
    msg = h.sql_error(con, "INSERT INTO t VALUES (1)")
    check("unsafe use of redlock_release_many()" in msg, msg)
    con.execute("DROP TRIGGER tr")
    con.execute("DROP VIEW v")
    con.execute("CREATE TABLE c(x CHECK (redlock_acquire_many('[\"g:c\"]', 10000) IS NOT NULL))")
    h.redlock_error(con, "INSERT INTO c VALUES (1)",
                    contains=("redlock_acquire_many() refused", "table 'c' names it"))
    no_key(c, "g:c", "the CHECK constraint took nothing")


if __name__ == "__main__":
    sys.exit(run_directly(globals()))
