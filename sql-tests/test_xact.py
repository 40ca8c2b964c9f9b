"""Locks that belong to the transaction: redlock_acquire_xact and
redlock_lock_xact. Refused outside a transaction; released right after
COMMIT (the writes visible first: two processes x 25 jobs of
read-max-insert-max+1 in WAL and rollback-journal mode give rows 1..50),
after ROLLBACK (one an error forces too) and at close; kept by ROLLBACK TO
and auto-extended while the transaction lasts; never released, detached or
given back by hand. The COMMIT guard: a COMMIT whose lock was lost (the
keeper saw it, an extend found it, its validity ran out, less than
xact_margin_ms left) fails with an error naming the lock, and none of the
transaction's writes land. From Python (isolation_level=None, the default
mode, `with con:`), the sqlite3 shell and Node's better-sqlite3.

Run: /usr/bin/python3 sql-tests/run.py test_xact
"""
# SPDX-License-Identifier: BSD-3-Clause

import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import harness as h
from harness import check, eq, holds, is_token, no_key, value

h.default_config(timeout_ms=h.RELAXED_TIMEOUT_MS)

HERE = os.path.dirname(os.path.abspath(__file__))
NODE, NODE_WHY = h.node_setup()
REFUSED_COMMIT = ("redlock: COMMIT refused: the lock ", "none of its writes are made")


def cluster():
    return h.shared_cluster(3)


def db_file(d, mode="delete"):
    path = os.path.join(d, "jobs.db")
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA journal_mode=%s" % mode)
    con.execute("CREATE TABLE j(n INTEGER)")
    con.close()
    return path


def rows_of(path):
    con = sqlite3.connect(path)
    try:
        return [r[0] for r in con.execute("SELECT n FROM j ORDER BY rowid")]
    finally:
        con.close()


def xact_row(con, res):
    r = h.lock_row(con, res)
    return r and (r["holds"], r["xact_holds"], r["state"])


def wait_lost(con, res, what):
    h.wait_until(lambda: value(con, "SELECT state FROM redlock_locks WHERE resource = ?", res)
                 == "lost", 5, what=what)


def wait_ran_out(con, res):
    h.wait_until(lambda: value(con, "SELECT redlock_validity(?)", res) is None, 5,
                 what="the validity to run out")


# --------------------------------------------------------------------------
# the transaction owns it
# --------------------------------------------------------------------------

def test_refused_outside_a_transaction_3n():
    c = cluster()
    con = h.connect(c)
    for fn in ("redlock_acquire_xact", "redlock_lock_xact"):
        h.redlock_error(con, "SELECT %s('x:out', 60000)" % fn,
                        contains=("needs an open transaction", "BEGIN"))
    eq(h.lock_rows(con), [], "nothing held")
    no_key(c, "x:out", "nothing taken", settle_cons=(con,))


def test_released_right_after_commit_not_before_3n():
    c = cluster()
    with tempfile.TemporaryDirectory() as d:
        path = db_file(d)
        con = h.connect(c, path)
        con.execute("BEGIN")
        tok = is_token(value(con, "SELECT redlock_acquire_xact('x:c', 60000)"))
        eq(xact_row(con, "x:c"), (1, 1, "held"), "holds, xact_holds, state")
        con.execute("INSERT INTO j VALUES (1)")
        holds(c, "x:c", tok, 60000, "held until COMMIT", settle_cons=(con,))
        eq(rows_of(path), [], "not committed yet")
        con.execute("COMMIT")
        eq(rows_of(path), [1], "committed")
        eq(h.lock_rows(con), [], "released by COMMIT")
        no_key(c, "x:c", "released by COMMIT", settle_cons=(con,))
        # A transaction with no write of its own releases it too.
        con.execute("BEGIN")
        tok = is_token(value(con, "SELECT redlock_lock_xact('x:c', 60000)"))
        con.execute("COMMIT")
        no_key(c, "x:c", "released by a COMMIT without writes", settle_cons=(con,))
        con.close()


