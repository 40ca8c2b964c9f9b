"""Faults, node sanity: a node that is a replica, the same server listed
twice, and (with restart_guard on) a node that restarted recently must not
give a vote that would make a lock pass. Each test is built so that the
lock WOULD pass if that node's yes counted, and asserts that it does not.
The guard judges every call by its own TTL, also when it is turned on after
connecting, and a server listed twice never votes before it is known to be
one (holes a review found)."""
# SPDX-License-Identifier: BSD-3-Clause

import socket
import threading
import time

import harness as h
from harness import check, eq, is_token, node_rows, report, value
from faultproxy import FaultProxy

GUARD_TTL = 2000      # ms: the largest TTL the guarded connection uses
LONG_TTL = 60000      # ms: the lock the first holder keeps during the restart
SHORT_TTL = 1000      # ms: what the guarded connection used before asking for LONG_TTL


def row_of(con, port, host=None):
    for r in node_rows(con):
        if r["port"] == port and (host is None or r["host"] == host):
            return r
    raise AssertionError("no redlock_nodes row for port %d" % port)


def refused(con, sql, what):
    """sql must be refused with NULL: a quorum answered (the healthy nodes),
    and the answer is no once the flagged node's yes is not counted."""
    r = value(con, sql)
    check(r is None, "%s: expected NULL, got %r" % (what, r))
    return r


def test_writable_replica_does_not_vote_3n():
    """[A, B, R]: R is a replica (made writable, so its SET succeeds) and B
    holds the lock for someone else. A and R saying yes would be a quorum;
    R is a replica, so the answer must be NULL."""
    master = h.RedisNode()
    r = h.RedisNode()
    r.cmd("REPLICAOF", master.host, master.port)
    r.cmd("CONFIG", "SET", "replica-read-only", "no")
    with h.Cluster(2) as c:
        a, b = c.nodes
        con = h.connect([a.url, b.url, r.url])
        b.cmd("SET", "rp", "someone-else", "PX", 60000)
        refused(con, "SELECT redlock_acquire('rp', 10000)",
                "acquire that only a replica's vote could pass")
        row = row_of(con, r.port)
        eq(row["state"], "replica", "state of the replica node")
        check(row["last_error"] and "replica" in row["last_error"],
              "last_error of the replica node: %r" % (row["last_error"],))
        # the failed attempt is cleaned up everywhere it wrote, the replica included
        for node in (a, r):
            h.wait_until(lambda: node.cmd("EXISTS", "rp") == 0, 2,
                         what="the failed attempt's key on %s to be deleted" % node.addr)
        eq(b.get("rp"), "someone-else", "the holder's key is untouched")
        # with B free, A and B make the quorum: the replica is simply not needed
        b.cmd("DEL", "rp")
        is_token(value(con, "SELECT redlock_acquire('rp', 10000)"), "acquire on the two masters")
        eq(value(con, "SELECT redlock_release('rp')"), 1, "release")
        report("sanity replica: state=replica, its yes not counted (acquire refused)")


def _alias_of(node):
    """Another address of the same server: 'localhost' when it resolves to
    127.0.0.1 here, else a pass-through proxy. Returns (url, host, port, proxy)."""
    try:
        first = socket.getaddrinfo("localhost", node.port, type=socket.SOCK_STREAM)[0][4][0]
    except OSError:
        first = None
    if first == "127.0.0.1":
        return "redis://localhost:%d" % node.port, "localhost", node.port, None
    p = FaultProxy(node.host, node.port)
    return p.url, "127.0.0.1", p.port, p


