"""A job that lost its lock stops: with redlock_config('on_lost', 1) the
statement running when one of the connection's locks is lost (the keeper's
extend finds the key gone, or too few nodes answer until the validity ran
out) or runs out of validity (no keeper extends it) is interrupted, so a
long INSERT in a `.bail on` script, in Python's default mode or in Node
fails and none of its rows are committed; with on_lost 0 it runs on (the
negative control). An extend that finds such a lock lost raises instead of
returning NULL; redlock_events has the lock_lost, lock_expired and
extend_failed rows. redlock_check(resource [, min_validity_ms]) raises,
naming the lock and why, when it is not held with validity left: in the
shell, in a Python loop, in Node.

Run: /usr/bin/python3 sql-tests/run.py test_lost
"""
# SPDX-License-Identifier: BSD-3-Clause

import json
import os
import sqlite3
import subprocess
import tempfile
import threading
import unittest

import harness as h
from harness import check, eq, is_token, value, wait_until

h.default_config(timeout_ms=h.RELAXED_TIMEOUT_MS)

TTL = 900  # ms: the keeper extends at a third of it, so a deleted key is found gone within 300 ms

# The long statement of a batch job: its first row takes the lock 'started'
# (so the test knows it runs), then it counts the rows it makes after 'job'
# stopped being valid, and ends 20000 rows after that (or after 40 million
# rows, about 10 s, if 'job' is never lost). Rows made after the loss are
# the ones a stopped job must not commit.
LONG_INSERT = """WITH RECURSIVE c(i, after) AS (
  SELECT 1, 0 WHERE redlock_lock('started', 60000) IS NOT NULL
  UNION ALL
  SELECT i + 1, after + (redlock_validity('job') IS NULL) FROM c WHERE after < 20000 AND i < 40000000)
INSERT INTO t SELECT i, after FROM c WHERE after > 0 OR i % 1000 = 0"""


def _db():
    d = tempfile.mkdtemp(prefix="redlock-lost-")
    return os.path.join(d, "job.db")


def _count(path, where="1"):
    con = sqlite3.connect(path)
    try:
        return con.execute("SELECT count(*) FROM t WHERE " + where).fetchone()[0]
    finally:
        con.close()


def _lose_when_started(c, what):
    """Once the long statement runs (it took 'started' on a quorum), the
    job's key goes from every node: what an eviction or a failover does."""
    wait_until(lambda: sum(1 for n in c if n.get("started")) >= c.quorum, timeout=10,
               what="%s: the long statement to start" % what)
    for n in c:
        n.cmd("DEL", "job")


def _default_mode(nodes, database=":memory:", **config):
    """A connection in Python's default sqlite3 mode (isolation_level "":
    the module opens a transaction before INSERT/UPDATE/DELETE)."""
    con = h.connect(nodes, database, **config)
    con.isolation_level = ""
    return con


def _shell_job(on_lost):
    c = h.shared_cluster(3)
    path = _db()
    sql = """.bail on
SELECT redlock_config('on_lost', %d);
SELECT redlock_config('auto_extend', 1);
CREATE TABLE t(i INTEGER, after INTEGER);
SELECT redlock_lock('job', %d) IS NOT NULL;
%s;
INSERT INTO t VALUES (-1, -1);
SELECT 'done';
""" % (on_lost, TTL, LONG_INSERT)
    p = h.ShellProc(sql, h.timeout_env(c), db=path)
    _lose_when_started(c, "shell")
    return p.wait(timeout=25), path


def test_shell_bail_stops_at_lost_lock_3n():
    (rc, out, err), path = _shell_job(on_lost=1)
    eq(rc, 1, "the script's exit status (stderr %r)" % err)
    check("interrupted" in err, "the long INSERT was interrupted: %r" % err)
    check("done" not in out, "the script stopped there: %r" % out)
    eq(_count(path), 0, "rows committed by the job that lost its lock")