def test_released_by_rollback_forced_rollback_and_close_3n():
    c = cluster()
    with tempfile.TemporaryDirectory() as d:
        path = db_file(d)
        con = h.connect(c, path)
        con.execute("CREATE TABLE u(x UNIQUE)")
        con.execute("BEGIN")
        is_token(value(con, "SELECT redlock_acquire_xact('x:r', 60000)"))
        con.execute("INSERT INTO j VALUES (1)")
        con.execute("ROLLBACK")
        eq(h.lock_rows(con), [], "released by ROLLBACK")
        no_key(c, "x:r", "released by ROLLBACK", settle_cons=(con,))
        con.execute("BEGIN")
        is_token(value(con, "SELECT redlock_acquire_xact('x:r', 60000)"))
        con.execute("INSERT INTO u VALUES (1)")
        h.sql_error(con, "INSERT OR ROLLBACK INTO u VALUES (1)")
        check(not con.in_transaction, "the conflict rolled the transaction back")
        no_key(c, "x:r", "released by the rollback the error forced", settle_cons=(con,))
        eq(rows_of(path), [], "no write")
        con.execute("BEGIN")
        tok = is_token(value(con, "SELECT redlock_acquire_xact('x:r', 60000)"))
        con.execute("INSERT INTO j VALUES (2)")
        holds(c, "x:r", tok, 60000, "before the close", settle_cons=(con,))
        con.close()
        no_key(c, "x:r", "released when the connection closed mid-transaction")
        eq(rows_of(path), [], "the open transaction was rolled back")


def test_savepoints_3n():
    """ROLLBACK TO keeps the lock (it belongs to the whole transaction); a
    SAVEPOINT that opened the transaction releases it at its RELEASE."""
    c = cluster()
    with tempfile.TemporaryDirectory() as d:
        path = db_file(d)
        con = h.connect(c, path)
        con.execute("BEGIN")
        con.execute("SAVEPOINT a")
        tok = is_token(value(con, "SELECT redlock_acquire_xact('x:s', 60000)"))
        con.execute("ROLLBACK TO a")
        eq(xact_row(con, "x:s"), (1, 1, "held"), "kept by ROLLBACK TO")
        holds(c, "x:s", tok, 60000, "kept by ROLLBACK TO", settle_cons=(con,))
        con.execute("RELEASE a")
        con.execute("COMMIT")
        no_key(c, "x:s", "released by COMMIT", settle_cons=(con,))
        con.execute("SAVEPOINT outer")
        is_token(value(con, "SELECT redlock_acquire_xact('x:s', 60000)"))
        con.execute("INSERT INTO j VALUES (1)")
        con.execute("RELEASE outer")
        eq(rows_of(path), [1], "committed by RELEASE")
        no_key(c, "x:s", "released by the RELEASE that committed", settle_cons=(con,))
        con.close()


def test_no_release_detach_or_release_all_of_it_3n():
    c = cluster()
    con = h.connect(c)
    con.execute("BEGIN")
    tok = is_token(value(con, "SELECT redlock_acquire_xact('x:n', 60000)"))
    for sql in ("SELECT redlock_release('x:n')", "SELECT redlock_release('x:n', '%s')" % tok,
                "SELECT redlock_detach('x:n')", "SELECT redlock_release_many('[\"x:n\"]')"):
        h.redlock_error(con, sql, contains=("the open transaction holds this lock",
                                            "COMMIT or ROLLBACK"))
    eq(value(con, "SELECT redlock_release_all()"), 0,
       "release_all gives back no hold of the transaction")
    h.redlock_error(con, "SELECT redlock_acquire_many('[\"x:n\"]', 60000)",
                    contains=("already listed",))
    h.redlock_error(con, "SELECT redlock_acquire_shared('x:n', 60000)", contains=("exclusively",))
    h.redlock_error(con, "INSERT INTO temp.redlock_xact VALUES (1)", contains=("holds no rows",))
    h.sql_error(con, "DROP TABLE temp.redlock_xact")
    holds(c, "x:n", tok, 60000, "still held", settle_cons=(con,))
    con.execute("COMMIT")
    no_key(c, "x:n", "released by COMMIT", settle_cons=(con,))
    con.execute("DROP TABLE temp.redlock_xact")  # outside a transaction: made again when needed
    con.execute("BEGIN")
    is_token(value(con, "SELECT redlock_acquire_xact('x:n', 60000)"))
    con.execute("COMMIT")
    no_key(c, "x:n", "released by COMMIT after the table was made again", settle_cons=(con,))


