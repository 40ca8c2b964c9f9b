"""Faults, ghost writes: a command sent to a node that cannot run it now
(SIGSTOP, CLIENT PAUSE WRITE, requests delayed in the network) runs when
the node resumes, after the client gave up on it. The release (or the
cleanup of a failed attempt) must reach that node behind it, so the key
does not linger there for the whole TTL.

TTL is 60 s so a lingering key is plain; the key must be gone well within
GONE seconds of the node resuming."""
# SPDX-License-Identifier: BSD-3-Clause

import contextlib
import sqlite3
import threading
import time

import harness as h
from harness import check, eq, is_token, report, value
from faultproxy import FaultProxy

TTL = 60000
GONE = 10.0


def warm(con):
    eq(value(con, "SELECT redlock_release('warm', redlock_acquire('warm', 5000))"), 1,
       "warm-up: every node connected")


def ghost_gone(node, key, what):
    """Waits until the ghost write ran on node (its fence counter, which the
    acquire script increments, exists), then polls until key is not there;
    returns how long that took."""
    t0 = time.monotonic()
    h.wait_until(lambda: node.cmd("EXISTS", key + ":fence") == 1, GONE, interval=0.02,
                 what="%s: the queued acquire to run on %s" % (what, node.addr))
    h.wait_until(lambda: node.cmd("EXISTS", key) == 0, GONE, interval=0.02,
                 what="%s: key %r to disappear from %s (a ghost write left behind)"
                 % (what, key, node.addr))
    return time.monotonic() - t0


def _sigstop_release(delay_release):
    with h.Cluster(3) as c:
        con = h.connect(c, reconnect_min_ms=20, reconnect_max_ms=40)
        warm(con)
        c[0].stop()
        tok = is_token(value(con, "SELECT redlock_acquire('gh', ?)", TTL),
                       "acquire with one node hung")
        if delay_release:
            # another call after the node's deadline marks it down; then let
            # its backoff pass, so the release tries it on a new connection
            time.sleep(0.1)
            eq(value(con, "SELECT redlock_release('other', redlock_acquire('other', 5000))"), 1,
               "another lock meanwhile")
            eq(h.node_rows(con)[0]["state"], "down", "the hung node is known down")
            time.sleep(0.2)
        eq(value(con, "SELECT redlock_release('gh')"), 1, "release with one node hung")
        c[0].cont()
        t = ghost_gone(c[0], "gh", "after SIGCONT")
        for node in c:
            eq(node.cmd("EXISTS", "gh"), 0, "key on %s" % node.addr)
        report("ghost sigstop release%s: gone %.0fms after SIGCONT (token %s)"
               % (" after backoff" if delay_release else "", t * 1000, tok[:8]))


def test_ghost_set_on_hung_node_released_3n():
    _sigstop_release(False)


def test_ghost_set_on_hung_node_released_after_backoff_3n():
    _sigstop_release(True)


def test_ghost_set_after_failed_attempt_3n():
    """The attempt fails (held elsewhere on one node, one node hung): its
    cleanup must reach the hung node behind the SET."""
    with h.Cluster(3) as c:
        con = h.connect(c)
        warm(con)
        c[2].cmd("SET", "gf", "someone-else", "PX", TTL)
        c[0].stop()
        eq(value(con, "SELECT redlock_acquire('gf', ?)", TTL), None, "acquire held elsewhere")
        c[0].cont()
        t = ghost_gone(c[0], "gf", "after SIGCONT")
        h.settle(con)  # a failed attempt's cleanup is sent, not waited for
        eq(c[1].cmd("EXISTS", "gf"), 0, "the yes node was cleaned up")
        eq(c[2].get("gf"), "someone-else", "the holder's key is untouched")
        report("ghost sigstop failed attempt: gone %.0fms after SIGCONT" % (t * 1000))


