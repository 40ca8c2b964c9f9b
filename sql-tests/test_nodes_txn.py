"""redlock_nodes edits follow the transaction they are made in: Python's
default sqlite3 mode (which opens a transaction before every INSERT, UPDATE
and DELETE by itself), `with con:`, explicit BEGIN ... COMMIT and SAVEPOINTs
in the sqlite3 shell, better-sqlite3's db.transaction().

* An edit inside a transaction shows at once to the statements after it
  (they read their own writes), lasts when the transaction commits, and is
  undone by ROLLBACK, by ROLLBACK TO its savepoint, and by the statement
  savepoint of a statement that fails half way.
* Until the transaction ends, no lock can be taken, adopted or shared: it
  would count on nodes a ROLLBACK can still take away. The error says to
  COMMIT first.
* The old refusals stay: no edit while this connection holds a lock (in a
  transaction too), the password-keeping rules for UPDATE.
* Autocommit (isolation_level=None) is unchanged: each statement counts at
  once, all or nothing.

Run: /usr/bin/python3 sql-tests/run.py test_nodes_txn
"""
# SPDX-License-Identifier: BSD-3-Clause

import json
import os
import socket
import sqlite3
import subprocess
import unittest

import harness as h
from harness import check, eq, is_token, node_rows, redlock_error, value

# not a timing test: a slow node on a loaded machine must not fail it
h.default_config(timeout_ms=h.RELAXED_TIMEOUT_MS)

NODE, NODE_WHY = h.node_setup()
COMMIT_FIRST = ("not committed", "COMMIT", "con.commit()")


def ports(con):
    return [r["port"] for r in node_rows(con)]


def rows(con):
    return [(r["id"], r["host"], r["port"], r["timeout_ms"]) for r in node_rows(con)]


def acquire(con, res, ttl=10000):
    return value(con, "SELECT redlock_acquire(?, ?)", res, ttl)


def six_three_seven_nine_free():
    s = socket.socket()
    try:
        return s.connect_ex(("127.0.0.1", 6379)) != 0
    finally:
        s.close()


# --------------------------------------------------------------------------
# Python's default mode
# --------------------------------------------------------------------------

def test_python_default_mode_edits_then_commit_then_acquire_3n():
    """The first thing a Python user writes: connect with the defaults,
    replace the default node, commit, take a lock."""
    c = h.shared_cluster(3)
    con = h.connect(None, python_default=True)
    eq(ports(con), [6379], "the default node before any edit")
    con.execute("DELETE FROM redlock_nodes")
    con.executemany("INSERT INTO redlock_nodes(url) VALUES (?)", [(n.url,) for n in c.nodes])
    check(con.in_transaction, "Python opened a transaction for the INSERT")
    eq(ports(con), [n.port for n in c.nodes], "the statements after the edits read them")
    redlock_error(con, "SELECT redlock_acquire('py-dflt', 10000)", contains=COMMIT_FIRST)
    con.commit()
    eq(ports(con), [n.port for n in c.nodes], "the nodes after commit()")
    tok = is_token(acquire(con, "py-dflt"), "acquire after commit()")
    h.holds(c.nodes, "py-dflt", tok, 10000, "the lock on every node", settle_cons=(con,))
    eq(value(con, "SELECT redlock_release('py-dflt')"), 1, "release")


def test_python_default_mode_rollback_undoes_every_edit_3n():
    c = h.shared_cluster(3)
    con = h.connect(c, python_default=True)
    before = rows(con)
    con.execute("DELETE FROM redlock_nodes WHERE id = 1")
    con.execute("UPDATE redlock_nodes SET timeout_ms = 1234 WHERE id = 2")
    con.execute("INSERT INTO redlock_nodes(host, port) VALUES ('127.0.0.1', 1)")
    eq([r[2] for r in rows(con)], [c.nodes[1].port, c.nodes[2].port, 1], "the edits, read inside")
    eq(rows(con)[0][3], 1234, "the UPDATE, read inside")
    con.rollback()
    eq(rows(con), before, "the nodes after rollback()")
    tok = is_token(acquire(con, "py-rb"), "acquire on the nodes as they were")
    h.holds(c.nodes, "py-rb", tok, 10000, "the lock on all three", settle_cons=(con,))
    eq(value(con, "SELECT redlock_release('py-rb')"), 1, "release")