def test_holds_beside_the_connections_own_3n():
    """A name the connection holds gets one hold more, the transaction's;
    COMMIT gives that back and the lock stays for the connection's own. A
    name of the transaction taken again with redlock_acquire is the
    connection's hold: redlock_release and release_all give back that one."""
    c = cluster()
    con = h.connect(c)
    tok = is_token(value(con, "SELECT redlock_acquire('x:h', 60000)"))
    con.execute("BEGIN")
    eq(value(con, "SELECT redlock_acquire_xact('x:h', 60000)"), tok, "the same lock")
    eq(value(con, "SELECT redlock_acquire_xact('x:h', 60000)"), tok, "again in the transaction")
    eq(xact_row(con, "x:h"), (3, 2, "held"), "holds, xact_holds")
    con.execute("COMMIT")
    eq(xact_row(con, "x:h"), (1, 0, "held"), "the connection's own hold is left")
    holds(c, "x:h", tok, 60000, "kept for the connection's hold", settle_cons=(con,))
    eq(value(con, "SELECT redlock_release('x:h')"), 1, "released by its own release")
    no_key(c, "x:h", "released", settle_cons=(con,))
    con.execute("BEGIN")
    tok = is_token(value(con, "SELECT redlock_acquire_xact('x:h', 60000)"))
    eq(value(con, "SELECT redlock_acquire('x:h', 60000)"), tok,
       "the connection's hold of the same lock")
    eq(value(con, "SELECT redlock_release('x:h')"), 1, "its own hold given back")
    h.redlock_error(con, "SELECT redlock_release('x:h')",
                    contains=("the open transaction holds this lock",))
    eq(value(con, "SELECT redlock_acquire('x:h', 60000)"), tok, "taken again")
    eq(value(con, "SELECT redlock_release_all()"), 1,
       "release_all gives back the connection's hold")
    eq(xact_row(con, "x:h"), (1, 1, "held"), "the transaction's hold is left")
    holds(c, "x:h", tok, 60000, "held by the transaction", settle_cons=(con,))
    con.execute("ROLLBACK")
    no_key(c, "x:h", "released by ROLLBACK", settle_cons=(con,))


def test_auto_extended_while_the_transaction_lasts_3n():
    c = cluster()
    with tempfile.TemporaryDirectory() as d:
        path = db_file(d)
        con = h.connect(c, path, auto_extend=1)
        con.execute("BEGIN")
        is_token(value(con, "SELECT redlock_acquire_xact('x:a', 300)"))
        h.wait_until(lambda: value(con, "SELECT extensions FROM redlock_locks") >= 3, 5,
                     what="3 extensions")
        con.execute("INSERT INTO j VALUES (1)")
        con.execute("COMMIT")
        eq(rows_of(path), [1], "committed past its TTL, kept by the keeper")
        no_key(c, "x:a", "released by COMMIT", settle_cons=(con,))


# --------------------------------------------------------------------------
# the COMMIT guard
# --------------------------------------------------------------------------

def refused_commit(con, commit, path, res, why):
    """commit() must fail with the guard's message naming res and why; the
    writes are absent, the transaction over, the lock gone."""
    try:
        commit()
    except sqlite3.Error as e:
        msg = str(e)
    else:
        raise AssertionError("COMMIT went through with the lock lost")
    for part in REFUSED_COMMIT + ("'%s'" % res, why):
        check(part in msg, "the COMMIT error should mention %r: %r" % (part, msg))
    check(not con.in_transaction, "the transaction is over")
    eq(rows_of(path), [], "none of the transaction's writes")
    eq(h.lock_rows(con), [], "the lock is released")
    return msg


