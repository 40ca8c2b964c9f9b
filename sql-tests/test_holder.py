"""redlock_holder(resource): who holds a name on a quorum, from the holder
details its token points to (written once per connection, living at least
as long as the connection's locks), never a token; a lock of another
Redlock client shows only what the nodes know."""
# SPDX-License-Identifier: BSD-3-Clause

import json
import os
import socket
import time

import harness as h
from harness import check, eq, is_token, value

h.default_config(timeout_ms=h.RELAXED_TIMEOUT_MS)


def holder(con, res):
    v = value(con, "SELECT redlock_holder(?)", res)
    return None if v is None else json.loads(v)


def _details_key(tok, prefix=""):
    """The key of the holder details a token of ours points to: its
    connection's, named from the id that starts the token."""
    return prefix + "redlock-client:" + tok[:16]


def test_holder_details_and_release_3n():
    c = h.shared_cluster(3)
    a, b = h.connect(c, client_name="nightly"), h.connect(c)
    t0 = int(time.time() * 1000)
    tok = is_token(value(a, "SELECT redlock_acquire('hd', 10000)"))
    t1 = int(time.time() * 1000)
    h.settle(a)
    raw = value(b, "SELECT redlock_holder('hd')")
    check(tok not in raw, "no token in %r" % raw)
    j = json.loads(raw)
    eq((j["host"], j["pid"], j["app"], j["kind"]), (socket.gethostname()[:64], os.getpid(), "nightly", "exclusive"),
       "host, pid, app, kind")
    check(t0 - 5 <= j["since"] <= t1 + 5, "since %r within the call [%d, %d]" % (j["since"], t0, t1))
    check(0 < j["ttl_ms"] <= 10000, "ttl_ms: %r" % j["ttl_ms"])
    eq(sorted(j["nodes"]), [1, 2, 3], "nodes")
    dk = _details_key(tok)
    for n in c:
        pk, pd = n.pttl("hd"), n.pttl(dk)
        check(pd >= pk, "details live at least as long as the lock on %s (%d vs %d)" % (n.addr, pd, pk))
        stored = n.get(dk)
        check(tok[16:] not in stored and "exclusive" not in stored, "only the connection's part in %r" % stored)
        eq(n.keys("*holder*"), [], "no key per lock for its details on %s" % n.addr)
    eq(value(a, "SELECT redlock_release('hd')"), 1, "release")
    eq(holder(b, "hd"), None, "free after the release")
    # the next lock of the same connection points to the same details
    t0 = int(time.time() * 1000)
    tok2 = is_token(value(a, "SELECT redlock_acquire('hd2', 10000)"))
    eq(tok2[:16], tok[:16], "the same connection, the same details")
    j = holder(b, "hd2")
    eq((j["app"], j["kind"]), ("nightly", "exclusive"), "app and kind of the second lock")
    check(j["since"] >= t0 - 5, "since %r is the second lock's, not the first's (%d)" % (j["since"], t0))
    eq(value(a, "SELECT redlock_release('hd2')"), 1, "release")


def test_extend_carries_details_3n():
    c = h.shared_cluster(3)
    con = h.connect(c)
    tok = is_token(value(con, "SELECT redlock_acquire('hx', 2000)"))
    check(value(con, "SELECT redlock_extend('hx', 600000)") > 2000, "extended")
    h.settle(con)
    for n in c:
        check(n.pttl(_details_key(tok)) >= n.pttl("hx") > 60000, "details extended with the lock on %s" % n.addr)
    eq(holder(con, "hx")["app"], "python3", "default client_name: the program's name")
    value(con, "SELECT redlock_release('hx')")


def test_other_clients_lock_and_minority_3n():
    c = h.shared_cluster(3)
    con = h.connect(c)
    for n in c[:2]:
        n.cmd("SET", "other", "their-token", "NX", "PX", "30000")  # as redsync or node-redlock take it
    j = holder(con, "other")
    eq(sorted(j.keys()), ["nodes", "ttl_ms"], "only what the nodes know")
    eq(sorted(j["nodes"]), [1, 2], "nodes")
    check(0 < j["ttl_ms"] <= 30000, "ttl_ms %r" % j["ttl_ms"])
    c[0].cmd("SET", "minor", "x", "PX", "30000")
    eq(holder(con, "minor"), None, "held on one node of three: no one holds it on a quorum")
    c[1].cmd("SET", "split", "x", "PX", "30000")
    c[2].cmd("SET", "split", "y", "PX", "30000")
    eq(holder(con, "split"), None, "two different values: no quorum holds the same lock")
    eq(holder(con, "never"), None, "free")
    for k in ("other", "minor", "split"):
        for n in c:
            n.cmd("DEL", k)


