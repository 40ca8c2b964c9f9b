"""sqlite3_interrupt() during a waiting acquire: the call ends within
milliseconds with an "interrupted" error, not when wait_ms runs out, and
leaves no key of its own on any node. The wake-ups of a waiting acquire: a
flood of release messages brings forward a bounded number of attempts, and
a message read in pieces wakes the waiter once."""
# SPDX-License-Identifier: BSD-3-Clause

import sqlite3
import threading
import time

import harness as h
from harness import check, eq, is_token, value

# not a timing test: a slow node on a loaded machine must not fail it
h.default_config(timeout_ms=h.RELAXED_TIMEOUT_MS)

WAIT_MS = 8000
BOUND_S = 2.0  # functional: far below the 8 s the wait would take


def interrupted_wait(c, con, sql):
    """Runs sql on con (it waits for the lock) and interrupts it once it has
    subscribed for the release; returns (error text, seconds from the
    interrupt to the end of the call)."""
    result = {}

    def run():
        try:
            result["rows"] = con.execute(sql).fetchall()
        except sqlite3.Error as e:
            result["error"] = e
        result["end"] = time.monotonic()

    t = threading.Thread(target=run)
    t.start()
    # waiting: every node's pub/sub connection listens for the release
    h.wait_until(lambda: all(n.cmd("PUBSUB", "NUMSUB", "busy:released")[1] >= 1 for n in c),
                 timeout=WAIT_MS / 1000.0 / 2, what="the waiter subscribed on every node")
    start = time.monotonic()
    con.interrupt()
    t.join(WAIT_MS / 1000.0 + 10)
    check(not t.is_alive(), "the waiting call did not end")
    check("error" in result, "the interrupted call returned %r" % (result.get("rows"),))
    return result["error"], result["end"] - start


def test_interrupt_ends_wait_held_elsewhere():
    c = h.shared_cluster(3)
    holder = h.connect(c)
    htok = is_token(value(holder, "SELECT redlock_acquire('busy', 60000)"))
    h.settle(holder)
    con = h.connect(c)
    for fn in ("redlock_acquire", "redlock_lock"):
        err, took = interrupted_wait(c, con, "SELECT %s('busy', 10000, %d)" % (fn, WAIT_MS))
        check(took < BOUND_S, "%s: the call ended %.2f s after the interrupt (wait_ms %d)" % (fn, took, WAIT_MS))
        check(isinstance(err, sqlite3.OperationalError), "%s: error type %r" % (fn, err))
        msg = str(err)
        check(msg.startswith("redlock: interrupted"), "%s: the error should say interrupted: %r" % (fn, msg))
        h.settle(con)
        eq([n.get("busy") for n in c], [htok] * len(c), "%s: the holder's key after the interrupt" % fn)
        eq(value(con, "SELECT count(*) FROM redlock_locks"), 0, "%s: locks the waiter holds" % fn)
    # the connection works on: the interrupt ended with the statement
    tok = is_token(value(con, "SELECT redlock_acquire('other', 10000)"), "acquire after the interrupt")
    eq(value(con, "SELECT redlock_release('other', ?)", tok), 1, "release after the interrupt")
    eq(value(holder, "SELECT redlock_release('busy')"), 1, "the holder's release")


def test_interrupt_cleans_up_a_minority():
    """Each attempt wins the one free node and gives it back; after the
    interrupt that node holds no key of the waiter's."""
    c = h.shared_cluster(3)
    for n in c[:2]:
        n.cmd("SET", "busy", "someone-else", "PX", "60000")
    con = h.connect(c)
    err, took = interrupted_wait(c, con, "SELECT redlock_acquire('busy', 10000, %d)" % WAIT_MS)
    check(took < BOUND_S, "the call ended %.2f s after the interrupt" % took)
    check(str(err).startswith("redlock: interrupted"), "the error should say interrupted: %r" % err)
    h.settle(con)
    eq([n.get("busy") for n in c], ["someone-else", "someone-else", None],
       "the key on each node after the interrupt")
    for n in c[:2]:
        n.cmd("DEL", "busy")


# A node timeout far above the waits below: a wait that ran on for it
# would take 20 s where the call should end in well under BOUND_S.
LONG_TIMEOUT_MS = 20000


def _timed(con, sql, *params):
    """Runs sql; returns (its value or the sqlite3.Error, seconds it took)."""
    start = time.monotonic()
    try:
        got = value(con, sql, *params)
    except sqlite3.Error as e:
        got = e
    return got, time.monotonic() - start