def test_python_with_block_commits_the_nodes_3n():
    """`with con:` commits when the block ends: the lock is taken after it,
    and a block that writes data while the lock is held is released after
    the block (its COMMIT)."""
    c = h.shared_cluster(3)
    con = h.connect(None, python_default=True)
    con.execute("CREATE TABLE t(n)")
    with con:
        con.execute("DELETE FROM redlock_nodes")
        con.executemany("INSERT INTO redlock_nodes(url) VALUES (?)", [(n.url,) for n in c.nodes])
    check(not con.in_transaction, "the block committed")
    tok = is_token(acquire(con, "py-with"), "acquire after the block")
    with con:
        con.execute("INSERT INTO t VALUES (1)")
    eq(value(con, "SELECT redlock_release('py-with')"), 1, "release after the block that wrote")
    eq(value(con, "SELECT count(*) FROM t"), 1, "the block's write is there")
    h.no_key(c, "py-with", settle_cons=(con,))
    del tok


def test_python_with_block_that_raises_keeps_the_nodes():
    c = h.shared_cluster(1)
    con = h.connect(c, python_default=True)
    before = rows(con)
    try:
        with con:
            con.execute("DELETE FROM redlock_nodes")
            con.execute("INSERT INTO redlock_nodes(host, port) VALUES ('127.0.0.1', 1)")
            raise KeyError("the block fails")
    except KeyError:
        pass
    eq(rows(con), before, "a block that raised changed no node")
    try:
        with con:
            con.execute("DELETE FROM redlock_nodes")
            con.execute("INSERT INTO redlock_nodes(host, port) VALUES ('127.0.0.1', 70000)")
    except sqlite3.Error as e:
        check("port" in str(e), "the bad row's error: %s" % e)
    eq(rows(con), before, "a block whose INSERT failed changed no node")
    is_token(acquire(con, "py-with-raise"), "the lock on the old node")
    value(con, "SELECT redlock_release_all()")


def test_python_edit_refused_while_holding_a_lock():
    """Holding a lock, an edit is refused inside the transaction Python opens
    as it was outside; the transaction's data writes are not lost by it."""
    c = h.shared_cluster(1)
    con = h.connect(c, python_default=True)
    con.execute("CREATE TABLE t(n)")
    tok = is_token(acquire(con, "py-held"), "acquire")
    con.execute("INSERT INTO t VALUES (1)")
    check(con.in_transaction, "a data write opened a transaction")
    for sql in ("DELETE FROM redlock_nodes", "INSERT INTO redlock_nodes(host, port) VALUES ('127.0.0.1', 1)",
                "UPDATE redlock_nodes SET timeout_ms = 99"):
        redlock_error(con, sql, contains=("holds 1 lock", "redlock_release_all()"))
    con.commit()
    eq(value(con, "SELECT count(*) FROM t"), 1, "the data write committed")
    eq(value(con, "SELECT redlock_release(?, ?)", "py-held", tok), 1, "release")
    con.execute("DELETE FROM redlock_nodes")
    con.rollback()
    eq(len(ports(con)), 1, "without locks, the edit worked and rollback() undid it")


def test_isolation_level_none_is_unchanged():
    """Autocommit: each statement changes the list at once and all or
    nothing; a lock can be taken right after, with no COMMIT."""
    c = h.shared_cluster(1)
    con = h.connect([])
    con.execute("INSERT INTO redlock_nodes(url) VALUES (?)", (c.nodes[0].url,))
    check(not con.in_transaction, "no transaction")
    tok = is_token(acquire(con, "ac"), "acquire right after the INSERT")
    eq(value(con, "SELECT redlock_release('ac', ?)", tok), 1, "release")
    redlock_error(con, "INSERT INTO redlock_nodes(host, port) VALUES ('127.0.0.1', 7), ('127.0.0.1', 0)",
                  contains=("port",))
    eq(ports(con), [c.nodes[0].port], "a failing two-row INSERT changed nothing")