def test_late_commit_after_the_keeper_saw_it_lost_3n():
    c = cluster()
    with tempfile.TemporaryDirectory() as d:
        path = db_file(d)
        con = h.connect(c, path, auto_extend=1)
        con.execute("BEGIN")
        is_token(value(con, "SELECT redlock_acquire_xact('x:k', 600)"))
        con.execute("INSERT INTO j VALUES (1)")
        h.settle(con)
        for n in c:
            n.cmd("SET", "x:k", "someone-else", "PX", 60000)
        wait_lost(con, "x:k", "the keeper to see it lost")
        refused_commit(con, lambda: con.execute("COMMIT"), path, "x:k", "was lost")
        for n in c:
            eq(n.get("x:k"), "someone-else", "the other holder's key is left alone")


def test_late_commit_after_the_validity_ran_out_3n():
    """Without auto-extension: the TTL runs out before COMMIT; an extend
    that finds it so (NULL) leaves it listed as lost for the guard."""
    c = cluster()
    with tempfile.TemporaryDirectory() as d:
        path = db_file(d)
        con = h.connect(c, path)
        for extend_first in (False, True):
            con.execute("BEGIN")
            is_token(value(con, "SELECT redlock_acquire_xact('x:v', 200)"))
            con.execute("INSERT INTO j VALUES (1)")
            wait_ran_out(con, "x:v")
            if extend_first:
                eq(value(con, "SELECT redlock_extend('x:v', 60000)"), None,
                   "an extend finds it run out")
                h.redlock_error(con, "SELECT redlock_acquire_xact('x:v', 60000)",
                                contains=("was lost", "ROLLBACK"))
            refused_commit(con, lambda: con.execute("COMMIT"), path, "x:v",
                           "was lost" if extend_first else "no validity left")
            no_key(c, "x:v", "nothing left on the nodes", settle_cons=(con,))


def test_commit_refused_under_the_margin_3n():
    c = cluster()
    with tempfile.TemporaryDirectory() as d:
        path = db_file(d)
        con = h.connect(c, path)
        eq(value(con, "SELECT redlock_config('xact_margin_ms')"), 100, "the default margin")
        h.redlock_error(con, "SELECT redlock_config('xact_margin_ms', -1)",
                        contains=("xact_margin_ms",))
        con.execute("SELECT redlock_config('xact_margin_ms', 30000)")
        con.execute("BEGIN")
        is_token(value(con, "SELECT redlock_acquire_xact('x:m', 20000)"))
        con.execute("INSERT INTO j VALUES (1)")
        refused_commit(con, lambda: con.execute("COMMIT"), path, "x:m",
                       "less than xact_margin_ms (30000)")
        con.execute("SELECT redlock_config('xact_margin_ms', 100)")
        con.execute("BEGIN")
        is_token(value(con, "SELECT redlock_acquire_xact('x:m', 20000)"))
        con.execute("INSERT INTO j VALUES (1)")
        con.execute("COMMIT")
        eq(rows_of(path), [1], "committed with the margin met")


def test_rollback_journal_commit_waits_for_readers_before_the_guard_3n():
    """In rollback-journal mode COMMIT waits (busy_timeout) for the file's
    readers to go before it can write; the guard looks after that wait. A
    reader keeps its SHARED lock until the lock's validity has run out:
    the COMMIT that waited for it is refused, not committed."""
    c = cluster()
    with tempfile.TemporaryDirectory() as d:
        path = db_file(d)
        con = h.connect(c, path)
        con.execute("PRAGMA busy_timeout = 10000")
        con.execute("BEGIN")
        is_token(value(con, "SELECT redlock_acquire_xact('x:w', 500)"))
        con.execute("INSERT INTO j VALUES (1)")
        reader = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM j").fetchall()  # SHARED, until its COMMIT
        ends = time.monotonic() + value(con, "SELECT redlock_validity('x:w')") / 1000.0

        def end_reader():
            h.wait_until(lambda: time.monotonic() > ends + 0.05, 5,
                         what="the lock's validity to end")
            reader.execute("COMMIT")
        t = threading.Thread(target=end_reader)
        t.start()
        try:
            refused_commit(con, lambda: con.execute("COMMIT"), path, "x:w", "no validity left")
        finally:
            t.join()
            reader.close()


# --------------------------------------------------------------------------
# Python's default mode, `with con:`
# --------------------------------------------------------------------------

