"""sqlite3_interrupt() during a waiting acquire: the call ends within
milliseconds with an "interrupted" error, not when wait_ms runs out, and
leaves no key of its own on any node."""
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