# --------------------------------------------------------------------------
# explicit transactions and savepoints (SQL as the shell runs it)
# --------------------------------------------------------------------------

def test_rollback_to_savepoint_undoes_only_what_came_after_it():
    con = h.connect("redis://127.0.0.1:7001,redis://127.0.0.1:7002")
    con.execute("BEGIN")
    con.execute("INSERT INTO redlock_nodes(host, port) VALUES ('127.0.0.1', 7003)")
    con.execute("SAVEPOINT s1")
    con.execute("INSERT INTO redlock_nodes(host, port) VALUES ('127.0.0.1', 7004)")
    con.execute("DELETE FROM redlock_nodes WHERE port = 7001")
    con.execute("SAVEPOINT s2")
    con.execute("UPDATE redlock_nodes SET port = 7005 WHERE port = 7002")
    eq(ports(con), [7005, 7003, 7004], "inside s2")
    con.execute("ROLLBACK TO s2")
    eq(ports(con), [7002, 7003, 7004], "after ROLLBACK TO s2")
    con.execute("ROLLBACK TO s1")
    eq(ports(con), [7001, 7002, 7003], "after ROLLBACK TO s1")
    con.execute("INSERT INTO redlock_nodes(host, port) VALUES ('127.0.0.1', 7006)")
    con.execute("ROLLBACK TO s1")
    eq(ports(con), [7001, 7002, 7003], "s1 stays open: a second ROLLBACK TO s1")
    con.execute("INSERT INTO redlock_nodes(host, port) VALUES ('127.0.0.1', 7007)")
    con.execute("RELEASE s1")
    con.execute("COMMIT")
    eq(ports(con), [7001, 7002, 7003, 7007], "after COMMIT")


def test_savepoints_opened_before_the_first_edit():
    """The table joins a transaction that has savepoints already (SQLite
    tells it only of the innermost); a ROLLBACK TO an outer one undoes it."""
    con = h.connect("redis://127.0.0.1:7001")
    con.execute("BEGIN")
    con.execute("SAVEPOINT a")
    con.execute("SAVEPOINT b")
    con.execute("INSERT INTO redlock_nodes(host, port) VALUES ('127.0.0.1', 7002)")
    con.execute("SAVEPOINT c")
    con.execute("DELETE FROM redlock_nodes WHERE port = 7001")
    con.execute("ROLLBACK TO a")
    eq(ports(con), [7001], "after ROLLBACK TO the outer savepoint")
    con.execute("INSERT INTO redlock_nodes(host, port) VALUES ('127.0.0.1', 7003)")
    con.execute("RELEASE a")
    con.execute("ROLLBACK")
    eq(ports(con), [7001], "after ROLLBACK of the transaction")


def test_rollback_to_a_savepoint_opened_before_the_first_edit():
    """The table joins inside SAVEPOINT s, through the statement savepoint
    of its first edit, which is then released: a ROLLBACK TO s must still
    undo the edit (found by review: the edit stayed, and the COMMIT after
    it kept a list the user had undone, so two connections counted one
    lock on different nodes). Then the same two levels deep, and a later
    savepoint of a lower level than the join."""
    con = h.connect("redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003")
    con.execute("BEGIN")
    con.execute("SAVEPOINT s")
    con.execute("DELETE FROM redlock_nodes WHERE port = 7002")
    eq(ports(con), [7001, 7003], "the delete, staged")
    con.execute("ROLLBACK TO s")
    eq(ports(con), [7001, 7002, 7003], "after ROLLBACK TO s")
    con.execute("COMMIT")
    eq(ports(con), [7001, 7002, 7003], "after COMMIT")
    con.execute("BEGIN")
    con.execute("SAVEPOINT a")
    con.execute("SAVEPOINT b")
    con.execute("DELETE FROM redlock_nodes WHERE port = 7003")
    con.execute("ROLLBACK TO b")
    eq(ports(con), [7001, 7002, 7003], "after ROLLBACK TO b")
    con.execute("DELETE FROM redlock_nodes WHERE port = 7001")
    con.execute("RELEASE b")
    con.execute("SAVEPOINT d")
    con.execute("DELETE FROM redlock_nodes WHERE port = 7002")
    con.execute("ROLLBACK TO d")
    eq(ports(con), [7002, 7003], "after ROLLBACK TO d: the edit before d stays")
    con.execute("ROLLBACK TO a")
    eq(ports(con), [7001, 7002, 7003], "after ROLLBACK TO a")
    con.execute("RELEASE a")
    con.execute("COMMIT")
    eq(ports(con), [7001, 7002, 7003], "after COMMIT")


