"""Shared locks and holder limits: redlock_acquire_shared against real
redis-server nodes. Shared holders hold a name together; a shared holder and
an exclusive one (ours, or another client's plain SET NX) exclude each other
both ways; max_holders = k admits at most k holders, counted with the quorum
q of the README's table; holders expire on the node's clock; release, extend,
reentrancy, auto-extension, redlock_locks and wake-ups work as for exclusive
locks; a waiting exclusive acquirer is not starved by a stream of shared
holders."""
# SPDX-License-Identifier: BSD-3-Clause

import threading
import time

import harness as h
from harness import check, eq, is_token, value

# not a timing test: a slow node on a loaded machine must not fail it
h.default_config(timeout_ms=h.RELAXED_TIMEOUT_MS)


def q_of(n, k):
    """The README's table: the least q with (k+1)q > kN, at least a majority."""
    if k <= 1:
        return n // 2 + 1
    return max(k * n // (k + 1) + 1, n // 2 + 1)


def members(node, key):
    """Live shared holders' tokens on one node (the '' member is the limit)."""
    if node.cmd("TYPE", key) != "zset":
        return []
    return [m for m in node.cmd("ZRANGE", key, 0, -1) if m]


def subscribed(node, key):
    """Someone listens for releases of key on this node."""
    r = node.cmd("PUBSUB", "NUMSUB", key + ":released")
    return int(r[1]) > 0


def _exclusion_both_ways(n):
    c = h.shared_cluster(n)
    a, b, x = h.connect(c), h.connect(c), h.connect(c)
    ta = is_token(value(a, "SELECT redlock_acquire_shared('sh', 10000)"), "first shared holder")
    tb = is_token(value(b, "SELECT redlock_acquire_shared('sh', 10000)"), "second shared holder")
    check(ta != tb, "each shared holder has its own token")
    h.settle(a, b)  # a call returns at a quorum: the last node's answer may still be on its way
    for node in c:
        eq(sorted(members(node, "sh")), sorted([ta, tb]), "holders on %s" % node.addr)
        check(0 < node.pttl("sh") <= 10000, "the key expires with its last holder on %s" % node.addr)
        # another Redlock client's plain acquire on the same name fails
        eq(node.cmd("SET", "sh", "foreign", "NX", "PX", 10000), None, "foreign SET NX on %s" % node.addr)
    eq(value(x, "SELECT redlock_acquire('sh', 10000)"), None, "exclusive acquire while held shared")
    eq(value(a, "SELECT redlock_release('sh')"), 1, "first holder releases")
    eq(value(x, "SELECT redlock_acquire('sh', 10000)"), None, "exclusive acquire while one shared holder is left")
    eq(value(b, "SELECT redlock_release('sh')"), 1, "last holder releases")
    h.no_key(c, "sh", "after the last shared holder left")
    tx = is_token(value(x, "SELECT redlock_acquire('sh', 10000)"), "exclusive acquire once free")
    eq(value(a, "SELECT redlock_acquire_shared('sh', 10000)"), None, "shared acquire while held exclusively")
    h.holds(c, "sh", tx, 10000, "the exclusive holder's key is untouched by the refused shared acquire")
    eq(value(x, "SELECT redlock_release('sh')"), 1, "exclusive release")
    # a foreign client's plain lock on every node keeps shared holders out too
    for node in c:
        node.cmd("SET", "sh", "foreign", "PX", 10000)
    eq(value(a, "SELECT redlock_acquire_shared('sh', 10000)"), None, "shared acquire over a foreign SET NX lock")
    eq(c.values("sh"), ["foreign"] * n, "the foreign lock is untouched")


h.for_nodes(globals(), _exclusion_both_ways, (1, 3, 5))


def test_our_scripts_leave_other_keys_alone_3n():
    """Release and extend by a token that is not there, on a shared key and on
    keys of other types, return 0 (never an error) and change nothing."""
    c = h.shared_cluster(3)
    a, x = h.connect(c), h.connect(c)
    ta = is_token(value(a, "SELECT redlock_acquire_shared('mix', 10000)"))
    other = "0" * 32
    eq(value(x, "SELECT redlock_release('mix', ?)", other), 0, "release with another token on a shared key")
    eq(value(x, "SELECT redlock_extend('mix', 5000, ?)", other), None, "extend with another token on a shared key")
    eq(value(x, "SELECT redlock_release('mix', ?)", "limit"), 0, "a token that is no holder's")
    h.settle(a, x)
    for node in c:
        eq(members(node, "mix"), [ta], "the holder on %s" % node.addr)
    for node in c:
        node.cmd("HSET", "hkey", "f", "v")
    eq(value(x, "SELECT redlock_release('hkey', ?)", other), 0, "release on a hash key")
    eq(value(x, "SELECT redlock_extend('hkey', 5000, ?)", other), None, "extend on a hash key")
    eq(value(x, "SELECT redlock_acquire_shared('hkey', 5000)"), None, "shared acquire on a hash key")
    eq([node.cmd("HGET", "hkey", "f") for node in c], ["v"] * 3, "the hash is untouched")


def test_a_sorted_set_of_another_kind_is_left_alone_3n():
    """A sorted set under a lock's name that this extension did not write
    (no '' member with a score of -1 or less: a leaderboard, a job queue, a
    lexicographic index) is another program's key: release, extend, a shared
    acquire, an exclusive acquire that waits (the writer-waiting marker) and
    a validity check change nothing in it and report it as not ours."""
    c = h.shared_cluster(3)
    x = h.connect(c)
    other = "0123456789abcdef0123456789abcdef"
    shapes = {
        "words": ["ZADD", "words", 0, "apple", 0, "banana"],        # every score 0
        "board": ["ZADD", "board", 5, "alice", 9, "bob"],           # small scores
        "queue": ["ZADD", "queue", 4102444800000, "job1"],         # far in the future
        "marked": ["ZADD", "marked", 0, "", 7, "x"],               # a '' member of no limit's score
    }
    for node in c:
        for cmd in shapes.values():
            node.cmd(*cmd)
    before = {k: [node.cmd("ZRANGE", k, 0, -1, "WITHSCORES") for node in c] for k in shapes}
    for k in shapes:
        eq(value(x, "SELECT redlock_release(?, ?)", k, other), 0, "release on the sorted set %s" % k)
        eq(value(x, "SELECT redlock_extend(?, 5000, ?)", k, other), None, "extend on the sorted set %s" % k)
        eq(value(x, "SELECT redlock_acquire_shared(?, 5000)", k), None, "shared acquire on the sorted set %s" % k)
        eq(value(x, "SELECT redlock_acquire(?, 5000, 30)", k), None, "waiting acquire on the sorted set %s" % k)
    h.settle(x)
    for k in shapes:
        eq([node.cmd("ZRANGE", k, 0, -1, "WITHSCORES") for node in c], before[k], "the sorted set %s" % k)
        eq([node.pttl(k) for node in c], [-1] * 3, "the sorted set %s keeps no expiry" % k)
        eq([node.cmd("EXISTS", k + ":writer-waiting") for node in c], [0] * 3, "no marker beside %s" % k)
    # redlock_holder shows it as a key held by something else, not as shared holders
    eq(value(x, "SELECT redlock_holder('board')"), '{"ttl_ms":null,"nodes":[1,2,3]}', "redlock_holder of a sorted set")


def test_release_many_gives_back_shared_holds_3n():
    """redlock_release_many does for a shared hold what redlock_release
    does: without a token, the hold this connection has; with one, the
    holder with that token. Its member leaves the sorted set (the key goes
    with the last holder), other holders stay, and an exclusive acquire
    gets in once none is left."""
    c = h.shared_cluster(3)
    a, b, x = h.connect(c), h.connect(c), h.connect(c)
    ta = is_token(value(a, "SELECT redlock_acquire_shared('gpu', 60000, 0, 2)"), "a's shared hold")
    tb = is_token(value(b, "SELECT redlock_acquire_shared('gpu', 60000, 0, 2)"), "b's shared hold")
    is_token(value(a, "SELECT redlock_acquire('cpu', 60000)"), "a's exclusive lock")
    eq(value(a, "SELECT redlock_release_many(json_array('gpu', 'cpu'))"), 2, "a gives back both names")
    eq(value(a, "SELECT count(*) FROM redlock_locks"), 0, "a lists nothing")
    h.settle(a, b)
    for node in c:
        eq(members(node, "gpu"), [tb], "b's hold is left on %s" % node.addr)
    eq(value(x, "SELECT redlock_acquire('gpu', 1000)"), None, "b still holds gpu")
    # by token, from a connection that does not hold it
    eq(value(x, "SELECT redlock_release_many(json_array('gpu'), ?)", tb), 1, "b's hold released by its token")
    eq(value(x, "SELECT redlock_release_many(json_array('gpu'), ?)", ta), 0, "a's token is no holder's any more")
    h.settle(x)
    h.no_key(c, "gpu", "after the last shared holder was released as a set")
    is_token(value(x, "SELECT redlock_acquire('gpu', 1000)"), "an exclusive acquire gets in")


def _holder_limit(n):
    c = h.shared_cluster(n)
    cons = [h.connect(c) for _ in range(4)]
    t1 = is_token(value(cons[0], "SELECT redlock_acquire_shared('lim', 10000, 0, 2)"), "holder 1 of 2")
    is_token(value(cons[1], "SELECT redlock_acquire_shared('lim', 10000, 0, 2)"), "holder 2 of 2")
    eq(value(cons[2], "SELECT redlock_acquire_shared('lim', 10000, 0, 2)"), None, "a third holder with k = 2")
    eq(value(cons[2], "SELECT count(*) FROM redlock_locks"), 0, "the refused connection lists nothing")
    # NULL is no limit, a whole REAL is a whole number (as Node binds numbers)
    h.redlock_error(cons[3], "SELECT redlock_acquire_shared('lim', 10000, 0, NULL)",
                    contains=("max_holders 0 differs from the 2",))
    eq(value(cons[3], "SELECT redlock_acquire_shared('lim', 10000, 0, 2.0)"), None, "k = 2.0 is k = 2: full")
    for node in c:
        check(len(members(node, "lim")) <= 2, "at most 2 holders on %s" % node.addr)
    # a different limit on the same name is an error that says what to change
    h.redlock_error(cons[3], "SELECT redlock_acquire_shared('lim', 10000, 0, 3)",
                    contains=("max_holders 3 differs from the 2",))
    eq(value(cons[0], "SELECT redlock_release('lim', ?)", t1), 1, "holder 1 leaves (by token)")
    is_token(value(cons[2], "SELECT redlock_acquire_shared('lim', 10000, 0, 2)"), "the third gets in once one left")
    eq(value(cons[0], "SELECT kind || '/' || max_holders FROM redlock_locks"), None, "holder 1 lists nothing")
    eq(value(cons[2], "SELECT kind || '/' || max_holders FROM redlock_locks"), "shared/2",
       "redlock_locks row of a limited holder")
    check(value(cons[2], "SELECT nodes FROM redlock_locks") >= q_of(n, 2), "counted on at least q nodes")


h.for_nodes(globals(), _holder_limit, (1, 3, 5))


def _quorum_of_table(n, k, down):
    """With `down` nodes stopped, a k-limited shared acquire succeeds exactly
    when n - down >= q(n, k)."""
    with h.Cluster(n) as c:
        for node in c.nodes[:down]:
            node.stop()
        try:
            con = h.connect(c, retry_delay_ms=10, retry_jitter_ms=5)
            q = q_of(n, k)
            if n - down >= q:
                is_token(value(con, "SELECT redlock_acquire_shared('qt', 10000, 0, ?)", k),
                         "N=%d k=%d with %d down (q=%d)" % (n, k, down, q))
                eq(value(con, "SELECT nodes FROM redlock_locks"), n - down, "yes votes")
            else:
                h.redlock_error(con, "SELECT redlock_acquire_shared('qt', 10000, 0, ?)", k,
                                contains=("the %d votes needed" % q,))
            # the unlimited shared lock needs only a majority
            if n - down >= n // 2 + 1:
                is_token(value(con, "SELECT redlock_acquire_shared('qt_free', 10000)"), "unlimited, majority up")
            con.close()
        finally:
            for node in c.nodes[:down]:
                node.cont()


def test_quorum_table_3n():
    _quorum_of_table(3, 2, 0)
    _quorum_of_table(3, 2, 1)     # q = 3: one node down is too many for k = 2


def test_quorum_table_5n():
    _quorum_of_table(5, 2, 1)     # q = 4
    _quorum_of_table(5, 2, 2)
    _quorum_of_table(5, 4, 1)     # q = 5


def test_quorum_formula():
    """The table printed in the README."""
    table = {(n, k): q_of(n, k) for n in (3, 5, 7) for k in (1, 2, 3, 4)}
    eq([table[3, k] for k in (1, 2, 3, 4)], [2, 3, 3, 3], "N = 3")
    eq([table[5, k] for k in (1, 2, 3, 4)], [3, 4, 4, 5], "N = 5")
    eq([table[7, k] for k in (1, 2, 3, 4)], [4, 5, 6, 6], "N = 7")
    for (n, k), q in table.items():
        check((k + 1) * q > k * n and (q == n // 2 + 1 or (k + 1) * (q - 1) <= k * n),
              "q(%d, %d) = %d is the least that works" % (n, k, q))


def _three_holders_on_two_nodes_each(**config):
    """k = 2 on 3 nodes: holder i is kept off node i, which stand-in holders
    (members written straight into the node, as another client's holders
    would be) fill up while it asks; then the stand-ins go. Returns the
    holders' results. With q = 3 (the table) none gets in; with a majority
    (unsafe_test_quorum = 2) all three do, each on two nodes, so three
    holders of a 2-holder lock hold it at once."""
    c = h.shared_cluster(3)
    far = str(int(time.time() * 1000) + 600000)
    got = []
    for i in range(3):
        node = c[i]
        live = len(members(node, "neg"))
        fill = ["standin%d" % j for j in range(2 - live)]
        for m in fill:
            node.cmd("ZADD", "neg", "-3", "", far, m)
        con = h.connect(c, retry_delay_ms=10, retry_jitter_ms=5, **config)
        try:
            got.append(value(con, "SELECT redlock_acquire_shared('neg', 60000, 0, 2)"))
        except Exception as e:
            check(str(e).startswith("redlock: "), "error: %s" % e)
            got.append(None)
        h.settle(con)  # node i has answered (the call may return at a quorum) before the stand-ins go
        for m in fill:
            node.cmd("ZREM", "neg", m)
    return c, got


def test_majority_quorum_admits_k_plus_one_3n():
    """NEGATIVE: what the table's q is for."""
    c, got = _three_holders_on_two_nodes_each(unsafe_test_quorum=2)
    eq(sum(1 for t in got if t), 3, "with a majority quorum, holders of a k = 2 lock that got in")
    for node in c:
        eq(len(members(node, "neg")), 2, "each node admitted only 2 holders (%s)" % node.addr)


def test_table_quorum_refuses_k_plus_one_3n():
    c, got = _three_holders_on_two_nodes_each()
    eq(got, [None, None, None], "with q = 3, holders kept off one node")


def test_holder_expires_on_node_clock_3n():
    c = h.shared_cluster(3)
    a, b = h.connect(c, auto_extend=0), h.connect(c)
    before = [int(s) * 1000 + int(us) // 1000 for s, us in (node.cmd("TIME") for node in c)]
    ta = is_token(value(a, "SELECT redlock_acquire_shared('clk', 400, 0, 1)"))
    h.settle(a)  # q = 2 of 3: the last node's answer may still be on its way
    after = [int(s) * 1000 + int(us) // 1000 for s, us in (node.cmd("TIME") for node in c)]
    for i, node in enumerate(c):
        score = int(float(node.cmd("ZSCORE", "clk", ta)))
        check(before[i] + 400 <= score <= after[i] + 400,
              "expiry %d on %s is its own clock's now + ttl (%d..%d)" % (score, node.addr, before[i] + 400,
                                                                      after[i] + 400))
    eq(value(b, "SELECT redlock_acquire_shared('clk', 10000, 0, 1)"), None, "k = 1 is full while it lives")
    h.wait_until(lambda: value(b, "SELECT redlock_acquire_shared('clk', 10000, 0, 1)") is not None,
                 timeout=10, what="the expired holder makes room")
    tb = value(b, "SELECT token FROM redlock_locks")
    h.settle(b)
    # b holds a quorum (2 of 3 for k = 1); on a node whose clock kept a's
    # holder a moment longer, b's attempt found it full and was refused
    lists = [members(node, "clk") for node in c]
    check(sum(m == [tb] for m in lists) >= 2, "the new holder alone on a quorum of the nodes: %r" % lists)
    check(all(ta not in m for m in lists), "the expired holder was pruned on every node: %r" % lists)
    eq(value(a, "SELECT redlock_release('clk')"), 0, "the expired holder's release says lost")
    eq(value(a, "SELECT redlock_extend('clk', 1000, ?)", ta), None, "an expired holder is never brought back")


def test_reentrancy_and_kinds_3n():
    c = h.shared_cluster(3)
    a = h.connect(c)
    t1 = is_token(value(a, "SELECT redlock_acquire_shared('re', 10000)"))
    eq(value(a, "SELECT redlock_acquire_shared('re', 10000)"), t1, "again: the same token")
    eq(value(a, "SELECT holds || kind FROM redlock_locks"), "2shared", "two holds, shared")
    h.settle(a)  # a call returns at a quorum: the last node's answer may still be on its way
    for node in c:
        eq(members(node, "re"), [t1], "one member on %s" % node.addr)
    h.redlock_error(a, "SELECT redlock_acquire('re', 10000)", contains=("holds this name shared",))
    h.redlock_error(a, "SELECT redlock_acquire_shared('re', 10000, 0, 3)", contains=("max_holders 0",))
    eq(value(a, "SELECT redlock_release('re')"), 1, "inner release")
    eq(value(a, "SELECT holds FROM redlock_locks"), 1, "one hold left")
    h.settle(a)
    for node in c:
        eq(members(node, "re"), [t1], "still held on %s" % node.addr)
    eq(value(a, "SELECT redlock_release('re')"), 1, "outer release")
    h.no_key(c, "re", "after the last hold")
    tx = is_token(value(a, "SELECT redlock_acquire('re', 10000)"))
    eq(value(a, "SELECT kind FROM redlock_locks"), "exclusive", "kind of an exclusive lock")
    h.redlock_error(a, "SELECT redlock_acquire_shared('re', 10000)", contains=("holds this name exclusively",))
    h.holds(c, "re", tx, 10000, "the exclusive lock is untouched")
    eq(value(a, "SELECT redlock_release_all()"), 1, "release_all counts the lock")


def test_extend_and_auto_extend_3n():
    c = h.shared_cluster(3)
    a = h.connect(c, auto_extend=0)
    ta = is_token(value(a, "SELECT redlock_acquire_shared('ext', 2000, 0, 2)"))
    v = value(a, "SELECT redlock_extend('ext', 30000)")
    check(v is not None and 20000 < v <= 30000, "extend gives the new validity: %r" % v)
    for node in c:
        check(node.pttl("ext") > 20000, "the key lives as long as its holder on %s" % node.addr)
    eq(value(a, "SELECT redlock_release('ext', ?)", ta), 1, "release by token")
    k = h.connect(c, auto_extend=1)
    tk = is_token(value(k, "SELECT redlock_acquire_shared('auto', 900, 0, 2)"))
    h.wait_until(lambda: value(k, "SELECT extensions FROM redlock_locks") >= 3, timeout=15,
                 what="the keeper extends the shared hold")
    eq(value(k, "SELECT state FROM redlock_locks"), "held", "still held")
    for node in c:
        eq(members(node, "auto"), [tk], "the member lives on %s" % node.addr)
    eq(value(k, "SELECT redlock_release('auto')"), 1, "release")


def test_exclusive_waiter_woken_by_last_shared_release_3n():
    """With a retry delay longer than its wait, only the release message can
    let the exclusive waiter in: it must come when the last holder leaves."""
    c = h.shared_cluster(3)
    a, b = h.connect(c), h.connect(c)
    w = h.connect(c, retry_delay_ms=60000, retry_jitter_ms=0)
    is_token(value(a, "SELECT redlock_acquire_shared('wk', 30000)"))
    is_token(value(b, "SELECT redlock_acquire_shared('wk', 30000)"))
    got = {}
    t = threading.Thread(target=lambda: got.update(tok=value(w, "SELECT redlock_acquire('wk', 10000, 20000)")))
    t.start()
    # the waiter has tried, left its marker and listens before the holders go
    h.wait_until(lambda: all(node.cmd("EXISTS", "wk:writer-waiting") for node in c), timeout=10,
                 what="the writer-waiting marker")
    h.wait_until(lambda: all(subscribed(node, "wk") for node in c), timeout=10, what="the waiter subscribed")
    eq(value(a, "SELECT redlock_release('wk')"), 1, "one holder leaves")
    eq(value(b, "SELECT redlock_release('wk')"), 1, "the last holder leaves")
    t.join(30)
    is_token(got.get("tok"), "the exclusive waiter, woken by the last shared release")


def _writer_gets_in_after_waiting(c, take, release, marks):
    """A shared holder keeps the name(s) while a writer waits (its marker
    set on every node); the holder leaves, the writer gets in and gives
    the lock back. Its markers must be gone with it: readers that find no
    waiter are let in at once."""
    reader, w, x = h.connect(c), h.connect(c), h.connect(c)
    for m in marks:
        is_token(value(reader, "SELECT redlock_acquire_shared(?, 30000)", m[:-len(":writer-waiting")]))
    got = {}
    t = threading.Thread(target=lambda: got.update(tok=value(w, take)))
    t.start()
    h.wait_until(lambda: all(node.cmd("EXISTS", m) for node in c for m in marks), timeout=10,
                 what="the writer-waiting markers")
    eq(value(reader, "SELECT redlock_release_all()"), len(marks), "the reader leaves")
    t.join(30)
    is_token(got.get("tok"), "the writer, once the reader left")
    check(value(w, release) >= 1, "the writer gives the lock back")
    h.settle(w)
    eq([node.cmd("EXISTS", m) for node in c for m in marks], [0] * (len(c) * len(marks)),
       "writer-waiting markers left after the writer got in")
    for m in marks:
        is_token(value(x, "SELECT redlock_acquire_shared(?, 30000)", m[:-len(":writer-waiting")]),
                 "a reader with no writer waiting")


def test_writer_that_got_in_takes_its_marker_away_3n():
    _writer_gets_in_after_waiting(h.shared_cluster(3), "SELECT redlock_acquire('cat', 30000, 20000)",
                                  "SELECT redlock_release('cat')", ["cat:writer-waiting"])


def test_set_that_got_in_takes_its_markers_away_3n():
    _writer_gets_in_after_waiting(h.shared_cluster(3),
                                  "SELECT redlock_acquire_many(json_array('dog', 'eel'), 30000, 20000)",
                                  "SELECT redlock_release_many(json_array('dog', 'eel'))",
                                  ["dog:writer-waiting", "eel:writer-waiting"])


def test_marker_of_a_writer_that_gives_up_lasts_no_longer_than_its_wait_3n():
    """A writer with a long retry delay (10 minutes) that waits 300 ms and
    gives up leaves a marker that lives about its wait, not the retry delay:
    readers are let in again soon, with nobody waiting. One that is
    interrupted takes its marker away at once."""
    c = h.shared_cluster(3)
    reader, x = h.connect(c), h.connect(c)
    w = h.connect(c, retry_delay_ms=600000, retry_jitter_ms=0)
    is_token(value(reader, "SELECT redlock_acquire_shared('cw', 30000)"), "a shared holder")
    eq(value(w, "SELECT redlock_acquire('cw', 5000, 300)"), None, "the writer gives up after 300 ms")
    h.settle(w)
    pttls = [node.pttl("cw:writer-waiting") for node in c]
    limit = 300 + 2 * h.RELAXED_TIMEOUT_MS + 100
    check(all(p <= limit for p in pttls), "the marker of a writer that gave up: PTTLs %r (at most %d)" % (pttls, limit))
    # interrupted: the marker goes with the call
    for node in c:
        node.cmd("DEL", "cw:writer-waiting")
    got = {}
    t = threading.Thread(target=lambda: got.update(r=_interrupted(w, "SELECT redlock_acquire('cw', 5000, 60000)")))
    t.start()
    h.wait_until(lambda: all(node.cmd("EXISTS", "cw:writer-waiting") for node in c), timeout=10,
                 what="the waiting writer's marker")
    w.interrupt()
    t.join(30)
    check("interrupted" in str(got.get("r")), "the waiting writer was interrupted: %r" % got.get("r"))
    h.settle(w)
    eq([node.cmd("EXISTS", "cw:writer-waiting") for node in c], [0, 0, 0], "the interrupted writer's marker")
    is_token(value(x, "SELECT redlock_acquire_shared('cw', 30000)"), "a reader, with no writer waiting")


def _interrupted(con, sql):
    try:
        return con.execute(sql).fetchall()
    except Exception as e:  # noqa: BLE001 - the error is what is checked
        return e


def test_shared_waiter_woken_by_exclusive_release_3n():
    c = h.shared_cluster(3)
    x = h.connect(c)
    w = h.connect(c, retry_delay_ms=60000, retry_jitter_ms=0)
    is_token(value(x, "SELECT redlock_acquire('wk2', 30000)"))
    got = {}
    t = threading.Thread(target=lambda: got.update(tok=value(w, "SELECT redlock_acquire_shared('wk2', 10000, 20000)")))
    t.start()
    h.wait_until(lambda: all(subscribed(node, "wk2") for node in c), timeout=10, what="the waiter subscribed")
    eq(value(x, "SELECT redlock_release('wk2')"), 1, "the exclusive holder leaves")
    t.join(30)
    is_token(got.get("tok"), "the shared waiter, woken by the exclusive release")


def test_exclusive_waiter_not_starved_3n():
    """Two shared workers overlap without a gap (one always holds the name);
    an exclusive acquirer waiting 8 s must still get in, and while it holds
    the name no shared holder is in."""
    h.check_not_starved_by_shared(
        h.shared_cluster(3), "st", lambda x: value(x, "SELECT redlock_acquire('st', 5000, 8000)"),
        lambda x: eq(value(x, "SELECT redlock_release('st')"), 1, "exclusive release"), "the exclusive waiter")


def test_shell_shared_and_exclusive_3n():
    c = h.shared_cluster(3)
    rc, out, err = h.shell("SELECT redlock_acquire_shared('shl', 30000, 0, 2) IS NOT NULL;\n"
                           "SELECT redlock_acquire_shared('shl', 30000, 0, 2) IS NOT NULL;\n"
                           "SELECT kind, max_holders, holds FROM redlock_locks;\n"
                           "SELECT redlock_acquire('shl', 30000);\n", c)
    check(rc != 0 and "holds this name shared" in err, "exclusive after shared in one shell: rc=%r err=%r"
          % (rc, err))
    eq(out.split(), ["1", "1", "shared|2|2"], "shell output")
    # the shell has exited: its holds were released at close
    h.no_key(c, "shl", "after the shell exited")
    for _ in range(2):
        is_token(value(h.connect(c), "SELECT redlock_acquire_shared('shl2', 30000, 0, 2)"))
    rc, out, err = h.shell("SELECT redlock_acquire_shared('shl2', 30000, 0, 2) IS NULL;\n"
                           "SELECT redlock_acquire('shl2', 30000) IS NULL;\n"
                           "SELECT redlock_acquire_shared('shl3', 30000, 0, 2) IS NOT NULL;\n", c)
    eq((rc, out.split()), (0, ["1", "1", "1"]), "shell: a third holder of a k = 2 lock, exclusive, a free name")


def test_detach_and_adopt_shared_3n():
    """A shared hold handed across connections: detach gives its token and
    lets go of it here; adopt takes it into another connection as a shared
    hold with its limit, which then extends it with the limit's votes."""
    c = h.shared_cluster(3)
    a, b, other = h.connect(c), h.connect(c), h.connect(c)
    tok = is_token(value(a, "SELECT redlock_acquire_shared('hand', 20000, 0, 2)"))
    is_token(value(other, "SELECT redlock_acquire_shared('hand', 20000, 0, 2)"), "a second holder")
    eq(value(a, "SELECT redlock_detach('hand')"), tok, "detach gives the token")
    eq(value(a, "SELECT count(*) FROM redlock_locks"), 0, "detached: not listed")
    a.close()
    for node in c:
        check(tok in members(node, "hand"), "the detached hold lives on after close on %s" % node.addr)
    v = value(b, "SELECT redlock_adopt('hand', ?)", tok)
    check(v is not None and 0 < v <= 20000, "adopt gives the validity: %r" % v)
    eq(value(b, "SELECT kind || '/' || max_holders || '/' || token FROM redlock_locks"), "shared/2/" + tok,
       "adopted as a shared hold with its limit")
    v = value(b, "SELECT redlock_extend('hand', 30000)")
    check(v is not None and v > 20000, "the adopted hold extends: %r" % v)
    eq(value(h.connect(c), "SELECT redlock_acquire_shared('hand', 20000, 0, 2)"), None, "still full at k = 2")
    eq(value(b, "SELECT redlock_release('hand')"), 1, "the adopted hold is released")
    h.settle(b)  # a release returns at a majority: the last node's answer may still be on its way
    for node in c:
        check(tok not in members(node, "hand"), "released on %s" % node.addr)


def test_adopt_of_a_hold_with_a_far_expiry_keeps_its_kind_3n():
    """A hold whose expiry another writer pushed 2^32 ms ahead (ZADD on the
    key) must still be read as a shared hold with no limit: its time left is
    capped, as an exclusive lock's PTTL is, and not carried into the bits
    that give the limit (adopt read it as max_holders 1, with 3 s left)."""
    c = h.shared_cluster(3)
    a, b = h.connect(c), h.connect(c)
    tok = is_token(value(a, "SELECT redlock_acquire_shared('far', 20000)"))
    eq(value(a, "SELECT redlock_detach('far')"), tok, "detach gives the token")
    h.wait_until(lambda: all(tok in members(n, "far") for n in c), 5, what="the hold on every node")
    for n in c:
        sec, usec = n.cmd("TIME")
        now_ms = int(sec) * 1000 + int(usec) // 1000
        eq(n.cmd("ZADD", "far", "XX", "CH", now_ms + 2 ** 32 + 3000, tok), 1, "expiry pushed on %s" % n.addr)
    v = value(b, "SELECT redlock_adopt('far', ?)", tok)
    check(v is not None and v > 20000, "adopt gives a validity beyond the original TTL: %r" % v)
    eq(value(b, "SELECT kind || '/' || ifnull(max_holders, 'none') FROM redlock_locks"),
       value(h.connect(c), "SELECT 'shared/' || ifnull((SELECT max_holders FROM redlock_locks), 'none')"
                           " FROM (SELECT redlock_acquire_shared('far2', 20000))"),
       "adopted as a shared hold with no limit, as one taken here is listed")
    eq(value(b, "SELECT redlock_release('far')"), 1, "the adopted hold is released")


def test_adopt_of_a_hold_whose_limit_was_rewritten_is_not_stretched_3n():
    """A limit entry that no redlock call writes (a fraction, or beyond the
    largest max_holders), put there by another writer, must not turn into
    days of validity: the hold is not adopted (a limit score of -1.5 ran
    into the bits of the time left, and adopt gave 24.8 days)."""
    c = h.shared_cluster(3)
    a, b = h.connect(c), h.connect(c)
    for score in ("-1.5", str(-3 - 10 ** 7)):
        tok = is_token(value(a, "SELECT redlock_acquire_shared('oddlim', 20000)"))
        eq(value(a, "SELECT redlock_detach('oddlim')"), tok, "detach gives the token")
        h.wait_until(lambda: all(tok in members(n, "oddlim") for n in c), 5, what="the hold on every node")
        for n in c:
            n.cmd("ZADD", "oddlim", score, "")
        eq(value(b, "SELECT redlock_adopt('oddlim', ?)", tok), None, "adopt with a limit score of %s" % score)
        for n in c:
            n.cmd("DEL", "oddlim")


def test_adopt_of_a_limited_hold_needs_the_limits_quorum_3n():
    """A k = 2 hold on 3 nodes counts only on all 3 (q = 3). Once one node
    has lost it, adopt must not take it: on 2 nodes it no longer keeps a
    third holder out."""
    c = h.shared_cluster(3)
    a, b = h.connect(c), h.connect(c)
    tok = is_token(value(a, "SELECT redlock_acquire_shared('lim-adopt', 20000, 0, 2)"))
    eq(value(a, "SELECT redlock_detach('lim-adopt')"), tok, "detach gives the token")
    h.wait_until(lambda: all(tok in members(n, "lim-adopt") for n in c), 5, what="the hold on every node")
    eq(c[2].cmd("ZREM", "lim-adopt", tok), 1, "one node loses the hold")
    eq(value(b, "SELECT redlock_adopt('lim-adopt', ?)", tok), None,
       "a k = 2 hold on 2 of 3 nodes is not adopted")
    eq(value(b, "SELECT count(*) FROM redlock_locks"), 0, "nothing adopted")
