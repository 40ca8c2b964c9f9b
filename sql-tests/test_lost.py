"""redlock_check(resource [, min_validity_ms]) raises, naming the lock and
why, when it is not held with validity left (not held, lost, expired,
under a margin), and stops a `.bail on` script and a Python loop at the
first write after the loss.

Run: /usr/bin/python3 sql-tests/run.py test_lost
"""
# SPDX-License-Identifier: BSD-3-Clause

import os
import sqlite3
import tempfile

import harness as h
from harness import check, eq, is_token, value, wait_until

h.default_config(timeout_ms=h.RELAXED_TIMEOUT_MS)

TTL = 900  # ms: the keeper extends at a third of it, so a deleted key is found gone within 300 ms


def _db():
    d = tempfile.mkdtemp(prefix="redlock-lost-")
    return os.path.join(d, "job.db")


def _count(path, where="1"):
    con = sqlite3.connect(path)
    try:
        return con.execute("SELECT count(*) FROM t WHERE " + where).fetchone()[0]
    finally:
        con.close()


def _default_mode(nodes, database=":memory:", **config):
    """A connection in Python's default sqlite3 mode (isolation_level "":
    the module opens a transaction before INSERT/UPDATE/DELETE)."""
    con = h.connect(nodes, database, **config)
    con.isolation_level = ""
    return con


# --------------------------------------------------------------------------
# redlock_check
# --------------------------------------------------------------------------

def test_check_says_why_3n():
    c = h.shared_cluster(3)
    con = h.connect(h.timeout_env(c), auto_extend=1)
    h.redlock_error(con, "SELECT redlock_check('never')", contains=("'never'", "not held"))
    is_token(value(con, "SELECT redlock_acquire('held', 30000)"))
    left = value(con, "SELECT redlock_check('held')")
    check(0 < left <= 30000, "redlock_check of a held lock: %r" % left)
    check(0 < value(con, "SELECT redlock_check('held', 1000)") <= 30000, "with a margin it has")
    h.redlock_error(con, "SELECT redlock_check('held', 60000)", contains=("'held'", "60000 ms"))
    h.redlock_error(con, "SELECT redlock_check('held', -1)", contains=("min_validity_ms",))
    eq(value(con, "SELECT redlock_release('held')"), 1, "release")
    h.redlock_error(con, "SELECT redlock_check('held')", contains=("'held'", "not held"))
    is_token(value(con, "SELECT redlock_acquire('gone', 900)"))
    for n in c:
        n.cmd("DEL", "gone")
    wait_until(lambda: h.lock_row(con, "gone")["state"] == "lost", what="the keeper to find 'gone' lost")
    h.redlock_error(con, "SELECT redlock_check('gone')", contains=("'gone'", "lost", "said no"))
    con.execute("SELECT redlock_config('auto_extend', 0)")
    is_token(value(con, "SELECT redlock_acquire('short', 100)"))
    wait_until(lambda: value(con, "SELECT redlock_validity('short')") == 0, what="'short' to run out")
    h.redlock_error(con, "SELECT redlock_check('short')", contains=("'short'", "expired"))


def test_check_stops_a_bail_script_3n():
    c = h.shared_cluster(3)
    rc, out, err = h.shell(""".bail on
SELECT 'before';
SELECT redlock_check('nightly');
SELECT 'after';
""", h.timeout_env(c))
    eq(rc, 1, "exit status")
    check("before" in out and "after" not in out, "stopped at the check: %r" % out)
    check("redlock: lock 'nightly' is not held by this connection" in err, "the error names the lock: %r" % err)


def test_check_in_a_python_loop_stops_it_3n():
    """Statements too short for an interrupt to land in: the check inside
    each write stops the loop at the first one after the loss."""
    c = h.shared_cluster(3)
    path = _db()
    con = _default_mode(h.timeout_env(c), path, auto_extend=1)
    con.execute("CREATE TABLE t(i INTEGER, after INTEGER)")
    con.commit()
    is_token(value(con, "SELECT redlock_lock('job', ?)", TTL))
    err, i = None, 0
    try:
        with con:
            for i in range(1, 1000000):
                con.execute("INSERT INTO t SELECT ?, 0 WHERE redlock_check('job') > 0", (i,))
                if i == 100:
                    for n in c:
                        n.cmd("DEL", "job")
    except sqlite3.Error as e:
        err = e
    check(err is not None and "'job'" in str(err) and "lost" in str(err), "the loop's error: %r" % err)
    check(i > 100, "the loop ran until the keeper found the loss (%d rows)" % i)
    eq(_count(path), 0, "rows committed: `with con:` rolled the job back")


if __name__ == "__main__":
    raise SystemExit(h.run_directly(globals()))
