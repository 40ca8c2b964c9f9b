"""Real partitions (netns.py: nodes and clients in network namespaces of
their own, links taken down and up, packets vanishing with no RST).

- A hand-off with a late extend (issue 36): A holds L (auto-extended, or
  extended by A itself) on 3 nodes; a cut isolates A from node 0 while its
  extend is on its way, so the extend is decided by nodes 1 and 2 and its
  copy to node 0 waits in A's TCP send queue. A detaches L; P2, cut from
  node 2, adopts it and extends it to 60 s on nodes 0 and 1. Then A's link
  heals and its old extend reaches node 0: it must not cut P2's TTL back,
  and no client C may take L while P2's validity lasts.
- A majority cut: extend, release and a waiting acquire return within
  their bounds while the packets vanish, and the client takes the lock
  again after the heal, leaving no key behind.
- A connect made while the link is cut: retried as soon as it heals.
- A minority cut mid-acquire costs no more than the timeout; a majority
  cut longer than the TTL mid-hold is seen as the lock lost.
- A release stalled by a majority cut: after the heal its late answer
  must not be read as the next acquire's, and the node serves the client
  on a new connection.

Needs root (skipped with the reason otherwise); the checker's long
versions are checker_matrix.py's handoff_partitions and partition_mid_*
(`make checker`).
"""
# SPDX-License-Identifier: BSD-3-Clause

import sqlite3
import time

import harness as h
from harness import check, eq, is_token, report
import netns

TTL_MS = 500             # A's lock: the keeper extends it every ~170 ms
LONG_MS = 60000          # P2's extend after the hand-off
TIMEOUT_MS = 100         # per-node timeout of every client here
FAST_RECONNECT = {"reconnect_min_ms": 20, "reconnect_max_ms": 100}
BOUND_S = 1.0            # a call without a wait: ten per-node timeouts (functional, not a benchmark)
A, P2, C = 0, 1, 2       # client namespaces


def extensions(proc, res):
    return proc.value("SELECT coalesce(max(extensions), 0) FROM redlock_locks WHERE resource = ?", res) or 0


def handoff_with_late_extend(via):
    """The issue's sequence; via "keeper" (auto_extend) or "extend" (A's
    own redlock_extend while cut from node 0)."""
    with netns.Net(nodes=3, clients=3) as net:
        a = net.sql_proc(A, timeout_ms=TIMEOUT_MS, auto_extend=int(via == "keeper"), **FAST_RECONNECT)
        p2 = net.sql_proc(P2, timeout_ms=TIMEOUT_MS, **FAST_RECONNECT)
        c = net.sql_proc(C, timeout_ms=TIMEOUT_MS, **FAST_RECONNECT)
        n0, n1, n2 = net.nodes
        tok = is_token(a.value("SELECT redlock_acquire('L', ?)", TTL_MS))
        net.cut(A, 0)
        net.cut(P2, 2)
        # A's extend is decided by nodes 1 and 2; its copy to node 0 waits
        # in A's send queue (the cut holds it back)
        if via == "keeper":
            e0 = extensions(a, "L")
            h.wait_until(lambda: extensions(a, "L") > e0 and net.unsent(A, 0) > 0, 3 * TTL_MS / 1000.0,
                         what="the keeper's extend with node 0 cut off")
        else:
            check(a.value("SELECT redlock_extend('L', ?)", TTL_MS), "A's extend decided by nodes 1 and 2")
            check(net.unsent(A, 0) > 0, "A's extend to node 0 waits in A's send queue")
        eq(a.value("SELECT redlock_detach('L')"), tok, "A detaches L")
        v = p2.value("SELECT redlock_adopt('L', ?)", tok)
        check(v, "P2 adopts L on nodes 0 and 1: %r" % v)
        long_v = p2.value("SELECT redlock_extend('L', ?)", LONG_MS)
        check(long_v and long_v > LONG_MS - 5000, "P2 extends L to 60 s on nodes 0 and 1: %r" % long_v)
        check(min(n0.pttl("L"), n1.pttl("L")) > LONG_MS - 5000, "P2's TTL on nodes 0 and 1")
        net.heal(A, 0)
        # A's old extend reaches node 0 (its send queue drains); the PING
        # returns once node 0 has run what arrived before it
        h.wait_until(lambda: net.unsent(A, 0) == 0, 10, what="A's queued extend to reach node 0")
        n0.cmd("PING")
        h.wait_until(lambda: n2.get("L") is None, 3 * TTL_MS / 1000.0,
                     what="A's last TTL on node 2 (P2 could not reach it) to run out")
        kept = {j: (n.get("L") == tok, n.pttl("L"))
                for j, n in enumerate(net.nodes) if n.get("L") is not None}
        # C tries for as long as A's old TTL could still live on node 0
        t0 = time.monotonic()
        got = c.value("SELECT redlock_acquire('L', ?, ?)", TTL_MS, TTL_MS)
        c_s = time.monotonic() - t0
        left = p2.value("SELECT redlock_validity('L')")
        report("partitions: hand-off via %s: after the heal the nodes holding L have (ours, PTTL ms) %r; "
               "C %s after %.0f ms while P2's validity says %s ms"
               % (via, kept, "took L" if got else "was refused", c_s * 1000, left))
        check(got is None, "two holders: C took L while P2's validity says %s ms (nodes then: %r)"
              % (left, kept))
        eq(sorted(kept), [0, 1], "the nodes that hold L after node 2's copy expired")
        for j, (ours, pttl) in kept.items():
            check(ours and pttl > LONG_MS - 10000,
                  "node %d holds L with P2's long TTL, not cut back by A's late extend: PTTL %d ms"
                  % (j, pttl))
        check(left > LONG_MS - 10000, "P2 still holds L: validity %r" % left)
        eq(p2.value("SELECT redlock_release('L')"), 1, "P2 releases L")
        for x in (a, p2, c):
            x.kill()