def test_wait_without_channel_rights_ends_with_wait_ms():
    """A user who may not SUBSCRIBE (Redis 7's default for a new ACL user)
    gets an error for the subscription: the wait goes on without it, ends
    with wait_ms, and does not sit out the node timeout for a confirmation
    that cannot come."""
    with h.Cluster(3) as c:
        for n in c:
            n.cmd("ACL", "SETUSER", "app", "on", ">app-pw", "~*", "resetchannels", "+@all")
        holder = h.connect(c)
        is_token(value(holder, "SELECT redlock_acquire('busy', 60000)"), "the holder")
        urls = ["redis://app:app-pw@127.0.0.1:%d" % n.port for n in c]
        con = h.connect(urls, timeout_ms=LONG_TIMEOUT_MS)
        for _ in range(2):
            got, took = _timed(con, "SELECT redlock_acquire('busy', 1000, 100)")
            eq(got, None, "the waiting acquire of a name held elsewhere")
            check(took < BOUND_S, "the 100 ms wait took %.2f s (node timeout %d ms)" % (took, LONG_TIMEOUT_MS))


def _reader_and_writer(c):
    """A connection holding 'busy' shared, and a writer's connection (node
    timeout LONG_TIMEOUT_MS) already connected to every node."""
    reader = h.connect(c)
    is_token(value(reader, "SELECT redlock_acquire_shared('busy', 60000)"), "a shared holder")
    h.settle(reader)
    con = h.connect(c, timeout_ms=LONG_TIMEOUT_MS)
    is_token(value(con, "SELECT redlock_acquire('warm', 1000)"), "the writer's connections are up")
    return reader, con


def test_wait_is_not_held_up_by_a_write_paused_node():
    """The writer-waiting marker's round decides nothing: it must not wait
    for a node paused for writes (CLIENT PAUSE WRITE), which answers only
    when the pause ends, while the other nodes have answered."""
    with h.Cluster(3) as c:
        reader, con = _reader_and_writer(c)
        c.nodes[2].cmd("CLIENT", "PAUSE", str(LONG_TIMEOUT_MS * 2), "WRITE")
        try:
            got, took = _timed(con, "SELECT redlock_acquire('busy', 1000, 100)")
            eq(got, None, "the writer's waiting acquire while a reader holds the name")
            check(took < BOUND_S, "the 100 ms wait took %.2f s (node timeout %d ms)" % (took, LONG_TIMEOUT_MS))
        finally:
            c.nodes[2].cmd("CLIENT", "UNPAUSE")


def test_interrupt_ends_the_wait_for_subscriptions():
    """A node that stopped before the waiter subscribes never confirms the
    subscription; an interrupt meanwhile ends the call within BOUND_S, not
    after the node timeout."""
    with h.Cluster(3) as c:
        holder = h.connect(c)
        is_token(value(holder, "SELECT redlock_acquire('busy', 60000)"), "the holder")
        h.settle(holder)
        con = h.connect(c, timeout_ms=LONG_TIMEOUT_MS)
        c.nodes[2].stop()
        try:
            err, took = interrupted_wait(c.nodes[:2], con, "SELECT redlock_acquire('busy', 10000, %d)" % WAIT_MS)
            check(took < BOUND_S, "the call ended %.2f s after the interrupt (node timeout %d ms)" % (took, LONG_TIMEOUT_MS))
            check(str(err).startswith("redlock: interrupted"), "the error should say interrupted: %r" % err)
        finally:
            c.nodes[2].cont()


def test_release_during_the_wait_for_subscriptions_is_not_missed():
    """While the waiter waits for a hung node to confirm its subscription,
    a release announced on the live nodes must end that wait: the waiter
    gets in at once, not when the wait for the confirmation runs out. (Woken
    by the first live node's message, its try can reach the other before
    the release does: one yes, one no, and the hung node's answer pending.
    Such a try ends at its TTL, short here, rather than at the hung node's
    timeout: test_a_split_vote_waits_for_a_hung_node_no_longer_than_the_ttl_3n.)"""
    with h.Cluster(3) as c:
        reader, con = _reader_and_writer(c)
        c.nodes[2].stop()
        try:
            got = {}

            def run():
                got["tok"] = value(con, "SELECT redlock_acquire('busy', 500, %d)" % WAIT_MS)
                got["end"] = time.monotonic()

            t = threading.Thread(target=run)
            t.start()
            h.wait_until(lambda: all(n.cmd("PUBSUB", "NUMSUB", "busy:released")[1] >= 1 for n in c.nodes[:2]),
                         timeout=WAIT_MS / 1000.0 / 2, what="the waiter subscribed on the live nodes")
            start = time.monotonic()
            eq(value(reader, "SELECT redlock_release('busy')"), 1, "the holder leaves")
            t.join(WAIT_MS / 1000.0 + 10)
            check(not t.is_alive(), "the waiting call did not end")
            is_token(got.get("tok"), "the waiter, once the holder left")
            check(got["end"] - start < BOUND_S, "the waiter got in %.2f s after the release" % (got["end"] - start))
        finally:
            c.nodes[2].cont()