def test_savepoint_as_the_transaction():
    """SAVEPOINT outside BEGIN opens the transaction: ROLLBACK TO it undoes
    everything and leaves it open, RELEASE commits."""
    con = h.connect("redis://127.0.0.1:7001")
    con.execute("SAVEPOINT outer_sp")
    con.execute("INSERT INTO redlock_nodes(host, port) VALUES ('127.0.0.1', 7002)")
    con.execute("ROLLBACK TO outer_sp")
    eq(ports(con), [7001], "after ROLLBACK TO")
    con.execute("DELETE FROM redlock_nodes")
    con.execute("INSERT INTO redlock_nodes(host, port) VALUES ('127.0.0.1', 7003)")
    con.execute("RELEASE outer_sp")
    check(not con.in_transaction, "RELEASE ended the transaction")
    eq(ports(con), [7003], "after RELEASE")


def test_failing_statement_inside_a_transaction_changes_nothing_of_its_own():
    """A statement that fails half way is undone (SQLite's statement
    savepoint); the transaction's earlier edits stay."""
    con = h.connect("redis://127.0.0.1:7001,redis://127.0.0.1:7002")
    con.execute("BEGIN")
    con.execute("INSERT INTO redlock_nodes(host, port) VALUES ('127.0.0.1', 7003)")
    redlock_error(con, "INSERT INTO redlock_nodes(host, port) VALUES ('127.0.0.1', 7004), ('127.0.0.1', 0)",
                  contains=("port",))
    redlock_error(con, "UPDATE redlock_nodes SET port = CASE id WHEN 1 THEN 7777 ELSE 0 END", contains=("port",))
    redlock_error(con, "INSERT INTO redlock_nodes(host, port) VALUES ('127.0.0.1', 7003)",
                  contains=("listed",))
    eq(ports(con), [7001, 7002, 7003], "after the failed statements, inside")
    con.execute("COMMIT")
    eq(ports(con), [7001, 7002, 7003], "after COMMIT")


def test_no_lock_while_edits_are_staged_1n():
    """Taking, sharing or adopting a lock in the transaction that changed
    the nodes is refused until it ends; after COMMIT it works."""
    c = h.shared_cluster(1)
    con = h.connect([])
    other = h.connect(c)
    detached = is_token(value(other, "SELECT redlock_detach('adoptable') WHERE redlock_acquire('adoptable', 60000) "
                                     "IS NOT NULL"), "a detached lock")
    con.execute("BEGIN")
    con.execute("INSERT INTO redlock_nodes(url) VALUES (?)", (c.nodes[0].url,))
    for sql, args in (("SELECT redlock_acquire('staged', 10000)", ()),
                      ("SELECT redlock_lock('staged', 10000)", ()),
                      ("SELECT redlock_acquire_shared('staged', 10000)", ()),
                      ("SELECT redlock_acquire_many('[\"staged\"]', 10000)", ()),
                      ("SELECT redlock_adopt('adoptable', ?)", (detached,))):
        redlock_error(con, sql, *args, contains=COMMIT_FIRST)
    eq(c.nodes[0].get("staged"), None, "no key was written")
    con.execute("COMMIT")
    tok = is_token(acquire(con, "staged"), "acquire after COMMIT")
    check(value(con, "SELECT redlock_adopt('adoptable', ?)", detached) > 0, "adopt after COMMIT")
    eq(value(con, "SELECT redlock_release_all()"), 2, "release both")
    del tok