def test_duplicate_does_not_get_two_votes_3n():
    """[A, A-alias, B]: the lock is taken, then lost on B (its key deleted).
    An extend would succeed with two votes from A's server (A and its alias
    both hold the key); it must return NULL: the lock is on one server."""
    with h.Cluster(2) as c:
        a, b = c.nodes
        alias_url, alias_host, alias_port, proxy = _alias_of(a)
        try:
            con = h.connect([a.url, alias_url, b.url])
            tok = is_token(value(con, "SELECT redlock_acquire('dp', 30000)"), "acquire on A and B")
            eq(a.get("dp"), tok, "A holds the lock")
            eq(b.get("dp"), tok, "B holds the lock")
            row = row_of(con, alias_port, alias_host)
            eq(row["state"], "duplicate", "state of the alias row")
            check(row["last_error"] and "same server" in row["last_error"],
                  "last_error of the alias row: %r" % (row["last_error"],))
            b.cmd("DEL", "dp")           # B lost it (e.g. restarted without persistence)
            refused(con, "SELECT redlock_extend('dp', 30000)",
                    "extend of a lock held on one server listed twice")
            # and a fresh acquire cannot count A twice either
            b.cmd("SET", "dp2", "someone-else", "PX", 60000)
            refused(con, "SELECT redlock_acquire('dp2', 30000)",
                    "acquire with B held elsewhere (A listed twice)")
            eq(row_of(con, alias_port, alias_host)["state"], "duplicate", "alias still flagged")
            report("sanity duplicate: alias %s state=duplicate; extend with the lock on A only refused"
                   % alias_url)
        finally:
            if proxy:
                proxy.close()


def test_a_server_listed_twice_answers_through_the_row_that_did_the_work_3n():
    """[A through a proxy that delays requests, A direct, B]: both rows'
    commands run on A, the direct row's first. Its acquire or release did
    the work, and the first row then finds the key taken, or gone. The
    server's one vote is the direct row's yes: every cycle must succeed (it
    failed, or released with 0, when only the first row could speak)."""
    with h.Cluster(2) as c:
        a, b = c.nodes
        slow = FaultProxy(a.host, a.port)
        try:
            con = h.connect([slow.url, a.url, b.url], timeout_ms=2000)
            eq(value(con, "SELECT redlock_ping()"), 3, "the three rows answer")
            eq(row_of(con, a.port, a.host)["state"], "duplicate", "state of the direct row")
            slow.delay_requests(40)  # the first row's commands reach A last
            for i in range(3):
                tok = is_token(value(con, "SELECT redlock_acquire('tw', 10000)"), "acquire %d" % i)
                eq(a.get("tw"), tok, "A holds the lock (cycle %d)" % i)
                eq(b.get("tw"), tok, "B holds the lock (cycle %d)" % i)
                eq(value(con, "SELECT redlock_release('tw')"), 1, "release %d" % i)
                h.wait_until(lambda: a.cmd("EXISTS", "tw") == 0 and b.cmd("EXISTS", "tw") == 0, 2,
                             what="the key gone from A and B after release %d" % i)
            eq(row_of(con, a.port, a.host)["state"], "duplicate", "the direct row is still the duplicate")
            report("sanity twin: the row that did the work speaks for its server (3 cycles)")
        finally:
            slow.close()


class _TwoRowsOfA:
    """A connection listing [A through one proxy, A through another, third].
    skew() makes the second row's commands run on A first while the first
    row's answer is read first: the first proxy delays requests, the second
    replies."""

    def __init__(self, a, third_url, timeout_ms):
        self.late_req = FaultProxy(a.host, a.port)
        self.late_rep = FaultProxy(a.host, a.port)
        try:
            self.con = h.connect([self.late_req.url, self.late_rep.url, third_url], timeout_ms=timeout_ms)
            eq(value(self.con, "SELECT redlock_ping()"), 3, "the three rows answer")
        except BaseException:
            self.close()
            raise

    def skew(self):
        self.late_req.delay_requests(40)
        self.late_rep.delay_replies(200)

    def unskew(self):
        self.late_req.pass_()
        self.late_rep.pass_()

    def close(self):
        self.late_req.close()
        self.late_rep.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def test_a_later_yes_from_a_server_listed_twice_replaces_its_earlier_no_3n():
    """[A, A, B] as _TwoRowsOfA: the second row's acquire runs on A first,
    the first row's then finds the key taken and its no is read first. When
    the second row's yes comes in, it is A's answer: the acquire succeeds,
    with A's vote counted once."""
    with h.Cluster(2) as c:
        a, b = c.nodes
        with _TwoRowsOfA(a, b.url, 3000) as t:
            t.skew()
            tok = is_token(value(t.con, "SELECT redlock_acquire('tl', 10000)"), "acquire")
            eq(a.get("tl"), tok, "A holds the lock")
            eq(b.get("tl"), tok, "B holds the lock")
            t.unskew()
            eq(value(t.con, "SELECT redlock_release('tl')"), 1, "release")
            report("sanity twin: a later yes of the same server replaced its no")


