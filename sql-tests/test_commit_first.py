"""A release before COMMIT is refused: redlock_release and
redlock_release_all raise an error that says to COMMIT first while the
connection has uncommitted writes (the next holder would read the data as
it was before them); the setting release_in_write_txn turns that off; the
release at close is unaffected. From Python (autocommit and the sqlite3
module's own transactions, README's example) and from the sqlite3 shell.

Run: /usr/bin/python3 sql-tests/run.py test_commit_first
"""
# SPDX-License-Identifier: BSD-3-Clause

import os
import sqlite3
import tempfile

import harness as h
from harness import check, eq, holds, is_token, no_key, value

h.default_config(timeout_ms=h.RELAXED_TIMEOUT_MS)

REFUSED = ("refused", "uncommitted writes", "COMMIT first", "release_in_write_txn")


def cluster():
    return h.shared_cluster(3)


def db_file(d):
    path = os.path.join(d, "shop.db")
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE results(x)")
    con.commit()
    con.close()
    return path


def holding_with_writes_open(c, d, name):
    """A connection to a new database file in d that holds name (60 s) and
    has an uncommitted INSERT; returns it and the lock's token."""
    con = h.connect(c, db_file(d))
    tok = is_token(value(con, "SELECT redlock_acquire(?, 60000)", name))
    con.execute("BEGIN")
    con.execute("INSERT INTO results VALUES (1)")
    return con, tok


def test_release_inside_begin_is_refused_until_commit():
    c = cluster()
    with tempfile.TemporaryDirectory() as d:
        con, tok = holding_with_writes_open(c, d, "cf:a")
        for sql in ("SELECT redlock_release('cf:a')", "SELECT redlock_release('cf:a', '%s')" % tok,
                    "SELECT redlock_release_all()"):
            msg = h.redlock_error(con, sql, contains=REFUSED)
            check(tok not in msg, "the token is not in the error")
        eq(value(con, "SELECT holds FROM redlock_locks"), 1, "still held, all holds")
        holds(c, "cf:a", tok, 60000, "the lock stays on the nodes", settle_cons=(con,))
        con.execute("COMMIT")
        eq(value(con, "SELECT redlock_release('cf:a')"), 1, "released after COMMIT")
        no_key(c, "cf:a", "after the release", settle_cons=(con,))
        con.close()


def test_extend_that_would_let_the_lock_go_before_commit_is_refused():
    """An extend to a TTL shorter than what the lock has left would let it
    expire before COMMIT, as a release would: refused while there are
    uncommitted writes, with the TTL to give instead; a TTL at least as long
    is allowed, and any TTL after COMMIT."""
    c = cluster()
    with tempfile.TemporaryDirectory() as d:
        con, tok = holding_with_writes_open(c, d, "cf:e")
        msg = h.redlock_error(con, "SELECT redlock_extend('cf:e', 3)",
                              contains=("refused", "uncommitted writes", "COMMIT first", "at least"))
        check(tok not in msg, "the token is not in the error")
        h.redlock_error(con, "SELECT redlock_extend('cf:e', 3, '%s')" % tok, contains=REFUSED[:3])
        holds(c, "cf:e", tok, 60000, "the lock stays on the nodes", settle_cons=(con,))
        for n in c:
            check(n.cmd("PTTL", "cf:e") > 50000, "the lock keeps its TTL on %s" % n.addr)
        check(value(con, "SELECT redlock_extend('cf:e', 120000)") > 60000, "a longer extend is allowed")
        con.execute("COMMIT")
        check(value(con, "SELECT redlock_extend('cf:e', 3000)") is not None, "a short extend after COMMIT")
        eq(value(con, "SELECT redlock_release('cf:e')"), 1, "released")
        con.close()


def test_detach_before_commit_is_refused():
    """A detach hands the lock over to its TTL (no more auto-extension here,
    and an extend by its token then finds no validity to keep): before
    COMMIT it lets go of the lock as a release does, so it is refused as a
    release is, and the lock stays this connection's; after COMMIT it gives
    the token."""
    c = cluster()
    with tempfile.TemporaryDirectory() as d:
        con, tok = holding_with_writes_open(c, d, "cf:d")
        msg = h.redlock_error(con, "SELECT redlock_detach('cf:d')", contains=REFUSED)
        check(tok not in msg, "the token is not in the error")
        eq(value(con, "SELECT token FROM redlock_locks"), tok, "still held by this connection")
        con.execute("COMMIT")
        eq(value(con, "SELECT redlock_detach('cf:d')"), tok, "detach after COMMIT gives the token")
        eq(value(con, "SELECT redlock_release('cf:d', ?)", tok), 1, "released by its token")
        con.close()


def test_statement_that_writes_and_releases_is_refused():
    c = cluster()
    with tempfile.TemporaryDirectory() as d:
        con = h.connect(c, db_file(d))
        tok = is_token(value(con, "SELECT redlock_acquire('cf:s', 60000)"))
        h.redlock_error(con, "INSERT INTO results SELECT redlock_release('cf:s')", contains=REFUSED)
        eq(value(con, "SELECT count(*) FROM results"), 0, "the statement wrote nothing")
        holds(c, "cf:s", tok, 60000, "still held", settle_cons=(con,))
        con.close()
        no_key(c, "cf:s", "released at close")