def test_holder_info_off_3n():
    c = h.shared_cluster(3)
    con = h.connect(c, holder_info=0)
    tok = is_token(value(con, "SELECT redlock_acquire('ho', 10000)"))
    h.settle(con)
    for n in c:
        eq(n.cmd("EXISTS", _details_key(tok)), 0, "no details written on %s" % n.addr)
    eq(sorted(holder(con, "ho").keys()), ["nodes", "ttl_ms"], "only what the nodes know")
    value(con, "SELECT redlock_release('ho')")


def test_forged_details_stay_valid_json_1n():
    """A server may hold anything under the details key: what cannot be
    parsed is left out, what is shown is valid JSON and UTF-8."""
    c = h.shared_cluster(1)
    con = h.connect(c)
    tok = "f" * 16 + "0" + "%011x" % 99 + "0" * 32  # a token's shape, pointing to forged details
    dk = _details_key(tok)
    c[0].cmd("SET", "fg", tok, "PX", "30000")
    c[0].cmd("SET", dk, "redlock1\x1fho\"st\\\x1f12\x1fa\xff\x01pp", "PX", "30000")
    j = holder(con, "fg")
    eq((j["host"], j["pid"], j["since"]), ("ho\"st\\", 12, 99), "parsed and escaped")
    check("\x01" not in j["app"], "control character cleaned: %r" % j["app"])
    c[0].cmd("SET", dk, "redlock1\x1fh\x1fnot-a-pid\x1fa", "PX", "30000")
    eq(sorted(holder(con, "fg").keys()), ["nodes", "ttl_ms"], "unparsable details left out")
    c[0].cmd("SET", dk, "redlock1\x1fh\x1f12\x1fa\x1f1\x1fshared", "PX", "30000")
    eq(sorted(holder(con, "fg").keys()), ["nodes", "ttl_ms"], "details of another shape left out")
    c[0].cmd("DEL", "fg", dk)


def test_no_quorum_is_an_error_3n():
    with h.Cluster(3) as cl:
        con = h.connect(cl)
        cl[0].kill9()
        cl[1].kill9()
        h.redlock_error(con, "SELECT redlock_holder('nq')", contains=("could not tell who holds 'nq'", "node 1"))


def test_shared_lock_shows_kind_and_holders_3n():
    c = h.shared_cluster(3)
    a, b, w = h.connect(c), h.connect(c), h.connect(c)
    is_token(value(a, "SELECT redlock_acquire_shared('sh', 10000)"))
    is_token(value(b, "SELECT redlock_acquire_shared('sh', 10000)"))
    h.settle(a, b)
    j = holder(w, "sh")
    eq((j["kind"], j["holders"]), ("shared", 2), "kind and number of holders")
    eq(sorted(j["nodes"]), [1, 2, 3], "nodes")
    check(0 < j["ttl_ms"] <= 10000, "ttl_ms %r" % j["ttl_ms"])
    check("host" not in j, "no per-holder details for shared holds: %r" % j)
    eq(value(a, "SELECT redlock_release('sh')"), 1, "a releases")
    h.settle(a)
    eq(holder(w, "sh")["holders"], 1, "one holder left")
    eq(value(b, "SELECT redlock_release('sh')"), 1, "b releases")
    eq(holder(w, "sh"), None, "free")