def default_mode(c, path, **config):
    """A connection in Python's default mode (isolation_level ''), the
    extension loaded."""
    con = sqlite3.connect(path, timeout=10)
    con.enable_load_extension(True)
    old = os.environ.get("REDLOCK_NODES")
    os.environ["REDLOCK_NODES"] = h.nodes_env_of(c)
    try:
        con.load_extension(h.EXT)
    finally:
        if old is None:
            del os.environ["REDLOCK_NODES"]
        else:
            os.environ["REDLOCK_NODES"] = old
    for k, v in dict(timeout_ms=h.RELAXED_TIMEOUT_MS, **config).items():
        con.execute("SELECT redlock_config(?, ?)", (k, v))
    return con


def test_python_default_mode_and_with_con_3n():
    c = cluster()
    with tempfile.TemporaryDirectory() as d:
        path = db_file(d)
        con = default_mode(c, path)
        h.redlock_error(con, "SELECT redlock_acquire_xact('x:p', 60000)",
                        contains=('execute "BEGIN"',))
        with con:
            con.execute("BEGIN")
            tok = is_token(value(con, "SELECT redlock_acquire_xact('x:p', 60000)"))
            con.execute("INSERT INTO j VALUES (1)")
            holds(c, "x:p", tok, 60000, "held inside the with block")
        eq(rows_of(path), [1], "committed by the with block")
        no_key(c, "x:p", "released by its COMMIT", settle_cons=(con,))
        try:
            with con:
                con.execute("BEGIN")
                is_token(value(con, "SELECT redlock_acquire_xact('x:p', 60000)"))
                con.execute("INSERT INTO j VALUES (2)")
                raise KeyError("the job failed")
        except KeyError:
            pass
        eq(rows_of(path), [1], "rolled back by the with block")
        no_key(c, "x:p", "released by its ROLLBACK", settle_cons=(con,))
        # The module's own transaction (opened before the INSERT) owns it too.
        con.execute("INSERT INTO j VALUES (3)")
        is_token(value(con, "SELECT redlock_acquire_xact('x:p', 60000)"))
        con.commit()
        no_key(c, "x:p", "released by commit()", settle_cons=(con,))
        # A lost lock: commit() raises with the guard's message.
        con.execute("BEGIN")
        is_token(value(con, "SELECT redlock_acquire_xact('x:p', 200)"))
        con.execute("INSERT INTO j VALUES (4)")
        wait_ran_out(con, "x:p")
        try:
            with con:
                con.execute("INSERT INTO j VALUES (5)")
        except sqlite3.OperationalError as e:
            msg = str(e)
        else:
            raise AssertionError("the with block committed with the lock run out")
        check(msg.startswith(REFUSED_COMMIT[0] + "'x:p'"), "with's commit error: %r" % msg)
        eq(rows_of(path), [1, 3], "neither write of the refused transaction")
        eq(h.lock_rows(con), [], "released")
        con.close()


# --------------------------------------------------------------------------
# the order proof: 2 processes x 25 jobs
# --------------------------------------------------------------------------

def run_jobs(c, path, procs=2, jobs=25):
    spec = {"ext": h.EXT, "nodes": h.nodes_env_of(c), "db": path, "jobs": jobs,
            "config": {"timeout_ms": h.RELAXED_TIMEOUT_MS, "retry_delay_ms": 5,
                       "retry_jitter_ms": 2}}
    ps = [subprocess.Popen([h.PYTHON, os.path.join(HERE, "xact_jobs.py"), json.dumps(spec)],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True) for _ in range(procs)]
    try:
        for p in ps:
            eq(p.stdout.readline().strip(), "ready", "a job process loaded the extension")
        for p in ps:
            p.stdin.write("go\n")
            p.stdin.flush()
        results = [p.communicate(timeout=60) for p in ps]
    finally:
        for p in ps:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (_, err) in zip(ps, results):
        last = (err.strip().splitlines() or [""])[-1]
        eq((p.returncode, last), (0, ""), "a job process: exit status and its last error line")