def test_ghost_set_after_failed_waiting_acquire_3n():
    """Two nodes hung, acquire with wait_ms: every attempt fails; after
    SIGCONT no attempt's key is left anywhere."""
    with h.Cluster(3) as c:
        con = h.connect(c, retry_delay_ms=30, retry_jitter_ms=10,
                        reconnect_min_ms=20, reconnect_max_ms=40)
        warm(con)
        c[0].stop()
        c[1].stop()
        h.redlock_error(con, "SELECT redlock_acquire('gw', ?, 500)", TTL,
                        what="acquire with two of three nodes hung")
        c[0].cont()
        c[1].cont()
        t = max(ghost_gone(node, "gw", "after SIGCONT") for node in c)
        report("ghost sigstop majority, waiting acquire: gone %.0fms after SIGCONT" % (t * 1000))


def test_ghost_set_under_client_pause_write_3n():
    with h.Cluster(3) as c:
        con = h.connect(c)
        warm(con)
        c[0].cmd("CLIENT", "PAUSE", 10000, "WRITE")
        try:
            is_token(value(con, "SELECT redlock_acquire('gp', ?)", TTL), "acquire, one node paused")
            eq(value(con, "SELECT redlock_release('gp')"), 1, "release, one node paused")
        finally:
            c[0].cmd("CLIENT", "UNPAUSE")
        t = ghost_gone(c[0], "gp", "after CLIENT UNPAUSE")
        report("ghost client-pause-write: gone %.0fms after UNPAUSE" % (t * 1000))


def test_ghost_set_delayed_in_network_3n():
    """The SET itself is delayed on its way (proxy delay_requests): it lands
    after the client gave up and released; the release follows it in order."""
    with h.Cluster(3) as c:
        p = FaultProxy(c[0].host, c[0].port)
        try:
            con = h.connect([p.url, c[1].url, c[2].url])
            warm(con)
            p.delay_requests(700)
            is_token(value(con, "SELECT redlock_acquire('gn', ?)", TTL), "acquire, one node slow")
            eq(value(con, "SELECT redlock_release('gn')"), 1, "release, one node slow")
            t = ghost_gone(c[0], "gn", "after the delayed requests arrived")
            report("ghost delayed requests: gone %.0fms after the release returned "
                   "(the SET itself lands 700 ms late)" % (t * 1000))
        finally:
            p.close()


def test_ghost_set_with_later_calls_while_stalled_3n():
    """The SET is held up in the network (proxy delay_requests) and the node
    is marked down; more calls follow (another lock, then the release after
    the node's backoff has passed) before the network lets everything
    through at once. The release must still run after the SET on that node:
    not overtake it on another connection, nor be lost with a connection
    closed behind it. Done a few times, since the server reads two sockets
    in no fixed order."""
    with h.Cluster(3) as c:
        p = FaultProxy(c[0].host, c[0].port)
        try:
            con = h.connect([p.url, c[1].url, c[2].url], reconnect_min_ms=20, reconnect_max_ms=40)
            warm(con)
            times = []
            for i in range(6):
                key = "gc%d" % i
                p.delay_requests(5000)
                is_token(value(con, "SELECT redlock_acquire(?, ?)", key, TTL), "acquire, one node slow")
                time.sleep(0.1)
                eq(value(con, "SELECT redlock_release('other', redlock_acquire('other', 5000))"), 1,
                   "another lock meanwhile")
                eq(h.node_rows(con)[0]["state"], "down", "the slow node is known down")
                time.sleep(0.1)      # its backoff has passed
                eq(value(con, "SELECT redlock_release(?)", key), 1, "release, one node slow")
                p.pass_()            # everything held up is delivered now
                times.append(ghost_gone(c[0], key, "round %d, after the held-up requests were delivered" % i))

                def usable():        # the node is used again before the next round
                    tok = value(con, "SELECT redlock_acquire('probe', 5000)")
                    ok = tok is not None and c[0].get("probe") == tok
                    value(con, "SELECT redlock_release('probe')")
                    return ok
                h.wait_until(usable, 5, interval=0.02, what="the node to be used again")
            for j, node in enumerate(c):     # releases are not waited for: poll
                h.wait_until(lambda: not [k for k in node.keys() if not k.endswith(":fence") and
                                          not k.startswith("redlock-client:")], 2,
                             what="no lock key left on node %d (%r)" % (j, node.keys()))
            report("ghost held-up requests with later calls while stalled: gone %s after delivery"
                   % ", ".join("%.0fms" % (t * 1000) for t in times))
        finally:
            p.close()