def test_shared_holders_listed_3n():
    """Each live shared holder is listed with its own details (from the
    hash <key>:holders, kept by the node's scripts), never with a token;
    a released or expired holder leaves the list."""
    c = h.shared_cluster(3)
    a = h.connect(c, client_name="etl-a", auto_extend=0)
    other = h.SqlProc(c, client_name="etl-b", auto_extend=0)  # another process: another pid
    short = h.connect(c, client_name="etl-short", auto_extend=0)
    w = h.connect(c)
    try:
        t0 = int(time.time() * 1000)
        ta = is_token(value(a, "SELECT redlock_acquire_shared('sl', 10000)"))
        tb = is_token(other.value("SELECT redlock_acquire_shared('sl', 10000)"))
        t1 = int(time.time() * 1000)
        h.settle(a, other)
        raw = value(w, "SELECT redlock_holder('sl')")
        for t in (ta, tb):
            check(t not in raw, "no token in %r" % raw)
        j = json.loads(raw)
        eq((j["kind"], j["holders"]), ("shared", 2), "kind and number of holders")
        got = sorted((e["app"], e["pid"], e["host"]) for e in j["holder_list"])
        eq(got, [("etl-a", os.getpid(), socket.gethostname()[:64]), ("etl-b", other.proc.pid, socket.gethostname()[:64])],
           "both holders with their app names and pids")
        for e in j["holder_list"]:
            check(t0 - 5 <= e["since"] <= t1 + 5, "since %r within [%d, %d]" % (e["since"], t0, t1))
            check(0 < e["ttl_ms"] <= 10000, "ttl_ms %r" % e["ttl_ms"])
            eq(sorted(e.keys()), ["app", "host", "pid", "since", "ttl_ms"], "the details of one holder")
        for n in c:
            eq(n.cmd("SET", "sl", "x", "NX", "PX", "1000"), None, "a foreign SET NX is still refused on %s" % n.addr)
            flat = n.cmd("HGETALL", "sl:holders")
            fields = dict(zip(flat[::2], flat[1::2]))
            eq(fields.pop(""), "redlock1", "the mark of the extension's own details hash on %s" % n.addr)
            eq(len(fields), 2, "two holders' details on %s" % n.addr)
            for t in (ta, tb):
                check(all(t not in x for x in flat), "no token in the hash on %s" % n.addr)
            check(0 < n.pttl("sl:holders") <= n.pttl("sl") + 5, "details live as long as the lock on %s" % n.addr)
        is_token(value(short, "SELECT redlock_acquire_shared('sl', 1500)"))
        h.settle(short)
        apps = lambda: sorted(e["app"] for e in holder(w, "sl")["holder_list"])
        eq(apps(), ["etl-a", "etl-b", "etl-short"], "three holders")
        h.wait_until(lambda: apps() == ["etl-a", "etl-b"], timeout=15, what="the expired holder leaves the list")
        eq(value(a, "SELECT redlock_release('sl')"), 1, "a releases")
        h.settle(a)
        j = holder(w, "sl")
        eq(([e["app"] for e in j["holder_list"]], j["holders"]), (["etl-b"], 1), "the released holder is gone")
        for n in c:
            eq(n.cmd("HLEN", "sl:holders"), 2, "expired and released holders pruned from the hash (one left, and its "
                                              "mark) on %s" % n.addr)
        eq(other.value("SELECT redlock_release('sl')"), 1, "b releases")
        eq(holder(w, "sl"), None, "free")
        h.settle(w, other)
        for n in c:
            eq(n.cmd("EXISTS", "sl", "sl:holders"), 0, "lock and details deleted with the last holder on %s" % n.addr)
    finally:
        other.kill()


def test_shared_holder_info_off_3n():
    c = h.shared_cluster(3)
    con = h.connect(c, holder_info=0)
    is_token(value(con, "SELECT redlock_acquire_shared('so', 10000)"))
    h.settle(con)
    for n in c:
        eq(n.cmd("EXISTS", "so:holders"), 0, "no details written on %s" % n.addr)
    j = holder(con, "so")
    eq((j["kind"], j["holders"], j["holder_list"]), ("shared", 1, []), "counted, not listed")
    value(con, "SELECT redlock_release('so')")


def _details_keys(n):
    return sorted(n.keys("*redlock-client:*"))