def test_release_by_token_while_edits_are_staged_1n():
    """A change of redlock_nodes makes the transaction a write transaction
    (SQLite's own state), so a release by token is refused before COMMIT
    like after any write; with release_in_write_txn it goes to the nodes as
    they are in the transaction."""
    c = h.shared_cluster(1)
    other = h.connect(c)
    tok = is_token(value(other, "SELECT redlock_detach('by-token') WHERE redlock_acquire('by-token', 60000) "
                                "IS NOT NULL"), "a detached lock")
    con = h.connect([])
    con.execute("BEGIN")
    con.execute("INSERT INTO redlock_nodes(url) VALUES (?)", (c.nodes[0].url,))
    redlock_error(con, "SELECT redlock_release('by-token', ?)", tok, contains=("uncommitted writes", "COMMIT"))
    value(con, "SELECT redlock_config('release_in_write_txn', 1)")
    eq(value(con, "SELECT redlock_release('by-token', ?)", tok), 1, "released on the staged node")
    con.execute("ROLLBACK")
    eq(c.nodes[0].get("by-token"), None, "the key is gone")
    eq(ports(con), [], "the node is gone with the ROLLBACK")


def test_edit_refused_once_a_lock_is_taken_in_the_transaction_1n():
    c = h.shared_cluster(1)
    con = h.connect(c)
    con.execute("BEGIN")
    is_token(acquire(con, "in-txn"), "acquire inside BEGIN")
    redlock_error(con, "INSERT INTO redlock_nodes(host, port) VALUES ('127.0.0.1', 1)",
                  contains=("holds 1 lock", "redlock_release_all()"))
    con.execute("COMMIT")
    eq(ports(con), [c.nodes[0].port], "the nodes")
    value(con, "SELECT redlock_release_all()")


def test_password_rules_apply_to_edits_inside_a_transaction():
    """The masked password is kept only for the same server, in a
    transaction as outside; a ROLLBACK brings the password back."""
    n = h.RedisNode(password="Txn-Pa55-word")
    con = h.connect(n)
    con.execute("BEGIN")
    redlock_error(con, "UPDATE redlock_nodes SET port = 1", contains=("password",))
    con.execute("UPDATE redlock_nodes SET timeout_ms = 3000")
    con.execute("UPDATE redlock_nodes SET password = NULL")
    eq(node_rows(con)[0]["password"], None, "the password gone, inside")
    con.execute("ROLLBACK")
    eq(node_rows(con)[0]["password"], "********", "the password back after ROLLBACK")
    tok = is_token(acquire(con, "txn-pw"), "acquire with the password")
    eq(n.get("txn-pw"), tok, "the key on the node")
    value(con, "SELECT redlock_release_all()")


def test_tls_settings_cannot_change_while_edits_are_staged():
    """tls_verify 0 is refused while a TLS node with a password takes its
    check from the setting. Deleting that node in a transaction must not
    open the way: a ROLLBACK would bring it back, password and all, under
    the new value."""
    con = h.connect("rediss://:Tls-Pa55-word@127.0.0.1:7001")
    redlock_error(con, "SELECT redlock_config('tls_verify', 0)", contains=("node 1", "password"))
    con.execute("BEGIN")
    con.execute("DELETE FROM redlock_nodes")
    for sql in ("SELECT redlock_config('tls_verify', 0)", "SELECT redlock_config('tls_ca_dir', '/tmp')"):
        redlock_error(con, sql, contains=("not committed", "COMMIT or ROLLBACK"))
    eq(value(con, "SELECT redlock_config('tls_verify')"), 1, "reading a setting is fine")
    con.execute("ROLLBACK")
    eq(value(con, "SELECT redlock_config('tls_verify')"), 1, "tls_verify after the ROLLBACK")
    eq(node_rows(con)[0]["password"], "********", "the node is back with its password")
    con.execute("DELETE FROM redlock_nodes")
    eq(value(con, "SELECT redlock_config('tls_verify', 0)"), 0, "allowed once the DELETE is committed")


def test_close_with_edits_staged():
    """Closing a connection mid-transaction rolls it back; nothing is left
    behind (the sanitizer run checks the memory)."""
    con = h.connect("redis://127.0.0.1:7001", python_default=True)
    con.execute("DELETE FROM redlock_nodes")
    con.execute("INSERT INTO redlock_nodes(host, port) VALUES ('127.0.0.1', 7002)")
    con.execute("SAVEPOINT sp")
    con.execute("INSERT INTO redlock_nodes(host, port) VALUES ('127.0.0.1', 7003)")
    con.close()