@contextlib.contextmanager
def _proxied_cluster(node1_url=None):
    """Three nodes, each behind a fault proxy, and a connection to them
    (node 1 by node1_url(its proxy) when given)."""
    with h.Cluster(3) as c:
        ps = [FaultProxy(n.host, n.port) for n in c]
        try:
            urls = [node1_url(ps[0]) if node1_url else ps[0].url] + [p.url for p in ps[1:]]
            yield c, ps, h.connect(urls, timeout_ms=5000, reconnect_min_ms=20, reconnect_max_ms=40)
        finally:
            for p in ps:
                p.close()


def _failed_attempt(c, ps, con, fault, on_node1=None):
    """A failed attempt on 'gr' whose SET ran on node 1 (on_node1() says
    whether our key is there; by default, in database 0), where
    fault(ps[0]) then strikes while the attempt is still open: the other
    nodes answer late (their replies held up) and no, held by another
    client."""
    on_node1 = on_node1 or (lambda: c[0].cmd("EXISTS", "gr") == 1)
    warm(con)
    for n in c[1:]:
        eq(n.cmd("SET", "gr", "their-token", "NX", "PX", str(TTL)), "OK", "another client holds gr")
    for p in ps:
        p.delay_replies(1500)
    out = {}
    t = threading.Thread(target=lambda: out.update(tok=value(con, "SELECT redlock_acquire('gr', ?)", TTL)))
    t.start()
    h.wait_until(on_node1, GONE, interval=0.005, what="our SET to run on node 1")
    fault(ps[0])
    t.join(GONE)
    eq(out.get("tok", "no answer"), None, "the attempt fails: two nodes are held by another client")
    for p in ps[1:]:
        p.pass_()


def _reset(proxy):
    proxy.reset()
    proxy.pass_()


def _cleaned_up_on_node1(c, con, what):
    """Polls (each poll a redlock_ping, so the node is reconnected) until
    our key is gone from node 1."""
    h.wait_until(lambda: value(con, "SELECT redlock_ping()") is not None and c[0].cmd("EXISTS", "gr") == 0,
                 GONE, interval=0.02, what=what)


def _others_untouched(c):
    for n in c[1:]:
        eq(n.get("gr"), "their-token", "the other client's key on %s untouched" % n.addr)


def test_cleanup_after_a_connection_reset_3n():
    """A failed attempt whose SET ran on a node whose connection was then
    reset cannot send that node its cleanup on the dead connection: the
    node's next connection carries it, so the key does not linger for its
    TTL."""
    with _proxied_cluster() as (c, ps, con):
        _failed_attempt(c, ps, con, _reset)
        _cleaned_up_on_node1(c, con, "our key on node 1 cleaned up over its next connection")
        _others_untouched(c)


def test_cleanup_lost_with_its_connection_is_sent_again_3n():
    """A failed attempt's cleanup sent on a connection that breaks before
    the node answers it (here it never reaches the node: the path goes
    dark, then is reset) is sent again on the node's next connection, so
    the key our SET left there does not linger for its TTL."""
    with _proxied_cluster() as (c, ps, con):
        _failed_attempt(c, ps, con, lambda p: p.blackhole())  # the cleanup never arrives
        eq(c[0].cmd("EXISTS", "gr"), 1, "our key on node 1: its cleanup went into the dark")
        _reset(ps[0])  # our connection to node 1 breaks before it answered the cleanup
        _cleaned_up_on_node1(c, con, "our key on node 1 cleaned up over its next connection")
        _others_untouched(c)