def test_reads_and_temp_writes_do_not_count():
    c = cluster()
    with tempfile.TemporaryDirectory() as d:
        con = h.connect(c, db_file(d))
        is_token(value(con, "SELECT redlock_acquire('cf:r', 60000)"))
        is_token(value(con, "SELECT redlock_acquire('cf:t', 60000)"))
        con.execute("BEGIN")
        eq(value(con, "SELECT count(*) FROM results"), 0, "a read")
        eq(value(con, "SELECT redlock_release('cf:r')"), 1, "release in a read transaction")
        con.execute("COMMIT")
        # README's nightly_report.sql: the release result stored in a TEMP table
        con.execute("CREATE TEMP TABLE me(released INTEGER)")
        con.execute("INSERT INTO me VALUES (NULL)")
        con.execute("UPDATE me SET released = redlock_release('cf:t')")
        eq(value(con, "SELECT released FROM me"), 1, "released from an UPDATE of a TEMP table")
        con.close()


def test_setting_allows_release_in_a_write_transaction():
    c = cluster()
    with tempfile.TemporaryDirectory() as d:
        con = h.connect(c, db_file(d))
        eq(value(con, "SELECT redlock_config('release_in_write_txn')"), 0, "default")
        eq(value(con, "SELECT redlock_config('release_in_write_txn', 1)"), 1, "set")
        is_token(value(con, "SELECT redlock_acquire('cf:o', 60000)"))
        con.execute("BEGIN")
        con.execute("INSERT INTO results VALUES (1)")
        eq(value(con, "SELECT redlock_release('cf:o')"), 1, "released before COMMIT when allowed")
        con.execute("COMMIT")
        h.redlock_error(con, "SELECT redlock_config('release_in_write_txn', 2)", contains=("0 (refused",))
        con.close()


def test_close_with_uncommitted_writes_still_releases():
    c = cluster()
    with tempfile.TemporaryDirectory() as d:
        con = h.connect(c, db_file(d))
        tok = is_token(value(con, "SELECT redlock_acquire('cf:c', 60000)"))
        con.execute("BEGIN")
        con.execute("INSERT INTO results VALUES (1)")
        holds(c, "cf:c", tok, 60000, "held", settle_cons=(con,))
        con.close()
        no_key(c, "cf:c", "released at close (the writes rolled back)")


def test_python_module_transaction_and_readme_example():
    """The sqlite3 module's own BEGIN before an INSERT: the README's old
    example (release in finally, before commit) is refused; the fixed one
    (commit, rollback, release) works and the next holder sees the rows."""
    c = cluster()
    with tempfile.TemporaryDirectory() as d:
        path = db_file(d)
        con = sqlite3.connect(path)     # the module's default: it opens transactions
        con.enable_load_extension(True)
        os.environ["REDLOCK_NODES"] = h.nodes_env_of(c)
        try:
            con.load_extension(h.EXT)
        finally:
            del os.environ["REDLOCK_NODES"]
        con.execute("SELECT redlock_config('timeout_ms', ?)", (h.RELAXED_TIMEOUT_MS,))
        token = is_token(con.execute("SELECT redlock_acquire(?, ?, ?)", ("cf:py", 30000, 5000)).fetchone()[0])
        con.execute("INSERT INTO results VALUES (1)")
        try:
            con.execute("SELECT redlock_release(?, ?)", ("cf:py", token))
            raise AssertionError("a release before commit() must be refused")
        except sqlite3.OperationalError as e:
            check(str(e).startswith("redlock: ") and "COMMIT first" in str(e), "the error: %s" % e)
        # README's example from here on
        try:
            con.execute("INSERT INTO results VALUES (2)")
            con.commit()
        finally:
            con.rollback()
            eq(con.execute("SELECT redlock_release(?, ?)", ("cf:py", token)).fetchone()[0], 1, "release")
        other = h.connect(c, path)
        is_token(value(other, "SELECT redlock_acquire('cf:py', 10000)"), "the next holder")
        eq(value(other, "SELECT count(*) FROM results"), 2, "the next holder sees the committed rows")
        other.close()
        con.close()


def test_shell_release_before_commit():
    c = cluster()
    with tempfile.TemporaryDirectory() as d:
        path = db_file(d)
        rc, out, err = h.shell("SELECT 'tok:' || redlock_acquire('cf:sh', 60000);\n"
                               "BEGIN;\nINSERT INTO results VALUES (1);\n"
                               "SELECT 'early:' || redlock_release('cf:sh');\n"
                               "SELECT 'held:' || count(*) FROM redlock_locks;\n"
                               "COMMIT;\n"
                               "SELECT 'late:' || redlock_release('cf:sh');\n", c, db=path)
        eq(rc, 1, "exit status of a script with an error")
        check("redlock: redlock_release() refused" in err and "COMMIT first" in err, "stderr: %r" % err)
        lines = out.split()
        check(lines[0].startswith("tok:"), "acquired: %r" % out)
        check("early:" not in out, "the early release gave no value: %r" % out)
        eq(lines[1:], ["held:1", "late:1"], "held until COMMIT, released after it")
        no_key(c, "cf:sh", "after the script")