def test_acquire_many_details_once_for_the_connection_3n():
    """redlock_acquire_many writes no details per name: every name of the
    set holds the token, which points to the connection's details (no
    token in their name or value), and redlock_holder finds them, with the
    set's acquisition time, for every name."""
    c = h.shared_cluster(3)
    con, w = h.connect(c, client_name="batch"), h.connect(c)
    names = ["m%02d" % i for i in range(40)]
    t0 = int(time.time() * 1000)
    tok = is_token(value(con, "SELECT redlock_acquire_many(?, 10000)", json.dumps(names)))
    t1 = int(time.time() * 1000)
    h.settle(con)
    for name in names:
        raw = value(w, "SELECT redlock_holder(?)", name)
        check(tok[16:] not in raw, "no token in %r" % raw)
        j = json.loads(raw)
        eq((j["kind"], j["app"], j["pid"], sorted(j["nodes"])), ("exclusive", "batch", os.getpid(), [1, 2, 3]),
           "details of %s" % name)
        check(t0 - 5 <= j["since"] <= t1 + 5, "since %r within the call" % j["since"])
    dk = _details_key(tok)
    for n in c:
        eq(_details_keys(n), [dk], "one details key, the connection's, on %s" % n.addr)
        eq(n.dbsize(), len(names) + 2, "the names, their fencing floor and the details on %s" % n.addr)
        check(tok[16:] not in n.get(dk), "no token in the details on %s" % n.addr)
        pk = max(n.pttl(k) for k in names)
        check(n.pttl(dk) >= pk, "details live at least as long as the set on %s (%d vs %d)" % (n.addr, n.pttl(dk), pk))
    eq(holder(w, "m-free"), None, "free")
    eq(value(con, "SELECT redlock_release_many(?)", json.dumps(names)), len(names), "all released")


def test_acquire_many_details_stay_for_the_connection_3n():
    """Releasing names of a set leaves the details to the names still held
    and to the connection's later locks: they are the connection's, under
    its key prefix, and expire on their own within a bounded time once no
    lock needs them. With holder_info off nothing is written."""
    c = h.shared_cluster(3)
    con, w = h.connect(c, client_name="rel", key_prefix="app:"), h.connect(c, key_prefix="app:")
    tok = is_token(value(con, "SELECT redlock_acquire_many(?, 30000)", json.dumps(["r1", "r2", "r3"])))
    h.settle(con)
    for n in c:
        eq(_details_keys(n), [_details_key(tok, "app:")], "the details key carries the key prefix on %s" % n.addr)
    eq(value(con, "SELECT redlock_release_many(?)", json.dumps(["r1", "r2"])), 2, "two of three released")
    eq(holder(w, "r1"), None, "r1 free")
    eq(holder(w, "r3")["app"], "rel", "r3 still shows the details")
    eq(value(con, "SELECT redlock_release('r3')"), 1, "the last name released on its own")
    eq(holder(w, "r3"), None, "r3 free")
    h.settle(con)
    for n in c:
        ttl = n.pttl(_details_key(tok, "app:"))
        check(0 < ttl <= 4 * 30000, "left to expire, within 4 TTLs of the set, on %s (%d ms)" % (n.addr, ttl))
    tok2 = is_token(value(con, "SELECT redlock_acquire('r4', 30000)"))
    eq((tok2[:16], holder(w, "r4")["app"]), (tok[:16], "rel"), "a later lock points to the same details")
    eq(value(con, "SELECT redlock_release('r4')"), 1, "r4 released")
    off = h.connect(c, holder_info=0)
    otok = is_token(value(off, "SELECT redlock_acquire_many(?, 30000)", json.dumps(["o1", "o2"])))
    h.settle(off)
    for n in c:
        eq(n.cmd("EXISTS", _details_key(otok), _details_key(otok, "app:")), 0,
           "holder_info 0: no details on %s" % n.addr)
    eq(sorted(holder(off, "o1").keys()), ["nodes", "ttl_ms"], "only what the nodes know")
    eq(value(off, "SELECT redlock_release_all()"), 2, "released")