# Links that go silently dead during the pause (issue 36): a node timeout
# of DEAD_TIMEOUT_MS, a retry delay far longer, so that the interrupt falls
# in the pause. The call must end long before the node timeout.
DEAD_TIMEOUT_MS = 4000
DEAD_BOUND_S = DEAD_TIMEOUT_MS / 1000.0 / 2
MARKER = "busy:writer-waiting"


def _marks_run(node):
    """How many writer-waiting marks (not their removals) node ran, read
    from its slow log (every command logged): the single-name script has
    the marker among its keys, the many-names one ends in px and suffix."""
    n = 0
    for entry in node.cmd("SLOWLOG", "GET", "1000"):
        args = entry[3]
        if len(args) < 4 or args[0].upper() not in ("EVAL", "EVALSHA") or not args[2].isdigit():
            continue
        nk = int(args[2])
        keys, argv = args[3:3 + nk], args[3 + nk:]
        n += MARKER in keys or (len(argv) == 2 and argv[0].isdigit() and argv[1] == ":writer-waiting")
    return n


def _interrupted_on_dead_links(c, con, sql):
    """Runs sql (a writer waiting on 'busy', held shared elsewhere) on con,
    stops every node (SIGSTOP: the links stay up, no answer comes) once the
    call waits in its pause after its second try and mark, interrupts it
    and resumes the nodes. Returns (error, seconds from the interrupt to
    the end of the call)."""
    for n in c:
        n.cmd("SLOWLOG", "RESET")
        n.cmd("CONFIG", "SET", "slowlog-log-slower-than", "0")
    result = {}

    def run():
        try:
            result["rows"] = con.execute(sql).fetchall()
        except sqlite3.Error as e:
            result["error"] = e
        result["end"] = time.monotonic()

    t = threading.Thread(target=run)
    t.start()
    try:
        # the first try, its mark, the subscription, the second try at once,
        # its mark: then the pause of retry_delay_ms
        h.wait_until(lambda: all(n.cmd("PUBSUB", "NUMSUB", "busy:released")[1] >= 1 and _marks_run(n) >= 2
                                 for n in c),
                     timeout=5, what="the waiter marked twice and subscribed on every node")
        eq([n.get(MARKER) is not None for n in c], [True] * len(c), "the writer's marker on every node")
        for n in c:
            n.stop()
        start = time.monotonic()
        con.interrupt()
        t.join(DEAD_TIMEOUT_MS / 1000.0 + 10)
    finally:
        for n in c:
            n.cont()
        t.join(30)
    check(not t.is_alive(), "the waiting call did not end")
    check("error" in result, "the interrupted call returned %r" % (result.get("rows"),))
    return result["error"], result["end"] - start


def _interrupt_on_dead_links(fn_sql, isolation_level):
    with h.Cluster(3) as c:
        reader = h.connect(c)
        is_token(value(reader, "SELECT redlock_acquire_shared('busy', 60000)"), "a shared holder")
        h.settle(reader)
        con = h.connect(c, timeout_ms=DEAD_TIMEOUT_MS, retry_delay_ms=8000)
        con.isolation_level = isolation_level
        is_token(value(con, "SELECT redlock_acquire('warm', 1000)"), "the waiter's connections are up")
        eq(value(con, "SELECT redlock_release('warm')"), 1, "the warm-up's release")
        err, took = _interrupted_on_dead_links(c, con, fn_sql)
        check(str(err).startswith("redlock: interrupted"), "the error should say interrupted: %r" % err)
        check(took < DEAD_BOUND_S, "the call ended %.2f s after the interrupt (node timeout %d ms)"
              % (took, DEAD_TIMEOUT_MS))
        # The markers' removal was sent before the call returned: it runs as
        # the nodes resume, long before the markers' own expiry (16 s here).
        h.wait_until(lambda: all(n.get(MARKER) is None for n in c), timeout=3,
                     what="the writer's markers removed once the nodes answer again")
        eq(value(con, "SELECT count(*) FROM redlock_locks"), 0, "locks the waiter holds")
        # The connection works on at once.
        got, took = _timed(con, "SELECT redlock_acquire('after', 10000)")
        is_token(got, "acquire after the interrupt")
        check(took < DEAD_BOUND_S, "the next acquire took %.2f s" % took)
        eq(value(con, "SELECT redlock_release('after')"), 1, "release after the interrupt")
        h.settle(con)
        eq([n.get("free") for n in c], [None] * len(c), "a name of the set on a node after the interrupt")
        eq(value(reader, "SELECT redlock_release('busy')"), 1, "the shared holder's release")