def order_proof(mode):
    c = cluster()
    with tempfile.TemporaryDirectory() as d:
        path = db_file(d, mode)
        run_jobs(c, path)
        got = rows_of(path)
        h.note("order proof, journal_mode=%s: %d rows, 1..50: %s"
               % (mode, len(got), got == list(range(1, 51))))
        eq(got, list(range(1, 51)), "rows of 2 processes x 25 jobs in %s mode" % mode)
        no_key(c, "jobs", "every job released its lock")


def test_order_proof_wal_3n():
    order_proof("wal")


def test_order_proof_rollback_journal_3n():
    order_proof("delete")


# --------------------------------------------------------------------------
# the sqlite3 shell and Node
# --------------------------------------------------------------------------

def test_shell_job_and_late_commit_3n():
    c = cluster()
    with tempfile.TemporaryDirectory() as d:
        path = db_file(d)
        probe = os.path.join(d, "probe")
        rc, out, err = h.shell(".bail on\nBEGIN;\n"
                               "SELECT redlock_lock_xact('x:sh', 60000) IS NOT NULL;\n"
                               "INSERT INTO j VALUES (1);\nCOMMIT;\n" + h.SHELL_SETTLE
                               + h.probe(c, probe, "EXISTS", "x:sh") + "SELECT 'done';\n",
                               h.timeout_env(c), db=path)
        eq((rc, err, out.split()), (0, "", ["1", "done"]),
           "the job's exit status, stderr and output")
        eq(h.probed(probe), ["0"] * len(c), "EXISTS x:sh on each node right after COMMIT")
        eq(rows_of(path), [1], "committed")
        rc, out, err = h.shell(".bail on\nBEGIN;\n"
                               "SELECT redlock_lock_xact('x:sh', 200) IS NOT NULL;\n"
                               "INSERT INTO j VALUES (2);\n"
                               + h.spin_until("redlock_validity('x:sh') IS NULL")
                               + "\nCOMMIT;\nSELECT 'after';\n", h.timeout_env(c), db=path)
        eq(rc, 1, "the shell stops at the refused COMMIT (stderr %r)" % err)
        check("redlock: COMMIT refused: the lock 'x:sh' has no validity left" in err
              and "after" not in out, "the shell shows the guard's message: %r" % err)
        eq(rows_of(path), [1], "the late transaction's write is absent")
        tok = is_token(value(h.connect(c), "SELECT redlock_acquire('x:sh', 60000)"))
        rc, out, err = h.shell(".bail on\nBEGIN;\nSELECT redlock_lock_xact('x:sh', 60000, 50);\n"
                               "SELECT 'on';\n", h.timeout_env(c), db=path)
        check(rc == 1 and "redlock: could not lock 'x:sh' within 50 ms" in err and "on" not in out,
              "redlock_lock_xact raises when the lock is held elsewhere: %r %r" % (out, err))
        check(tok not in err, "no token in the error")


def test_node_db_transaction_3n():
    if NODE is None:
        raise unittest.SkipTest(NODE_WHY)
    c = cluster()
    with tempfile.TemporaryDirectory() as d:
        path = db_file(d)
        r = subprocess.run([NODE, os.path.join(h.NODE_DIR, "xact.js"), h.EXT_SO, path],
                           cwd=h.NODE_DIR, env=h.node_env(c), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=25)
        eq(r.returncode, 0, "node xact.js exit status (stderr: %s)" % r.stderr.strip()[-500:])
        out = json.loads(r.stdout)
        check("needs an open transaction" in out["outside"],
              "outside a transaction: %r" % out["outside"])
        is_token(out["token"], "the token inside db.transaction()")
        eq(out["held_inside"], 1, "listed inside the transaction")
        eq(out["held_after_commit"], 0, "released by the transaction's COMMIT")
        eq(out["held_after_throw"], 0, "released by the ROLLBACK of a throwing transaction")
        check(out["late_error"].startswith(REFUSED_COMMIT[0] + "'x:node'"),
              "the late COMMIT: %r" % out["late_error"])
        eq(out["held_after_late"], 0, "released after the refused COMMIT")
        eq(rows_of(path), [1], "only the committed transaction's write")
        no_key(c, "x:node", "after the Node app")


if __name__ == "__main__":
    sys.exit(h.run_directly(globals()))
