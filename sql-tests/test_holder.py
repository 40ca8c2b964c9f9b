"""redlock_holder(resource): who holds a name on a quorum, from the holder
details written with the lock (same script, same PX), never a token; a lock
of another Redlock client shows only what the nodes know."""
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
    for n in c:
        pk, ph = n.pttl("hd"), n.pttl("hd:holder")
        check(0 < ph <= pk + 5, "details live no longer than the lock on %s (%d vs %d)" % (n.addr, ph, pk))
        check(tok not in (n.get("hd:holder") or ""), "no token in the details key")
    eq(value(a, "SELECT redlock_release('hd')"), 1, "release")
    eq(holder(b, "hd"), None, "free after the release")
    h.settle(a)
    for n in c:
        eq(n.cmd("EXISTS", "hd:holder"), 0, "details deleted with the lock on %s" % n.addr)


def test_extend_carries_details_3n():
    c = h.shared_cluster(3)
    con = h.connect(c)
    is_token(value(con, "SELECT redlock_acquire('hx', 2000)"))
    check(value(con, "SELECT redlock_extend('hx', 60000)") > 2000, "extended")
    h.settle(con)
    for n in c:
        check(n.pttl("hx:holder") > 2000, "details extended with the lock on %s" % n.addr)
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
    is_token(value(con, "SELECT redlock_acquire('ho', 10000)"))
    h.settle(con)
    for n in c:
        eq(n.cmd("EXISTS", "ho:holder"), 0, "no details written on %s" % n.addr)
    eq(sorted(holder(con, "ho").keys()), ["nodes", "ttl_ms"], "only what the nodes know")
    value(con, "SELECT redlock_release('ho')")


def test_forged_details_stay_valid_json_1n():
    """A server may hold anything under the details key: what cannot be
    parsed is left out, what is shown is valid JSON and UTF-8."""
    c = h.shared_cluster(1)
    con = h.connect(c)
    c[0].cmd("SET", "fg", "t", "PX", "30000")
    c[0].cmd("SET", "fg:holder", "redlock1\x1fho\"st\\\x1f12\x1fa\xff\x01pp\x1f99\x1fexclusive", "PX", "30000")
    j = holder(con, "fg")
    eq((j["host"], j["pid"], j["since"]), ("ho\"st\\", 12, 99), "parsed and escaped")
    check("\x01" not in j["app"], "control character cleaned: %r" % j["app"])
    c[0].cmd("SET", "fg:holder", "redlock1\x1fh\x1fnot-a-pid\x1fa\x1f1\x1fexclusive", "PX", "30000")
    eq(sorted(holder(con, "fg").keys()), ["nodes", "ttl_ms"], "unparsable details left out")
    c[0].cmd("DEL", "fg", "fg:holder")


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
        h.settle(a)
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
            eq(len(flat), 4, "two holders' details on %s" % n.addr)
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
            eq(n.cmd("HLEN", "sl:holders"), 1, "expired and released holders pruned from the hash on %s" % n.addr)
        eq(other.value("SELECT redlock_release('sl')"), 1, "b releases")
        eq(holder(w, "sl"), None, "free")
        h.settle(w)
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


def test_acquire_many_writes_details_3n():
    """Each name of redlock_acquire_many gets the same <key>:holder details
    as a single acquisition; release_many deletes them with the keys."""
    c = h.shared_cluster(3)
    con, w = h.connect(c, client_name="batch"), h.connect(c)
    tok = is_token(value(con, "SELECT redlock_acquire_many('[\"m1\",\"m2\"]', 10000)"))
    h.settle(con)
    for name in ("m1", "m2"):
        raw = value(w, "SELECT redlock_holder(?)", name)
        check(tok not in raw, "no token in %r" % raw)
        j = json.loads(raw)
        eq((j["kind"], j["app"], j["pid"]), ("exclusive", "batch", os.getpid()), "details of %s" % name)
    eq(value(con, "SELECT redlock_release_many('[\"m1\",\"m2\"]')"), 2, "both released")
    h.settle(con)
    for n in c:
        eq(n.cmd("EXISTS", "m1:holder", "m2:holder"), 0, "details deleted with the keys on %s" % n.addr)