# --------------------------------------------------------------------------
# the sqlite3 shell and Node
# --------------------------------------------------------------------------

def test_shell_begin_commit_sets_the_nodes_3n():
    c = h.shared_cluster(3)
    inserts = "\n".join("INSERT INTO redlock_nodes(url) VALUES ('%s');" % n.url for n in c.nodes)
    out = h.sh("BEGIN;\nDELETE FROM redlock_nodes;\n%s\nCOMMIT;\n"
               "BEGIN;\nDELETE FROM redlock_nodes;\nROLLBACK;\n"
               "SELECT count(*) FROM redlock_nodes;\n"
               "SELECT length(redlock_acquire('sh-txn', 10000));\n"
               "SELECT redlock_release('sh-txn');\n" % inserts, "", "BEGIN ... COMMIT in the shell")
    eq(out, ["3", "60", "1"], "nodes after COMMIT and ROLLBACK, token length, release")


def test_shell_lock_inside_the_editing_transaction_is_an_error():
    c = h.shared_cluster(1)
    rc, out, err = h.shell(".bail on\nBEGIN;\nINSERT INTO redlock_nodes(url) VALUES ('%s');\n"
                           "SELECT redlock_lock('sh-staged', 10000);\nSELECT 'went on';\n" % c.nodes[0].url, "")
    check(rc != 0 and "not committed" in err and "went on" not in out,
          "the shell stops at the lock call: rc %r, out %r, err %r" % (rc, out, err))
    eq(c.nodes[0].get("sh-staged"), None, "no key")


def test_node_db_transaction_edits_the_nodes_3n():
    if NODE is None:
        raise unittest.SkipTest(NODE_WHY)
    c = h.shared_cluster(3)
    env = h.node_env(None)
    r = subprocess.run([NODE, os.path.join(h.NODE_DIR, "nodes_txn.js"), h.EXT_SO, "node:txn"] +
                       [n.url for n in c.nodes], cwd=h.NODE_DIR, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=25)
    eq(r.returncode, 0, "node nodes_txn.js exit status (stderr: %s)" % r.stderr.strip()[-500:])
    out = json.loads(r.stdout)
    want = [n.port for n in c.nodes]
    eq(out["before"], [6379], "the default node")
    eq(out["inside"], want, "the edits read inside db.transaction()")
    check(out["acquire_inside"] and "not committed" in out["acquire_inside"],
          "a lock inside the transaction that edits: %r" % out["acquire_inside"])
    eq(out["after_commit"], want, "after the transaction")
    is_token(out["token"], "the lock after the transaction")
    eq(out["released"], 1, "released")
    eq(out["throw_error"], "boom", "the throwing transaction's error")
    eq(out["after_throw"], want, "a throwing transaction changed no node")
    eq(out["nested_error"], "inner", "the nested transaction's error")
    eq(out["inside_after_nested"], want + [1], "the nested one's DELETE undone, the outer INSERT kept")
    eq(out["after_nested"], want + [1], "after the outer transaction")
    eq(out["after_autocommit_delete"], want, "a DELETE outside a transaction")
    is_token(out["token2"], "the lock at the end")
    eq(out["released2"], 1, "released at the end")
    h.no_key(c, "node:txn")


# --------------------------------------------------------------------------
# the default node's hint
# --------------------------------------------------------------------------

def test_default_node_error_shows_the_way_that_works():
    check(six_three_seven_nine_free(), "something listens on 127.0.0.1:6379; this test needs it free")
    con = h.connect(None, python_default=True)
    msg = redlock_error(con, "SELECT redlock_acquire('hint', 10000)",
                        contains=("REDLOCK_NODES", "INSERT INTO redlock_nodes(url)", "COMMIT", "con.commit()"))
    check(len(msg) < 600, "the error stays short: %d bytes" % len(msg))


def test_no_nodes_error_shows_the_way_that_works():
    con = h.connect([], python_default=True)
    redlock_error(con, "SELECT redlock_acquire('hint', 10000)",
                  contains=("no Redis nodes", "INSERT INTO redlock_nodes(url)", "COMMIT", "con.commit()"))