def test_cleanup_kept_for_next_connection_keeps_after_an_update_3n():
    """A cleanup kept for a node's next connection still goes when the
    node's row is updated without moving it (a new timeout_ms), and when
    such an update is undone (the statement failed on another row): it is
    the same server and database."""
    with _proxied_cluster() as (c, ps, con):
        _failed_attempt(c, ps, con, _reset)
        eq(c[0].cmd("EXISTS", "gr"), 1, "our key on node 1 before its next connection")
        h.redlock_error(con, "UPDATE redlock_nodes SET timeout_ms = CASE id WHEN 1 THEN 3000 ELSE -5 END",
                        what="an UPDATE whose second row fails, so the statement is undone")
        con.execute("UPDATE redlock_nodes SET timeout_ms = 4000 WHERE id = 1")
        _cleaned_up_on_node1(c, con, "our key on node 1 cleaned up after the UPDATE")
        _others_untouched(c)


def test_cleanup_after_a_break_in_the_fence_write_back_3n():
    """Node 1 says yes with a fencing number behind node 2's, so the
    number goes back to it in a write-back; its connection breaks there.
    The number is then stored on too few nodes and the lock is given back:
    node 1, whose yes came in the first round, must get the cleanup too,
    over its next connection."""
    with _proxied_cluster() as (c, ps, con):
        warm(con)
        eq(c[1].cmd("SET", "gr:fence", "100"), "OK", "node 2's counter ahead")
        eq(c[2].cmd("SET", "gr", "their-token", "NX", "PX", str(TTL)), "OK", "another client holds gr on node 3")
        ps[0].delay_replies(400)
        out = {}

        def attempt():
            try:
                out["tok"] = value(con, "SELECT redlock_acquire('gr', ?)", TTL)
            except Exception as e:
                out["err"] = str(e)
        t = threading.Thread(target=attempt)
        t.start()
        h.wait_until(lambda: c[0].cmd("GET", "gr:fence") == "101", GONE, interval=0.002,
                     what="the write-back of number 101 to run on node 1")
        _reset(ps[0])
        t.join(GONE)
        check("fencing number 101" in out.get("err", ""), "the call fails: 101 stored on too few nodes: %r" % out)
        _cleaned_up_on_node1(c, con, "our key on node 1 cleaned up over its next connection")
        eq(c[1].cmd("EXISTS", "gr"), 0, "our key on node 2 cleaned up")
        eq(c[2].get("gr"), "their-token", "the other client's key on node 3 untouched")


def test_cleanup_kept_past_a_connection_on_the_wrong_database_3n():
    """Node 1 is database 1 for user alice. After the reset, its next
    connection cannot SELECT 1 (alice lost the right), so it runs on
    database 0, where the cleanup finds nothing: that answer is not the
    cleanup's, which stays owed and goes on the connection after, once
    SELECT works again."""
    def in_db1(node):
        r = h.Resp(node.host, node.port)
        try:
            r.cmd("SELECT", "1")
            return r.cmd("EXISTS", "gr") == 1
        finally:
            r.close()
    with _proxied_cluster(lambda p: "redis://alice:Al1ce-pw@127.0.0.1:%d/1" % p.port) as (c, ps, con):
        c[0].cmd("ACL", "SETUSER", "alice", "on", ">Al1ce-pw", "~*", "&*", "+@all")
        _failed_attempt(c, ps, con, _reset, on_node1=lambda: in_db1(c[0]))
        c[0].cmd("ACL", "SETUSER", "alice", "-select")
        h.wait_until(lambda: value(con, "SELECT redlock_ping()") is not None
                     and "SELECT 1" in _node_error(con, ps[0].port),
                     GONE, interval=0.02, what="node 1's next connection, with SELECT refused")
        check(in_db1(c[0]), "our key in node 1's database 1 after a connection on database 0")
        c[0].cmd("ACL", "SETUSER", "alice", "+select")
        _reset(ps[0])
        h.wait_until(lambda: value(con, "SELECT redlock_ping()") is not None and not in_db1(c[0]),
                     GONE, interval=0.02, what="our key in node 1's database 1 cleaned up")
        _others_untouched(c)