def test_handoff_late_keeper_extend_keeps_the_new_owners_ttl():
    handoff_with_late_extend("keeper")


def test_handoff_late_own_extend_keeps_the_new_owners_ttl():
    handoff_with_late_extend("extend")


def timed(fn):
    t0 = time.monotonic()
    try:
        r = fn()
    except sqlite3.OperationalError as e:
        r = e
    return r, time.monotonic() - t0


def test_majority_cut_returns_within_bounds_and_recovers():
    with netns.Net(nodes=3, clients=1) as net:
        p = net.sql_proc(0, timeout_ms=TIMEOUT_MS, **FAST_RECONNECT)
        tok = is_token(p.value("SELECT redlock_acquire('M', 10000)"))
        net.cut(0, [0, 1])
        times = {}
        ext, times["extend"] = timed(lambda: p.value("SELECT redlock_extend('M', 10000)"))
        check(isinstance(ext, sqlite3.OperationalError) and str(ext).startswith("redlock: "),
              "extend with a majority cut off fails with a redlock error: %r" % ext)
        rel, times["release"] = timed(lambda: p.value("SELECT redlock_release('M')"))
        check(not isinstance(rel, Exception) or str(rel).startswith("redlock: "), "release: %r" % rel)
        wait_ms = 300
        acq, times["acquire"] = timed(lambda: p.value("SELECT redlock_acquire('M2', 10000, ?)", wait_ms))
        check(acq is None or isinstance(acq, sqlite3.OperationalError),
              "no lock without a majority: %r" % acq)
        report("partitions: majority cut, timeout_ms %d: %s" % (
            TIMEOUT_MS, ", ".join("%s %.0f ms" % (k, v * 1000) for k, v in times.items())))
        for what, s in times.items():
            bound = BOUND_S + (wait_ms / 1000.0 if what == "acquire" else 0)
            check(s < bound, "%s returned after %.2f s with a majority cut off (bound %.1f s)"
                  % (what, s, bound))
        net.heal()
        t0 = time.monotonic()
        def again():
            try:
                return p.value("SELECT redlock_acquire('M2', 10000)")
            except sqlite3.OperationalError:        # a node not retried yet
                return None
        tok2 = h.wait_until(again, 15, what="an acquire to succeed after the heal")
        report("partitions: majority cut: the lock was taken again %.0f ms after the heal"
               % ((time.monotonic() - t0) * 1000))
        is_token(tok2)
        eq(p.value("SELECT redlock_release('M2')"), 1, "release after the heal")
        # the first lock's key: released by the owed release, or expiring with its TTL (never kept longer)
        for n in net.nodes:
            check(n.get("M") in (None, tok) and n.pttl("M") <= 10000, "node %d: M %r" % (n.index, n.get("M")))
        h.wait_until(lambda: all(n.get("M2") is None for n in net.nodes), 5, what="M2 gone from every node")
        p.kill()