def test_shell_on_lost_off_runs_on_3n():
    """The negative control: without on_lost the statement writes on
    after the loss, and so does the rest of the script."""
    (rc, out, err), path = _shell_job(on_lost=0)
    eq((rc, err), (0, ""), "exit status and stderr without on_lost")
    check("done" in out, "the script ran to its end: %r" % out)
    eq(_count(path, "after > 0"), 20000, "rows written after the loss without on_lost")
    eq(_count(path, "i = -1"), 1, "the next statement ran too")


def _python_job(on_lost):
    c = h.shared_cluster(3)
    path = _db()
    con = _default_mode(h.timeout_env(c), path, on_lost=on_lost, auto_extend=1)
    con.execute("CREATE TABLE t(i INTEGER, after INTEGER)")
    is_token(value(con, "SELECT redlock_lock('job', ?)", TTL))
    con.execute("INSERT INTO t VALUES (0, 0)")   # opens the module's transaction
    thread = threading.Thread(target=_lose_when_started, args=(c, "python"), daemon=True)
    thread.start()
    err = None
    try:
        con.execute(LONG_INSERT)
    except sqlite3.Error as e:
        err = e
    thread.join(10)
    con.commit()
    return con, err, path


def test_python_default_mode_stops_at_lost_lock_3n():
    con, err, path = _python_job(on_lost=1)
    check(isinstance(err, sqlite3.OperationalError) and "interrupted" in str(err),
          "the long INSERT was interrupted: %r" % err)
    eq(_count(path), 0, "rows committed after commit(): the interrupted INSERT undid its transaction")
    row = h.lock_row(con, "job")
    eq((row["state"], row["validity_ms"]), ("lost", 0), "redlock_locks says why")
    kinds = [k for k, in con.execute("SELECT kind FROM redlock_events WHERE resource = 'job'")]
    eq(kinds, ["lock_lost"], "redlock_events says which lock")
    h.redlock_error(con, "SELECT redlock_check('job')", contains=("'job'", "lost"))


def test_python_on_lost_off_runs_on_3n():
    con, err, path = _python_job(on_lost=0)
    eq(err, None, "the long INSERT without on_lost")
    eq(_count(path, "after > 0"), 20000, "rows written after the loss without on_lost")


def test_validity_runs_out_without_keeper_interrupts_1n():
    """No auto_extend: the keeper still watches the deadline of a lock
    taken with on_lost, and the statement stops when it passes."""
    c = h.shared_cluster(1)
    con = h.connect(h.timeout_env(c), on_lost=1)
    eq(value(con, "SELECT redlock_config('auto_extend')"), 0, "no auto-extension")
    is_token(value(con, "SELECT redlock_acquire('job', 300)"))
    con.execute("CREATE TABLE t(i INTEGER, after INTEGER)")
    msg = h.raises(lambda: con.execute(LONG_INSERT.replace("redlock_lock('started', 60000) IS NOT NULL", "1")),
                   "the long INSERT past the lock's validity")
    eq(msg, "interrupted", "the error")
    eq(value(con, "SELECT count(*) FROM t"), 0, "rows of the interrupted INSERT")
    eq(h.rows(con, "SELECT kind, resource FROM redlock_events"), [("lock_expired", "job")], "the event")
    h.redlock_error(con, "SELECT redlock_check('job')", contains=("'job'", "expired"))