def _in_thread(con, sql, seconds):
    """sql's value or the exception it raised; a call still running after
    `seconds` fails the test (a round that never ends would hang it)."""
    res = {}

    def run():
        try:
            res["v"] = value(con, sql)
        except Exception as e:  # an error is an answer here
            res["v"] = e
    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(seconds)
    check(not th.is_alive(), "%s did not return within %d s" % (sql, seconds))
    return res["v"]


def test_a_replaced_no_leaves_the_round_to_end_3n():
    """As above, with B's connection reset once the lock is held: the server
    listed twice says no, then yes, and B fails. The yes replaces the no,
    and with every node answered the release must end at once, with the
    no-quorum error (it spun, holding the client's lock, when the replaced
    no still looked unanswered)."""
    with h.Cluster(2) as c:
        a, b = c.nodes
        to_b = FaultProxy(b.host, b.port)
        try:
            with _TwoRowsOfA(a, to_b.url, 1000) as t:
                is_token(value(t.con, "SELECT redlock_acquire('tr', 60000)"), "acquire")
                t.skew()
                to_b.reset()
                r = _in_thread(t.con, "SELECT redlock_release('tr')", 10)
                check(isinstance(r, Exception) and "could not be had" in str(r),
                      "release with B reset: expected the no-quorum error, got %r" % (r,))
                to_b.pass_()
                t.unskew()
                is_token(value(t.con, "SELECT redlock_acquire('tr2', 60000)"), "a later acquire")
                eq(value(t.con, "SELECT redlock_release('tr2')"), 1, "a later release")
                report("sanity twin: a replaced no leaves the round to end (%s)" % str(r)[:60])
        finally:
            to_b.close()


def test_release_many_on_a_server_listed_twice_counts_what_either_row_deleted_3n():
    """release_many answers a yes carrying a flag per name, so both rows of
    one server say yes: the row whose script ran second finds the names
    gone. What either row deleted is deleted on the server: both names must
    count as released (it returned 0 when the second row's flags were read
    first)."""
    with h.Cluster(2) as c:
        a, b = c.nodes
        with _TwoRowsOfA(a, b.url, 3000) as t:
            for i in range(3):
                tok = is_token(value(t.con, "SELECT redlock_acquire_many('[\"m1\",\"m2\"]', 10000)"),
                               "acquire_many %d" % i)
                eq((a.get("m1"), a.get("m2")), (tok, tok), "A holds both names (cycle %d)" % i)
                t.skew()
                eq(value(t.con, "SELECT redlock_release_many('[\"m1\",\"m2\"]')"), 2, "release_many %d" % i)
                t.unskew()
                for n in (a, b):
                    eq(n.cmd("EXISTS", "m1", "m2"), 0, "both names gone from %s (cycle %d)" % (n.addr, i))
            report("sanity twin: release_many counts what either row deleted")


def test_a_duplicate_on_another_database_known_late_does_not_speak_for_its_server_3n():
    """[A through a proxy that delays replies, A on database 1, B], fresh:
    the database-1 row answers before A's row is known, so it is not yet
    known as A's duplicate and its no (nothing there on database 1) counts.
    Once A's row is known, that no is about other keys: it must not stand
    against A's yes. A release by token of a lock held on A and B returns 1
    (it returned 0, "not ours")."""
    with h.Cluster(2) as c:
        a, b = c.nodes
        owner = h.connect([a.url, b.url])
        tok = is_token(value(owner, "SELECT redlock_acquire('xd', 60000)"), "acquire on A and B")
        slow = FaultProxy(a.host, a.port)
        try:
            slow.delay_replies(200)
            con = h.connect([slow.url, a.url + "/1", b.url], timeout_ms=3000)
            eq(value(con, "SELECT redlock_release('xd', ?)", tok), 1, "release by token on a fresh connection")
            for n in (a, b):
                eq(n.cmd("EXISTS", "xd"), 0, "the key gone from %s" % n.addr)
            eq(row_of(con, a.port, a.host)["state"], "duplicate", "state of the database-1 row")
            report("sanity twin: a duplicate on another database, known late, does not speak")
        finally:
            slow.close()