def node_states(p):
    return dict(p.execute("SELECT id, state FROM redlock_nodes"))


def test_connect_during_a_cut_is_retried_at_the_heal():
    """A connection opened while its link is cut never connects: nothing
    of it reached the node, so once its timeout passes there is nothing to
    drain and nothing to wait for. The node must be tried again as soon as
    the link heals (redlock_ping retries a down node at once), not kept
    out until the kernel's next SYN (1 s, 3 s, ... after the connect) or
    the stalled connection's keep time, and the SET queued on it must
    never land after the heal."""
    with netns.Net(nodes=3, clients=1) as net:
        p = net.sql_proc(0, timeout_ms=TIMEOUT_MS, **FAST_RECONNECT)
        net.cut(0, 0)       # before the first call: node 1's connect goes nowhere
        tok = is_token(p.value("SELECT redlock_acquire('L', 5000)"))
        states = node_states(p)       # reads them once the connect's timeout is over
        eq(states, {1: "down", 2: "up", 3: "up"}, "node 1 is down after its connect timed out")
        net.heal()
        eq(p.value("SELECT redlock_ping()"), 3, "nodes answering redlock_ping() right after the heal")
        eq(node_states(p), {1: "up", 2: "up", 3: "up"}, "states after the ping")
        eq(net.nodes[0].get("L"), None, "node 1 got no copy of the SET made while it was cut")
        eq(p.value("SELECT redlock_release('L')"), 1, "release")
        check(all(n.get("L") is None for n in net.nodes), "no key left: %r" % [n.get("L") for n in net.nodes])
        del tok
        p.kill()


def test_minority_cut_mid_acquire_costs_nothing_beyond_the_timeout():
    """Node 1's link is down when the acquire goes out: nodes 2 and 3
    decide it, and no call waits for node 1's packets (a TCP retransmission
    or a SYN comes back after a second or more): the acquire at most one
    timeout_ms, the calls after it nothing while node 1 is known down.
    After the heal, the release queued behind the SET reaches node 1, and
    no key is left."""
    with netns.Net(nodes=3, clients=1) as net:
        p = net.sql_proc(0, timeout_ms=TIMEOUT_MS, **FAST_RECONNECT)
        eq(p.value("SELECT redlock_ping()"), 3, "every node answers before the cut")
        net.cut(0, 0)
        times = {}
        tok, times["acquire"] = timed(lambda: p.value("SELECT redlock_acquire('A', 10000)"))
        is_token(tok, "the lock, taken on nodes 2 and 3")
        eq(p.value("SELECT nodes FROM redlock_locks WHERE resource = 'A'"), 2, "yes votes")
        _, times["settle"] = timed(lambda: node_states(p))      # waits for node 1's deadline
        eq(node_states(p)[1], "down", "node 1 once its timeout passed")
        tok2, times["acquire (node 1 down)"] = timed(lambda: p.value("SELECT redlock_acquire('A2', 10000)"))
        is_token(tok2, "a second lock while node 1 is down")
        rel, times["release"] = timed(lambda: p.value("SELECT redlock_release('A')"))
        eq(rel, 1, "release decided by nodes 2 and 3")
        report("partitions: minority cut mid-acquire, timeout_ms %d: %s" % (
            TIMEOUT_MS, ", ".join("%s %.0f ms" % (k, v * 1000) for k, v in times.items())))
        for what, took in times.items():
            check(took < BOUND_S, "%s took %.2f s with one node of three cut off (timeout_ms %d)"
                  % (what, took, TIMEOUT_MS))
        net.heal()
        h.wait_until(lambda: p.value("SELECT redlock_ping()") == 3, 10, what="node 1 back after the heal")
        eq(p.value("SELECT redlock_release('A2')"), 1, "release of the second lock")
        h.wait_until(lambda: all(n.get(k) is None for n in net.nodes for k in ("A", "A2")), 5,
                     what="no key of A or A2 left on any node")
        p.kill()