def test_majority_stopped_extend_fails_then_lost_3n():
    """SIGSTOP two of three nodes: the keeper's extends get too few answers
    (extend_failed events: tried again while the lock is valid), its
    validity runs out, the lock is lost and the running statement stops."""
    with h.Cluster(3) as c:
        con = h.connect(h.timeout_env(c, 100), on_lost=1, auto_extend=1)
        is_token(value(con, "SELECT redlock_acquire('job', ?)", TTL))
        con.execute("CREATE TABLE t(i INTEGER, after INTEGER)")
        c[0].stop()
        c[1].stop()
        try:
            msg = h.raises(lambda: con.execute(LONG_INSERT.replace("redlock_lock('started', 60000) IS NOT NULL", "1")),
                           "the long INSERT while a majority is stopped")
        finally:
            c[0].cont()
            c[1].cont()
        eq(msg, "interrupted", "the error")
        eq(value(con, "SELECT count(*) FROM t"), 0, "rows of the interrupted INSERT")
        events = h.rows(con, "SELECT kind, node_id, resource FROM redlock_events")
        eq(events[-1], ("lock_lost", None, "job"), "the last event")
        check(("extend_failed", None, "job") in events, "extends that got too few answers: %r" % events)
        check(("node_down", 1, None) in events and ("node_down", 2, None) in events, "the nodes: %r" % events)
        msg = value(con, "SELECT message FROM redlock_events WHERE kind = 'extend_failed'")
        check(msg.startswith("redlock: lock 'job' not extended, trying again while it is valid: "), "message: %r" % msg)


def test_on_lost_is_taken_with_the_lock_1n():
    """As auto_extend: the setting in force when a lock is taken decides."""
    c = h.shared_cluster(1)
    con = h.connect(h.timeout_env(c))
    is_token(value(con, "SELECT redlock_acquire('before', 200)"))
    eq(value(con, "SELECT redlock_config('on_lost', 1)"), 1, "on_lost set")
    h.redlock_error(con, "SELECT redlock_config('on_lost', 2)", contains=("on_lost",))
    # without a keeper watching it, 'before' expires unnoticed: the statement that spins past it ends normally
    eq(h.rows(con, h.spin_until("redlock_validity('before') IS NULL")), [("spun", 1)], "spinning past 'before'")
    eq(h.rows(con, "SELECT kind FROM redlock_events"), [], "no event for a lock nobody watched")


def test_extend_of_lost_lock_raises_with_on_lost_3n():
    c = h.shared_cluster(3)
    con = h.connect(h.timeout_env(c), on_lost=1)
    is_token(value(con, "SELECT redlock_acquire('job', 30000)"))
    for n in c:
        n.cmd("DEL", "job")
    h.redlock_error(con, "SELECT redlock_extend('job', 30000)", contains=("'job'", "on_lost"))
    eq(h.rows(con, "SELECT kind, resource FROM redlock_events"), [("lock_lost", "job")], "the event")
    # a lock taken without on_lost keeps the NULL of the contract
    con.execute("SELECT redlock_config('on_lost', 0)")
    is_token(value(con, "SELECT redlock_acquire('quiet', 30000)"))
    for n in c:
        n.cmd("DEL", "quiet")
    eq(value(con, "SELECT redlock_extend('quiet', 30000)"), None, "extend of a lost lock without on_lost")


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
    wait_until(lambda: value(con, "SELECT redlock_validity('short')") is None, what="'short' to run out")
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


NODE, NODE_WHY = h.node_setup()


def test_lost_in_node_1n():
    """The Node app: redlock_check's error, and a statement past the
    validity of a lock taken with on_lost interrupted inside
    db.transaction, which rolls back."""
    if NODE is None:
        raise unittest.SkipTest(NODE_WHY)
    c = h.shared_cluster(1)
    r = subprocess.run([NODE, os.path.join(h.NODE_DIR, "lost.js"), h.EXT_SO], cwd=h.NODE_DIR,
                       env=h.node_env(h.timeout_env(c)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=25)
    eq(r.returncode, 0, "node lost.js exit status (stderr: %s)" % r.stderr.strip()[-500:])
    out = json.loads(r.stdout)
    check("redlock: lock 'job' is not held" in out["check_error"], "redlock_check in Node: %r" % out["check_error"])
    eq(out["interrupt_error"], "SQLITE_INTERRUPT: interrupted", "the statement past the lock's validity")
    eq(out["rows_after"], 0, "rows after db.transaction rolled back")
    eq(out["last_event"], ["lock_expired", "node:job"], "the last event in Node")


if __name__ == "__main__":
    raise SystemExit(h.run_directly(globals()))