def test_adopted_names_show_who_took_them_3n():
    """A set detached here, its connection closed, one name adopted
    elsewhere and the others released by token from there: the adopted
    name still shows the details of the connection that took it (its
    token points to them), and the adopter's extensions keep them alive
    as long as the lock."""
    c = h.shared_cluster(3)
    a, b = h.connect(c, client_name="step1"), h.connect(c, client_name="step2")
    names = ["t1", "t2", "t3", "t4"]
    t0 = int(time.time() * 1000)
    tok = is_token(value(a, "SELECT redlock_acquire_many(?, 30000)", json.dumps(names)))
    for name in names:
        eq(value(a, "SELECT redlock_detach(?)", name), tok, "detached %s" % name)
    a.close()
    check(value(b, "SELECT redlock_adopt('t4', ?)", tok) > 0, "t4 adopted")
    j = holder(b, "t4")
    eq(j["app"], "step1", "the adopted name shows the details of the connection that took it")
    check(t0 - 5 <= j["since"] <= int(time.time() * 1000) + 5, "since: when it was taken (%r)" % j["since"])
    eq(value(b, "SELECT redlock_release_many(?, ?)", json.dumps(names[:2]), tok), 2, "two released by token")
    eq(value(b, "SELECT redlock_release('t3', ?)", tok), 1, "one released by token")
    check(value(b, "SELECT redlock_extend('t4', 600000)") > 30000, "the adopter extends t4 to 10 minutes")
    h.settle(b)
    for n in c:
        check(n.pttl(_details_key(tok)) >= n.pttl("t4") > 500000, "details live as long as t4 on %s" % n.addr)
    eq(holder(b, "t4")["app"], "step1", "t4 still shows them")
    eq(value(b, "SELECT redlock_release('t4')"), 1, "the adopted name released")
    eq(holder(b, "t4"), None, "free")


def test_acquire_many_details_never_shown_for_a_name_taken_since_3n():
    """A name of a set that is gone from the nodes (expired there) and taken
    by someone else shows the new holder, never the set's details, while
    the set's other names still do."""
    c = h.shared_cluster(3)
    a = h.connect(c, client_name="first")
    is_token(value(a, "SELECT redlock_acquire_many(?, 30000)", json.dumps(["x1", "x2", "x3"])))
    h.settle(a)
    for n in c:
        n.cmd("DEL", "x1", "x2")  # as if x1 and x2 had expired on every node
    b_off = h.connect(c, client_name="second", holder_info=0)
    is_token(value(b_off, "SELECT redlock_acquire('x1', 30000)"))
    eq(sorted(holder(b_off, "x1").keys()), ["nodes", "ttl_ms"], "x1 taken without details: none shown")
    b_many = h.connect(c, client_name="third")
    is_token(value(b_many, "SELECT redlock_acquire_many(?, 30000)", json.dumps(["x2"])))
    eq(holder(b_many, "x2")["app"], "third", "x2 shows its new holder's details")
    eq(holder(b_many, "x3")["app"], "first", "x3 still shows the first set's")
    eq(value(b_off, "SELECT redlock_release('x1')"), 1, "x1 released")
    eq(value(b_many, "SELECT redlock_release('x2')"), 1, "x2 released")
    eq(value(a, "SELECT redlock_release('x3')"), 1, "x3 released")


def test_acquire_many_details_follow_extension_3n():
    """Extending one name of a set, alone or in the keeper's batch, makes
    the details live at least as long; after a name expired the others
    still show them."""
    c = h.shared_cluster(3)
    con = h.connect(c, client_name="ext")
    tok = is_token(value(con, "SELECT redlock_acquire_many(?, 2000)", json.dumps(["e1", "e2"])))
    check(value(con, "SELECT redlock_extend('e2', 600000)") > 2000, "e2 extended to 10 minutes")
    h.settle(con)
    for n in c:
        check(n.pttl(_details_key(tok)) >= n.pttl("e2") > 500000, "details extended with e2 on %s" % n.addr)
    h.wait_until(lambda: all(n.cmd("EXISTS", "e1") == 0 for n in c), 10, what="e1 expired")
    eq(holder(con, "e2")["app"], "ext", "e2 still shows the details after e1 expired")
    eq(value(con, "SELECT redlock_release('e2')"), 1, "e2 released")
    eq(holder(con, "e2"), None, "e2 free")
    # the keeper's batched extension keeps them too
    k = h.connect(c, client_name="keep", auto_extend=1)
    tok = is_token(value(k, "SELECT redlock_acquire_many(?, 1500)", json.dumps(["k1", "k2"])))
    h.wait_until(lambda: value(k, "SELECT min(extensions) FROM redlock_locks") >= 3, 15, what="three extensions")
    eq([holder(k, r)["app"] for r in ("k1", "k2")], ["keep", "keep"], "details after the set's first TTL")
    for n in c:
        check(n.pttl(_details_key(tok)) >= max(n.pttl("k1"), n.pttl("k2")), "details alive on %s" % n.addr)
    eq(value(k, "SELECT redlock_release_all()"), 2, "released")
    eq(holder(k, "k1"), None, "free after release_all")