def test_a_duplicate_on_another_database_never_decides_before_its_twin_is_known_3n():
    """[A through a proxy that delays replies, A on database 1, B], fresh,
    with A's database 0 holding the name for someone else. The database-1
    row and B say yes at once; the database-1 row may be A's duplicate on
    other keys until A's row is known, so its yes must not decide the
    acquire. Once A's row answers, it is: the acquire is refused (it
    returned a token)."""
    with h.Cluster(2) as c:
        a, b = c.nodes
        a.cmd("SET", "xq", "someone-else", "PX", 60000)
        slow = FaultProxy(a.host, a.port)
        try:
            slow.delay_replies(300)
            con = h.connect([slow.url, a.url + "/1", b.url], timeout_ms=3000)
            eq(value(con, "SELECT redlock_acquire('xq', 10000)"), None, "acquire with A held elsewhere")
            eq(a.get("xq"), "someone-else", "the holder's key is untouched")
            h.wait_until(lambda: b.cmd("EXISTS", "xq") == 0, 2, what="the failed attempt's key on B to go")
            eq(row_of(con, a.port, a.host)["state"], "duplicate", "state of the database-1 row")
            report("sanity twin: a duplicate on another database waits for its twin to be known")
        finally:
            slow.close()


def test_rows_left_after_a_move_are_marked_as_duplicates_again_3n():
    """[A, A through a proxy, A on database 1]: rows 2 and 3 are row 1's
    duplicates. Row 1 is moved to B: row 3 is still row 2's duplicate on
    another database and must stay marked, so its yes (A's database 1 is
    free) cannot stand for A, whose database 0 holds the name for someone
    else (the move left rows 2 and 3 unmarked, and the acquire passed)."""
    with h.Cluster(2) as c:
        a, b = c.nodes
        p1 = FaultProxy(a.host, a.port)
        slow = FaultProxy(a.host, a.port)
        try:
            con = h.connect([p1.url, slow.url, a.url + "/1"], timeout_ms=3000)
            eq(value(con, "SELECT redlock_ping()"), 3, "the three rows answer")
            con.execute("UPDATE redlock_nodes SET host = ?, port = ? WHERE id = 1", (b.host, b.port))
            eq(value(con, "SELECT redlock_ping()"), 3, "the three rows answer after the move")
            eq([r["state"] for r in node_rows(con)], ["up", "up", "duplicate"], "states after the move")
            a.cmd("SET", "xu", "someone-else", "PX", 60000)
            slow.delay_replies(300)
            eq(value(con, "SELECT redlock_acquire('xu', 10000)"), None, "acquire with A held elsewhere")
            eq(a.get("xu"), "someone-else", "the holder's key is untouched")
            report("sanity twin: rows left after a move are marked again")
        finally:
            p1.close()
            slow.close()


def _uptime(node):
    info = node.cmd("INFO", "server")
    for line in info.splitlines():
        if line.startswith("uptime_in_seconds:"):
            return int(line.split(":")[1])
    raise AssertionError("no uptime in INFO")


def test_moved_node_frees_its_duplicate_3n():
    """[A, A-alias, B]: the alias is A's duplicate and does not vote. When
    row 1 is moved to another server C, the alias is no longer anyone's
    duplicate and votes again: with C down, the alias and B still make a
    majority."""
    with h.Cluster(3) as c:
        a, b, other = c.nodes
        alias_url, alias_host, alias_port, proxy = _alias_of(a)
        try:
            con = h.connect([a.url, alias_url, b.url])
            eq(value(con, "SELECT redlock_release('md', redlock_acquire('md', 5000))"), 1, "a cycle on A and B")
            eq(row_of(con, alias_port, alias_host)["state"], "duplicate", "state of the alias row")
            con.execute("UPDATE redlock_nodes SET port = ? WHERE id = 1", (other.port,))
            other.stop()  # row 1's new server hangs: the alias and B must carry the call
            try:
                tok = is_token(value(con, "SELECT redlock_acquire('md', 5000)"), "acquire on the alias and B")
                eq(a.get("md"), tok, "the alias's server holds the lock")
                eq(b.get("md"), tok, "B holds the lock")
                check(row_of(con, alias_port, alias_host)["state"] != "duplicate", "the alias row is no duplicate now")
            finally:
                other.cont()
        finally:
            if proxy:
                proxy.close()


