"""Node failures: a minority down still locks; a majority down is an error
soon, naming the failing nodes, and leaves nothing behind."""
# SPDX-License-Identifier: BSD-3-Clause

import time

import harness as h
from harness import check, eq, holds, is_token, no_key, node_rows, redlock_error, value

# live nodes that are merely slow on a loaded machine must not count as
# failed; dead ones refuse at once and hung ones cost this timeout
h.default_config(timeout_ms=h.RELAXED_TIMEOUT_MS)

# A generous bound for "soon": every node has a 50 ms timeout by default; this
# only catches hangs and per-node costs far beyond the timeout.
SOON = 5.0


def _minority_killed(n):
    with h.Cluster(n) as c:
        con = h.connect(c)
        dead = c.nodes[:(n - 1) // 2]
        for node in dead:
            node.kill9()
        live = c.nodes[len(dead):]
        tok = is_token(value(con, "SELECT redlock_acquire('mk', 10000)"),
                       "acquire with %d of %d nodes killed" % (len(dead), n))
        holds(live, "mk", tok, 10000, "live nodes")
        v = value(con, "SELECT redlock_extend('mk', 20000)")
        check(isinstance(v, int) and 0 < v <= 20000, "extend with a minority down: %r" % (v,))
        holds(live, "mk", tok, 20000, "live nodes after extend")
        eq(value(con, "SELECT redlock_release('mk')"), 1, "release with a minority down")
        no_key(live, "mk", "after release")
        other = h.connect(c)
        is_token(value(other, "SELECT redlock_acquire('mk', 10000)"),
                 "a second connection with a minority down")


def _majority_killed(n):
    with h.Cluster(n) as c:
        con = h.connect(c)
        dead = c.nodes[:n // 2 + 1]
        for node in dead:
            node.kill9()
        live = c.nodes[len(dead):]
        t0 = time.monotonic()
        msg = redlock_error(con, "SELECT redlock_acquire('mj', 10000)",
                            what="acquire with %d of %d nodes killed" % (len(dead), n),
                            contains=[node.addr for node in dead])
        elapsed = time.monotonic() - t0
        check(elapsed < SOON, "acquire with a majority down took %.1fs (error %r)"
              % (elapsed, msg))
        no_key(live, "mj", "live nodes after the failed acquire", settle_cons=(con,))
        # a second call is also an error, not a hang or a silent NULL
        redlock_error(con, "SELECT redlock_acquire('mj', 10000)", what="second acquire")
        no_key(live, "mj", "live nodes after the second failed acquire", settle_cons=(con,))
        by_port = {r["port"]: r for r in node_rows(con)}
        for node in dead:
            r = by_port[node.port]
            eq(r["state"], "down", "state of killed node %s" % node.addr)
            check(isinstance(r["last_error"], str) and r["last_error"].strip(),
                  "last_error of killed node %s: %r" % (node.addr, r["last_error"]))


h.for_nodes(globals(), _minority_killed, (3, 5))
h.for_nodes(globals(), _majority_killed, (1, 3, 5))


def test_an_error_names_a_few_failing_nodes_and_counts_the_rest():
    """With many nodes down the error stays short: it names the first
    three failing nodes with their reasons, then says how many more failed
    and where their reasons are."""
    urls = ["redis://127.0.0.1:%d" % h.free_port() for _ in range(9)]
    con = h.connect(urls)
    msg = redlock_error(con, "SELECT redlock_acquire('fewnamed', 10000)",
                        contains=["9 of 9 nodes failed", "; and 6 more (see redlock_nodes.last_error)"])
    named = [u[len("redis://"):] for u in urls if u[len("redis://"):] in msg]
    eq(len(named), 3, "nodes named in %r" % msg)
    check(len(msg) < 1000, "the error is %d characters long" % len(msg))
    rows = h.rows(con, "SELECT count(*) FROM redlock_nodes WHERE last_error IS NOT NULL")
    eq(rows, [(9,)], "every node's reason in redlock_nodes.last_error")


def test_majority_hung_3n():
    """SIGSTOPped nodes: connections succeed, replies never come."""
    with h.Cluster(3) as c:
        con = h.connect(c)
        hung = c.nodes[:2]
        for node in hung:
            node.stop()
        t0 = time.monotonic()
        redlock_error(con, "SELECT redlock_acquire('hg', 2000)",
                      what="acquire with 2 of 3 nodes hung",
                      contains=[node.addr for node in hung])
        elapsed = time.monotonic() - t0
        check(elapsed < SOON, "acquire with a majority hung took %.1fs" % elapsed)
        no_key([c[2]], "hg", "live node after the failed acquire", settle_cons=(con,))


def test_minority_hung_3n():
    with h.Cluster(3) as c:
        con = h.connect(c)
        c[0].stop()
        t0 = time.monotonic()
        tok = is_token(value(con, "SELECT redlock_acquire('mh', 10000)"),
                       "acquire with 1 of 3 nodes hung")
        check(time.monotonic() - t0 < SOON, "acquire with a hung node took too long")
        holds(c.nodes[1:], "mh", tok, 10000, "live nodes")
        eq(value(con, "SELECT redlock_release('mh')"), 1, "release with a hung node")
        no_key(c.nodes[1:], "mh", "after release")


def test_release_with_majority_dead_is_error_3n():
    with h.Cluster(3) as c:
        con = h.connect(c)
        is_token(value(con, "SELECT redlock_acquire('rd', 10000)"))
        c[0].kill9()
        c[1].kill9()
        redlock_error(con, "SELECT redlock_release('rd')",
                      what="release with 2 of 3 nodes dead")
        try:
            r = value(con, "SELECT redlock_extend('rd', 10000)")
        except Exception as e:
            r = e
        check(not isinstance(r, int), "extend with a majority dead returned a validity %r" % r)


def test_killed_node_rejoins_after_restart_3n():
    with h.Cluster(3) as c:
        con = h.connect(c, reconnect_min_ms=20, reconnect_max_ms=200)
        c[0].kill9()
        is_token(value(con, "SELECT redlock_acquire('rj0', 10000)"), "with a node dead")
        eq(value(con, "SELECT redlock_release('rj0')"), 1, "release with a node dead")
        c[0].restart()
        i = [0]

        def rejoined():
            i[0] += 1
            name = "rj%d" % i[0]
            tok = is_token(value(con, "SELECT redlock_acquire(?, 10000)", name))
            on_node = c[0].get(name) == tok
            eq(value(con, "SELECT redlock_release(?)", name), 1, "release " + name)
            return on_node
        h.wait_until(rejoined, 15, interval=0.05, what="the restarted node to be used again")
        by_port = {r["port"]: r for r in node_rows(con)}
        eq(by_port[c[0].port]["state"], "up", "state of the restarted node")


def test_error_replies_count_against_3n():
    """A node answering with an error (OOM here) is a vote against."""
    with h.Cluster(3) as c:
        con = h.connect(c)
        c[0].cmd("CONFIG", "SET", "maxmemory", "1")
        c[0].cmd("CONFIG", "SET", "maxmemory-policy", "noeviction")
        tok = is_token(value(con, "SELECT redlock_acquire('oom', 10000)"),
                       "acquire with one node answering OOM")
        holds(c.nodes[1:], "oom", tok, 10000, "the two healthy nodes")
        no_key([c[0]], "oom", "the OOM node", settle_cons=(con,))
        err = {r["port"]: r for r in node_rows(con)}[c[0].port]["last_error"]
        check(isinstance(err, str) and "OOM" in err.upper(),
              "last_error of the OOM node should carry its error reply: %r" % (err,))
        eq(value(con, "SELECT redlock_release('oom')"), 1, "release")
        c[1].cmd("CONFIG", "SET", "maxmemory", "1")
        c[1].cmd("CONFIG", "SET", "maxmemory-policy", "noeviction")
        try:
            r = value(con, "SELECT redlock_acquire('oom2', 10000)")
        except Exception as e:
            r = e
            check(str(e).startswith("redlock: "), "error text: %r" % str(e))
        check(not isinstance(r, str), "acquire with two of three nodes answering OOM "
              "returned a token %r" % (r,))
        no_key([c[2]], "oom2", "the healthy node after the failed acquire", settle_cons=(con,))


def _our_clients(node):
    """Connections to node other than the one asking (CLIENT LIST)."""
    return [l for l in node.cmd("CLIENT", "LIST").splitlines() if "cmd=client|list" not in l]


def test_connections_the_servers_closed_while_idle_are_made_again_3n():
    """Servers close idle connections (Redis's own `timeout`, a managed
    service's idle limit, a NAT or load balancer). The next call sent its
    command on the closed connection, lost every such node's vote, and
    failed: an extend or a release with an error, the keys left for their
    whole TTL. A connection idle for a while is now looked at before it is
    used, and made again in the same round when the server closed it."""
    with h.Cluster(3, extra_args=("--timeout", "1")) as cl:
        con = h.connect(cl)
        tok = is_token(value(con, "SELECT redlock_acquire('idle', 600000)"))
        h.settle(con)
        h.wait_until(lambda: all(not _our_clients(n) for n in cl), timeout=15,
                     what="every server closed the idle connection (timeout 1 s)")
        left = value(con, "SELECT redlock_extend('idle', 600000)")
        check(isinstance(left, int) and left > 500000, "the extend after the servers closed the connections: %r" % left)
        eq([n.get("idle") for n in cl], [tok] * 3, "the lock on every node")
        h.settle(con)
        h.wait_until(lambda: all(not _our_clients(n) for n in cl), timeout=15, what="closed again")
        eq(value(con, "SELECT redlock_release('idle')"), 1, "the release after the servers closed the connections")
        eq([n.get("idle") for n in cl], [None] * 3, "no key left")
        eq([r["state"] for r in node_rows(con)], ["up"] * 3, "no node was marked down")


def test_a_split_vote_waits_for_a_hung_node_no_longer_than_the_ttl_3n():
    """One node says yes, one says no (held by someone else) and the third
    is hung: only the hung node's answer could still make a quorum, so the
    attempt waited for its whole timeout (20 s here). Past the TTL (less
    the drift allowance) no answer can make the lock valid any more: the
    attempt now ends there, as a refusal, and is cleaned up."""
    with h.Cluster(3) as cl:
        con = h.connect(cl, timeout_ms=20000)
        is_token(value(con, "SELECT redlock_acquire('warm', 1000)"), "connected to every node")
        eq(cl[1].cmd("SET", "split", "someone-else", "PX", "60000"), "OK", "node 2 held by another client")
        cl[2].stop()
        try:
            start = time.monotonic()
            eq(value(con, "SELECT redlock_acquire('split', 1000)"), None, "no quorum: refused")
            took = time.monotonic() - start
            check(took < SOON, "the attempt ended %.2f s after it began, not at the hung node's 20 s timeout" % took)
            h.wait_until(lambda: cl[0].cmd("EXISTS", "split") == 0, what="our key on node 1 cleaned up")
            eq(cl[1].get("split"), "someone-else", "the other client's key untouched")
        finally:
            cl[2].cont()


def test_an_attempt_slower_than_its_ttl_says_so_3n():
    """Every node answers, but later than the TTL: no lock can be valid, and
    the error must say so and what to change, whether the attempt waited
    for the answers or gave up at the TTL with them still on their way."""
    from faultproxy import FaultProxy
    with h.Cluster(3) as cl:
        ps = [FaultProxy(n.host, n.port) for n in cl]
        try:
            con = h.connect([p.url for p in ps], timeout_ms=3000)
            is_token(value(con, "SELECT redlock_acquire('warm', 1000)"), "connected to every node")
            for p in ps:
                p.delay_replies(400)
            redlock_error(con, "SELECT redlock_acquire('slow', 100)",
                          contains=("used up the validity of a 100 ms lock", "raise ttl_ms or lower timeout_ms"))
            for p in ps:
                p.pass_()
            h.wait_until(lambda: all(n.cmd("EXISTS", "slow") == 0 for n in cl), what="the attempt cleaned up")
        finally:
            for p in ps:
                p.close()