def test_cut_longer_than_the_ttl_mid_hold_loses_the_lock():
    """The holder's links to a majority go down mid-hold for longer than
    the TTL: its keeper cannot extend, the lock runs out, and the holder
    sees it lost (redlock_validity NULL, redlock_extend NULL) while still
    cut off. Another client takes the lock after the TTL, and once the
    links heal no key of the holder is left."""
    with netns.Net(nodes=3, clients=2) as net:
        p = net.sql_proc(0, timeout_ms=TIMEOUT_MS, auto_extend=1, **FAST_RECONNECT)
        q = net.sql_proc(1, timeout_ms=TIMEOUT_MS, **FAST_RECONNECT)
        tok = is_token(p.value("SELECT redlock_acquire('H', ?)", TTL_MS))
        h.wait_until(lambda: extensions(p, "H") >= 1, 3, what="a first extension by the keeper")
        net.cut(0, [0, 1])
        h.wait_until(lambda: p.value("SELECT redlock_validity('H')") is None, 4 * TTL_MS / 1000.0,
                     what="the holder to find its lock run out while cut off")
        state = p.value("SELECT state FROM redlock_locks WHERE resource = 'H'")
        check(state in ("lost", "expired"), "redlock_locks says the lock is gone: %r" % state)
        eq(p.value("SELECT redlock_extend('H', ?)", TTL_MS), None, "extend of the lost lock")
        tq = h.wait_until(lambda: q.value("SELECT redlock_acquire('H', ?)", 10000), 3 * TTL_MS / 1000.0,
                          what="another client to take the lock after its TTL")
        net.heal()
        eq(p.value("SELECT redlock_validity('H')"), None, "still lost after the heal")
        eq(p.value("SELECT redlock_extend('H', ?)", TTL_MS), None, "extend after the heal")
        eq(q.value("SELECT redlock_release('H')"), 1, "the other client releases")
        h.wait_until(lambda: all(n.get("H") is None for n in net.nodes), 2 * TTL_MS / 1000.0 + 2,
                     what="no key of H left after the heal")
        del tok, tq
        for x in (p, q):
            x.kill()


def client_ids(net, i, j):
    """The ids node j lists for client i's connections."""
    host = netns.client_addr(i, j)
    out = set()
    for line in net.nodes[j].cmd("CLIENT", "LIST").splitlines():
        f = dict(x.split("=", 1) for x in line.split() if "=" in x)
        if f.get("addr", "").rsplit(":", 1)[0] == host:
            out.add(int(f["id"]))
    return out


def test_stalled_connection_is_not_reused_after_the_heal():
    """P releases A while cut from a majority: the release times out there
    and its connections stall, with the release still in their send
    queues. Q holds B. The links heal and P at once asks for B: the
    release's late answer (1, deleted) must never be read as the answer to
    it, whichever reaches P first. P must not get B while Q holds it; P's
    nodes come back once the stalled connections have delivered what they
    owe, on new connections, and no key of A is left."""
    with netns.Net(nodes=3, clients=2) as net:
        p = net.sql_proc(0, timeout_ms=TIMEOUT_MS, **FAST_RECONNECT)
        q = net.sql_proc(1, timeout_ms=TIMEOUT_MS, **FAST_RECONNECT)
        is_token(p.value("SELECT redlock_acquire('A', 10000)"))
        is_token(q.value("SELECT redlock_acquire('B', 10000)"))
        before = {j: client_ids(net, 0, j) for j in (0, 1)}
        net.cut(0, [0, 1])
        rel, took = timed(lambda: p.value("SELECT redlock_release('A')"))
        check(took < BOUND_S, "release took %.2f s with a majority cut off" % took)
        net.heal()
        got, _ = timed(lambda: p.value("SELECT redlock_acquire('B', 10000)"))
        report("partitions: stalled release: release -> %r after %.0f ms; acquire of B right after the "
               "heal -> %r" % (rel, took * 1000, got))
        check(not isinstance(got, str), "P took B while Q holds it: %r (a late answer read as its own?)" % got)
        h.wait_until(lambda: p.value("SELECT redlock_ping()") == 3, 10, what="P's nodes back after the heal")
        for j in (0, 1):
            h.wait_until(lambda: not (client_ids(net, 0, j) & before[j]), 5,
                         what="node %d to see P's connection from before the cut closed" % (j + 1))
            check(client_ids(net, 0, j), "node %d serves P on a new connection" % (j + 1))
        h.wait_until(lambda: all(n.get("A") is None for n in net.nodes), 5, what="no key of A left")
        eq(p.value("SELECT redlock_acquire('B', 10000)"), None, "B is still Q's")
        eq(q.value("SELECT redlock_release('B')"), 1, "Q releases B")
        for x in (p, q):
            x.kill()


if __name__ == "__main__":
    raise SystemExit(h.run_directly(globals()))