def test_duplicate_never_votes_before_it_is_known_3n():
    """Hole 3: the same server listed twice (db 0 and db 1) with the third
    node dead. One real server can never be a majority of three, so every
    acquire must fail, on every fresh connection, whichever row's INFO comes
    first. Half the connections reach db 0 through a proxy that delays its
    replies by a few ms, so the higher-id row always answers first."""
    s = h.RedisNode()
    p = FaultProxy(s.host, s.port)
    dead = "redis://127.0.0.1:%d" % h.free_port()
    got = []
    try:
        for i in range(200):
            delayed = i % 2 == 0
            if delayed:
                p.delay_replies(3)
            first = p.url if delayed else s.url
            con = h.connect([first, "%s/1" % s.url, dead], timeout_ms=1000)
            r = h.attempt(con, "SELECT redlock_acquire('dup', 10000)")
            if isinstance(r, str):
                got.append((i, "delayed" if delayed else "direct",
                            [x["state"] for x in node_rows(con)]))
            con.close()
            s.cmd("FLUSHALL")
        check(not got, "acquired on one server listed twice in %d of 200 fresh connections: %r"
              % (len(got), got[:5]))
        report("review hole 3: 200 fresh connections, one server listed twice: 0 acquisitions")
    finally:
        p.close()
        s.terminate()


def test_restart_guard_3n():
    """restart_guard = 1: a node killed and restarted on the same port says
    yes again at once, but that yes must not count until its uptime exceeds
    the largest TTL used (GUARD_TTL). B holds the lock elsewhere, so only the
    restarted node's yes could make a quorum with C."""
    with h.Cluster(3) as c:
        a, b, cc = c.nodes
        need = GUARD_TTL // 1000 + 2     # INFO says whole seconds, read with one taken off; plus drift
        h.wait_until(lambda: all(_uptime(x) >= need for x in c), need + 3, interval=0.1,
                     what="nodes older than the guard TTL")
        con = h.connect(c, restart_guard=1, reconnect_min_ms=20, reconnect_max_ms=100)
        eq(value(con, "SELECT redlock_release('rg0', redlock_acquire('rg0', ?))", GUARD_TTL), 1,
           "acquire and release on old-enough nodes with the guard on")
        a.kill9()
        a.restart()
        t_restart = time.monotonic()
        b.cmd("SET", "rg", "someone-else", "PX", 60000)

        def restarting():
            try:
                r = value(con, "SELECT redlock_acquire('rg', ?)", GUARD_TTL)
            except Exception as e:       # the node is still down: no quorum answered
                r = e
            check(not isinstance(r, str), "acquire while the restarted node is guarded or "
                  "down returned %r" % (r,))
            return row_of(con, a.port)["state"] == "restarting"
        h.wait_until(restarting, 5, interval=0.02, what="the restarted node to show 'restarting'")
        row = row_of(con, a.port)
        refused(con, "SELECT redlock_acquire('rg', %d)" % GUARD_TTL,
                "acquire that only the restarted node's yes could pass")
        h.wait_until(lambda: a.cmd("EXISTS", "rg") == 0, 2,
                     what="the guarded node's key to be cleaned up")
        # the control: without the guard the same vote passes
        unguarded = h.connect(c)
        tok = is_token(value(unguarded, "SELECT redlock_acquire('rg', ?)", GUARD_TTL),
                       "control: the same acquire without restart_guard")
        eq(value(unguarded, "SELECT redlock_release('rg', ?)", tok), 1, "control release")
        # the guard ends once the node's uptime passes the TTL
        got = {}

        def counts_again():
            try:
                t = value(con, "SELECT redlock_acquire('rg', ?)", GUARD_TTL)
            except Exception:            # still guarded (a refusal, see above)
                return None
            if t:
                got["t"] = time.monotonic() - t_restart
                eq(value(con, "SELECT redlock_release('rg')"), 1, "release")
            return t
        h.wait_until(counts_again, GUARD_TTL / 1000 + 5, interval=0.1,
                     what="the restarted node's vote to count again")
        check(got["t"] >= GUARD_TTL / 1000 * 0.9,
              "the restarted node's vote counted %.2fs after the restart (guard %d ms)"
              % (got["t"], GUARD_TTL))
        eq(row_of(con, a.port)["state"], "up", "state after the guard")
        report("sanity restart_guard: state=%s, last_error=%r; vote counted again %.2fs after restart "
               "(ttl %d ms)" % (row["state"], row["last_error"], got["t"], GUARD_TTL))