def test_interrupt_in_the_pause_on_dead_links_acquire():
    """Every node's link goes silent during the pause between tries: the
    interrupt ends the wait at once (not after the node timeout waiting
    for the writer marker's removal to be answered), and the removal still
    reaches the nodes. Python's default mode."""
    _interrupt_on_dead_links("SELECT redlock_acquire('busy', 10000, 20000)", "")


def test_interrupt_in_the_pause_on_dead_links_acquire_many():
    """The same for redlock_acquire_many, in autocommit mode."""
    _interrupt_on_dead_links("SELECT redlock_acquire_many('[\"free\", \"busy\"]', 10000, 20000)", None)


class _Waiter:
    """On one node: a holder takes name for a minute, and a waiter whose
    retry delay is a minute (so only wake-ups make it try early) waits
    wait_ms for it in a thread, subscribed once start() returns. tries()
    counts the waiter's acquire attempts (SET calls) since then."""

    def __init__(self, name, wait_ms):
        self.name, self.node = name, h.shared_cluster(1)[0]
        self.holder = h.connect([self.node], fencing=0)
        is_token(value(self.holder, "SELECT redlock_acquire(?, 60000)", name))
        self.waiter = h.connect([self.node], fencing=0, retry_delay_ms=60000, retry_jitter_ms=0)
        # its first lock writes the connection's holder details (a SET), before the count
        eq(value(self.waiter, "SELECT redlock_release(?1, redlock_acquire(?1, 1000))", name + ":warm"), 1, "warm-up")
        self.sql, self.result = "SELECT redlock_acquire('%s', 10000, %d)" % (name, wait_ms), {}
        self.thread = threading.Thread(target=self._wait)

    def _wait(self):
        start = time.monotonic()
        self.result["value"] = value(self.waiter, self.sql)
        self.result["took"] = time.monotonic() - start

    def start(self):
        self.before = self.node.calls("set")
        self.thread.start()
        h.wait_until(lambda: self.node.cmd("PUBSUB", "NUMSUB", self.name + ":released")[1] >= 1,
                     what="the waiter subscribed")

    def tries(self):
        return self.node.calls("set") - self.before

    def end(self):
        self.thread.join()
        eq(self.result["value"], None, "the lock stayed the holder's")
        eq(value(self.holder, "SELECT redlock_release(?)", self.name), 1, "the holder's release")
        return self.tries(), self.result["took"]


def test_a_flood_of_release_messages_does_not_flood_the_nodes_1n():
    """Anyone allowed to PUBLISH on <name>:released (or to write keys when
    keyspace events are on) woke a waiter for one more attempt per message:
    a publisher's loop became as many acquire rounds as the waiter could
    run. Messages now bring forward at most RL_WAKE_BURST (8) attempts at
    once and then one per RL_WAKE_GAP_US (2 ms), however many come."""
    gap_ms, burst = 2, 8
    w = _Waiter("flood", 1500)
    w.start()
    published = 0
    while w.thread.is_alive():
        w.node.cmd("PUBLISH", "flood:released", "x")
        published += 1
    attempts, took = w.end()
    bound = 3 + burst + int(took * 1000 / gap_ms)  # the first try, the one after subscribing, the last
    check(attempts <= bound, "%d attempts for %d messages in %.2f s (at most %d: %d, then one per %d ms)"
          % (attempts, published, took, bound, burst, gap_ms))


def test_a_message_read_in_pieces_wakes_a_waiter_once_1n():
    """A waiter's pause ended at the first bytes on its subscription even
    when they were only part of a message: a large message (or one sent a
    piece at a time) made it try again once per piece, neither at a real
    release nor after its retry delay. A pause now ends only at a whole
    message, its delay, the deadline or an interrupt."""
    w = _Waiter("pieces", 3000)
    w.start()
    h.wait_until(lambda: w.tries() >= 2, what="the waiter's try after subscribing")
    w.node.cmd("PUBLISH", "pieces:released", "x" * (12 << 20))
    attempts, _ = w.end()
    check(attempts <= 4, "%d tries: the first, the one after subscribing, one for the message and one at the "
                         "end of the wait" % attempts)
