"""Misuse: each is an error whose text starts with 'redlock: ', and takes no
lock. Also SQLITE_DIRECTONLY: a database file cannot call the functions or
the table through a view or a trigger."""
# SPDX-License-Identifier: BSD-3-Clause

import os
import sqlite3
import tempfile

import harness as h
from harness import check, eq, is_token, redlock_error, sql_error, value

# not a timing test: a slow node on a loaded machine must not fail it
h.default_config(timeout_ms=h.RELAXED_TIMEOUT_MS)

BAD_ACQUIRE = [
    ((None, 1000), "NULL resource"),
    (("", 1000), "empty resource"),
    (("r", 0), "ttl 0"),
    (("r", -1), "negative ttl"),
    (("r", 1.5), "ttl 1.5"),
    (("r", "10"), "ttl as text '10'"),
    (("r", None), "NULL ttl"),
    (("r", b"\x10"), "ttl as a blob"),
    (("r", 1000, -1), "negative wait_ms"),
    (("r", 1000, 1.5), "wait_ms 1.5"),
    (("r", 1000, "x"), "wait_ms 'x'"),
]

BAD_EXTEND = [
    ((None, 1000), "NULL resource"),
    (("", 1000), "empty resource"),
    (("r", 0), "ttl 0"),
    (("r", -5), "negative ttl"),
    (("r", 1.5), "ttl 1.5"),
    (("r", "10"), "ttl as text '10'"),
    (("r", None), "NULL ttl"),
]

BAD_RELEASE = [
    ((None,), "NULL resource"),
    (("",), "empty resource"),
    ((None, "0123456789abcdef0123456789abcdef"), "NULL resource with token"),
    (("", "0123456789abcdef0123456789abcdef"), "empty resource with token"),
]


def _fn_sql(fn, nargs):
    return "SELECT %s(%s)" % (fn, ", ".join("?" * nargs))


def _no_keys(c, what):
    for node in c:
        eq(node.dbsize(), 0, "keys on %s after %s" % (node.addr, what))


def test_acquire_bad_arguments():
    c = h.shared_cluster(1)
    con = h.connect(c)
    for args, what in BAD_ACQUIRE:
        redlock_error(con, _fn_sql("redlock_acquire", len(args)), *args,
                      what="redlock_acquire with %s" % what)
    _no_keys(c, "refused acquires")


def test_extend_bad_arguments():
    c = h.shared_cluster(1)
    con = h.connect(c)
    is_token(value(con, "SELECT redlock_acquire('r', 10000)"))
    for args, what in BAD_EXTEND:
        redlock_error(con, _fn_sql("redlock_extend", len(args)), *args,
                      what="redlock_extend with %s" % what)
    p = c[0].pttl("r")
    check(0 < p <= 10000, "PTTL of the held lock after refused extends: %d" % p)


def test_release_bad_arguments():
    c = h.shared_cluster(1)
    con = h.connect(c)
    for args, what in BAD_RELEASE:
        redlock_error(con, _fn_sql("redlock_release", len(args)), *args,
                      what="redlock_release with %s" % what)


def test_misuse_on_three_nodes_takes_nothing():
    c = h.shared_cluster(3)
    con = h.connect(c)
    for args, what in BAD_ACQUIRE:
        redlock_error(con, _fn_sql("redlock_acquire", len(args)), *args,
                      what="redlock_acquire with %s" % what)
    _no_keys(c, "refused acquires")


def test_wrong_argument_counts():
    con = h.connect(h.shared_cluster(1))
    for sql in ("SELECT redlock_acquire()", "SELECT redlock_acquire('r')",
                "SELECT redlock_acquire('r', 1000, 0, 'x')",
                "SELECT redlock_release()", "SELECT redlock_release('r', 'a', 'b')",
                "SELECT redlock_extend('r')", "SELECT redlock_extend()",
                "SELECT redlock_extend('r', 1000, 'a', 'b')",
                "SELECT redlock_config()", "SELECT redlock_config('a', 'b', 'c')",
                "SELECT redlock_version('x')"):
        sql_error(con, sql, what=sql)


def test_no_nodes_configured():
    c = h.shared_cluster(1)
    con = h.connect(c)
    con.execute("DELETE FROM redlock_nodes")
    msg = redlock_error(con, "SELECT redlock_acquire('r', 1000)",
                        what="acquire with no nodes configured")
    check("node" in msg.lower(), "the error should say that no nodes are configured: %r" % msg)
    redlock_error(con, "SELECT redlock_release('r', '0123456789abcdef0123456789abcdef')",
                  what="release with no nodes configured")
    redlock_error(con, "SELECT redlock_extend('r', 1000, '0123456789abcdef0123456789abcdef')",
                  what="extend with no nodes configured")
    _no_keys(c, "calls with no nodes")


def _make_hostile_db(path):
    """A database file whose schema tries to use the extension. Written by a
    connection without the extension: sqlite does not check function names
    when a view or trigger is created."""
    db = sqlite3.connect(path, isolation_level=None)
    db.executescript("""
        CREATE VIEW v_acquire AS SELECT redlock_acquire('dv', 10000) AS t;
        CREATE VIEW v_release AS SELECT redlock_release('dv', '0123456789abcdef0123456789abcdef');
        CREATE VIEW v_extend AS SELECT redlock_extend('dv', 10000, '0123456789abcdef0123456789abcdef');
        CREATE VIEW v_nodes AS SELECT * FROM redlock_nodes;
        CREATE TABLE t(x);
        CREATE TRIGGER t_acquire AFTER INSERT ON t BEGIN
            SELECT redlock_acquire('dt', 10000);
        END;
        CREATE TABLE t2(x);
        CREATE TRIGGER t2_nodes AFTER INSERT ON t2 BEGIN
            INSERT INTO redlock_nodes(host, port) VALUES ('127.0.0.1', 7777);
        END;
    """)
    db.close()


def test_directonly_view_and_trigger_refused():
    c = h.shared_cluster(1)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "hostile.db")
        _make_hostile_db(path)
        con = h.connect(c, database=path)
        for v in ("v_acquire", "v_release", "v_extend", "v_nodes"):
            sql_error(con, "SELECT * FROM %s" % v, what="SELECT from view %s in the file" % v)
        sql_error(con, "INSERT INTO t VALUES (1)",
                  what="trigger in the file calling redlock_acquire")
        sql_error(con, "INSERT INTO t2 VALUES (1)",
                  what="trigger in the file inserting into redlock_nodes")
        eq(value(con, "SELECT count(*) FROM redlock_nodes WHERE port = 7777"), 0,
           "node added by a trigger")
        _no_keys(c, "views and triggers")
        # the same calls made directly are fine
        is_token(value(con, "SELECT redlock_acquire('dv', 10000)"), "direct call")
        con.close()


def test_directonly_from_shell():
    c = h.shared_cluster(1)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "hostile.db")
        _make_hostile_db(path)
        rc, out, err = h.shell("SELECT * FROM v_acquire;", c, db=path)
        check(rc != 0 and err.strip(), "shell: view calling redlock_acquire should fail; "
              "rc=%r out=%r err=%r" % (rc, out, err))
        _no_keys(c, "the shell's view")