def _warm(con, res="warm"):
    """One short call: every node gets (or keeps) a connection and its INFO is read."""
    h.attempt(con, "SELECT redlock_release(?, redlock_acquire(?, ?))", res, res, SHORT_TTL)


def _restart_scenario(c):
    """Nodes n1, n2, n3. Holder A takes 'rl' for LONG_TTL while n3 is down for
    it (a refusing proxy stands in for n3), so the lock is on n1 and n2. Then
    n2 is killed and restarted without persistence: it forgot the lock.
    Returns (A, the lock's token, the proxy)."""
    n1, n2, n3 = c.nodes
    h.wait_until(lambda: all(_uptime(x) >= SHORT_TTL // 1000 + 2 for x in c), 6, interval=0.1,
                 what="nodes older than the short TTL")
    p3 = FaultProxy(n3.host, n3.port)
    p3.refuse()
    a = h.connect([n1.url, n2.url, p3.url])
    tok = is_token(value(a, "SELECT redlock_acquire('rl', ?)", LONG_TTL), "holder A's acquire")
    eq([n1.get("rl"), n2.get("rl"), n3.get("rl")], [tok, tok, None], "A's lock on the nodes")
    return a, tok, p3


def _restart_n2(c):
    n2 = c.nodes[1]
    n2.kill9()
    n2.restart()
    eq(n2.get("rl"), None, "n2 after its restart without persistence")


def _second_holder_refused(c, b, tok, what):
    """b (restart guard on) asks for 'rl' with LONG_TTL: n1 says no (A's key),
    n3 says yes, and n2 (restarted seconds ago, empty) must not count."""
    n1, n2, n3 = c.nodes
    r = h.attempt(b, "SELECT redlock_acquire('rl', ?)", LONG_TTL)
    vals = [n1.get("rl"), n2.get("rl"), n3.get("rl")]
    check(not isinstance(r, str),
          "%s: a second holder got the lock A holds (token %r, validity %r ms, values on the "
          "nodes %r, A's token %s); n2 restarted %d s ago" %
          (what, r, value(b, "SELECT redlock_validity('rl')"), vals, tok, _uptime(n2)))
    eq(n1.get("rl"), tok, "%s: A's key on n1" % what)
    return r


def test_restart_guard_judges_every_call_by_its_ttl_3n():
    """Hole 1: a guarded connection used a short TTL, so a node it reconnected
    to after a restart was held back only for that short TTL; then, on the
    same open connection, a long-TTL acquire let that node (restarted two
    seconds before, empty) vote yes next to the node A could not reach: two
    holders. The guard must judge each call by its own TTL."""
    with h.Cluster(3) as c:
        n2 = c.nodes[1]
        b = h.connect(c, restart_guard=1, reconnect_min_ms=20, reconnect_max_ms=50)
        _warm(b)
        a, tok, p3 = _restart_scenario(c)
        try:
            _restart_n2(c)
            t_restart = time.monotonic()
            # b reconnects to n2 with short calls, and waits until n2 counts for them
            h.wait_until(lambda: (_warm(b), row_of(b, n2.port)["state"])[1] == "up", 10,
                         interval=0.05, what="n2 to count again for b's short calls")
            r = _second_holder_refused(c, b, tok, "guard on, short TTL first")
            row = row_of(b, n2.port)
            eq(row["state"], "restarting", "n2's state for b after the long-TTL call")
            report("review hole 1: %.1f s after n2's restart, b's %d ms acquire gave %r; n2 %s"
                   % (time.monotonic() - t_restart, LONG_TTL, r, row["state"]))
        finally:
            p3.close()


def test_restart_guard_turned_on_after_connecting_3n():
    """Hole 1, second half: a connection that read the restarted node's INFO
    with the guard off, then turned the guard on, still let it vote yes."""
    with h.Cluster(3) as c:
        a, tok, p3 = _restart_scenario(c)
        try:
            _restart_n2(c)
            b = h.connect(c)
            _warm(b)
            eq(row_of(b, c.nodes[1].port)["state"], "up", "n2 for b before the guard")
            eq(value(b, "SELECT redlock_config('restart_guard', 1)"), 1, "turning the guard on")
            r = _second_holder_refused(c, b, tok, "guard turned on after connecting")
            report("review hole 1b: guard turned on after connecting: acquire gave %r" % (r,))
        finally:
            p3.close()