def _answers_busy(node):
    try:
        node.cmd("PING")
    except h.RedisError as e:
        return "BUSY" in str(e)
    return False


def _node_error(con, port):
    return next((r["last_error"] or "") for r in h.node_rows(con) if r["port"] == port)


def test_cleanup_answered_with_an_error_is_sent_again_3n():
    """The cleanup a node owes after a connection reset can be answered
    with an error: here BUSY, from another client's script that runs too
    long (LOADING after a restart is the other common one). It is not
    dropped then: it goes again with the node's next command, so the key
    does not linger for its TTL."""
    with _proxied_cluster() as (c, ps, con):
        _failed_attempt(c, ps, con, _reset)
        eq(c[0].cmd("EXISTS", "gr"), 1, "our key on node 1 before its next connection")
        eq(c[0].cmd("CONFIG", "SET", "lua-time-limit", "10"), "OK", "BUSY after 10 ms of a script")
        spinner = h.Resp(c[0].host, c[0].port, timeout=GONE * 3)
        busy = threading.Thread(target=lambda: _swallow(spinner, "EVAL", "while true do end", "0"))
        busy.start()
        try:
            h.wait_until(lambda: _answers_busy(c[0]), GONE, interval=0.01, what="node 1 to answer BUSY")
            h.wait_until(lambda: value(con, "SELECT redlock_ping()") is not None
                         and "BUSY" in _node_error(con, ps[0].port),
                         GONE, interval=0.02, what="our next connection to node 1, answered BUSY")
        finally:
            c[0].cmd("SCRIPT", "KILL")
            busy.join(GONE)
        eq(c[0].cmd("EXISTS", "gr"), 1, "our key on node 1: its cleanup was answered BUSY")
        _cleaned_up_on_node1(c, con, "our key on node 1 cleaned up by the cleanup sent again")
        _others_untouched(c)


def _swallow(conn, *args):
    try:
        conn.cmd(*args)
    except h.RedisError:
        pass  # the script killed: an error reply


def _release_lost_with_its_connection(release_sql):
    """A release that never reached two nodes, because their connections
    broke under it (the path went dark, then was reset), failed, and left
    the key on those nodes for its whole TTL: nobody could take the lock
    meanwhile. The release now goes again on each node's next connection,
    as a failed attempt's cleanup does."""
    with _proxied_cluster() as (c, ps, con):
        warm(con)
        is_token(value(con, "SELECT redlock_acquire('rl', ?)", TTL))
        h.settle(con)
        for p in ps[:2]:
            p.blackhole()
        out = {}

        def release():
            try:
                out["value"] = value(con, release_sql)
            except sqlite3.Error as e:
                out["error"] = str(e)

        t = threading.Thread(target=release)
        t.start()
        h.wait_until(lambda: c[2].cmd("EXISTS", "rl") == 0, GONE, interval=0.005, what="node 3 ran the release")
        for p in ps[:2]:
            _reset(p)
        t.join(GONE)
        check("error" in out and "could not release" in out["error"], "the release fails on two nodes: %r" % out)
        eq([n.cmd("EXISTS", "rl") for n in c[:2]], [1, 1], "the key on nodes 1 and 2: the release never got there")
        h.wait_until(lambda: value(con, "SELECT redlock_ping()") is not None and
                     [n.cmd("EXISTS", "rl") for n in c[:2]] == [0, 0],
                     GONE, interval=0.02, what="the release sent again over the nodes' next connections")
        other = h.connect(c)
        is_token(value(other, "SELECT redlock_acquire('rl', 10000)"), "another client takes the lock")


def test_release_lost_with_its_connection_is_sent_again_3n():
    _release_lost_with_its_connection("SELECT redlock_release('rl')")


def test_release_many_lost_with_its_connection_is_sent_again_3n():
    _release_lost_with_its_connection("SELECT redlock_release_many('[\"rl\"]')")
