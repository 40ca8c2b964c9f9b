"""Authentication against redis-server processes started that way:
requirepass nodes and ACL-user nodes, credentials given by columns and in
the URL, db selection (the key lands in that db), wrong or missing
credentials as a clear per-node error (in last_error and in the acquire
error), and the password never shown: not in redlock_nodes (password and
url columns masked), not in any error message, not in redlock_version(),
redlock_config() or redlock_locks, not in what the sqlite3 shell prints.
The Redis user a lock needs (docs/security.md): the documented ACL line
does everything, a user with one command less is refused with the command
named, the list of the scripts' commands matches their text, and a
refusal inside a script names its command."""
# SPDX-License-Identifier: BSD-3-Clause

import json
import os
import re
import sqlite3

import harness as h
from harness import check, eq, is_token, node_rows, value

PW = "Req-Pa55-word"            # requirepass of the password nodes
DEFAULT_PW = "Def-Pa55-word"    # requirepass of the ACL node (its default user)
ALICE_PW = "Al1ce-Pa55-word"    # ACL user alice
WRONG_PW = "Wr0ng-Pa55-word"
SECRETS = (PW, DEFAULT_PW, ALICE_PW, WRONG_PW)
MASK = "********"
SLOW = 2000   # per-node timeout: timing is not under test here (the sanitizer run is slow)
# what the errors say about where the credentials go
NOAUTH_HINT = ("NOAUTH", "needs a password", "redis://:PASSWORD@host:port", "password column")
WRONGPASS_HINT = ("WRONGPASS", "redis://USER:PASSWORD@host:port", "password columns")


def pw_node():
    return h.RedisNode(password=PW)


def acl_node(default_open=False):
    """A node with ACL user alice; its default user needs DEFAULT_PW, or
    nothing at all (default_open: a server that only added a user)."""
    n = h.RedisNode() if default_open else h.RedisNode(password=DEFAULT_PW)
    n.cmd("ACL", "SETUSER", "alice", "on", ">" + ALICE_PW, "~*", "&*", "+@all")
    return n


def url(node, user="", password=None, db=None):
    cred = ""
    if password is not None:
        cred = "%s:%s@" % (user, password)
    elif user:
        cred = user + "@"
    return "redis://%s%s:%d%s" % (cred, node.host, node.port, "" if db is None else "/%d" % db)


def admin(node, db=0):
    """A client with full rights on node (default user), on db."""
    r = h.Resp(node.host, node.port, password=node.password)
    if db:
        r.cmd("SELECT", db)
    return r


def keys_in(node, db):
    r = admin(node, db)
    try:
        return sorted(k for k in r.cmd("KEYS", "*") if not k.endswith(":fence") and "redlock-client:" not in k)
    finally:
        r.close()


def get_in(node, db, key):
    r = admin(node, db)
    try:
        return r.cmd("GET", key)
    finally:
        r.close()


def no_secret(text, what):
    for s in SECRETS:
        check(s not in str(text), "%s shows a password: %r" % (what, text))


def no_secret_in_table(con):
    rows = node_rows(con)
    for r in rows:
        for k, v in r.items():
            no_secret(v, "redlock_nodes.%s" % k)
        if r["password"] is not None:
            eq(r["password"], MASK, "the password column")
            check(r["url"] and ":%s@" % MASK in r["url"], "the url column should mask the password: %r" % r["url"])
    return rows


def acquire_error(con, resource):
    try:
        r = value(con, "SELECT redlock_acquire(?, 10000)", resource)
    except sqlite3.Error as e:
        return str(e)
    raise AssertionError("acquire of %r should fail, returned %r" % (resource, r))


def empty_connection():
    """A connection with no nodes at all (REDLOCK_NODES set but empty)."""
    con = h.connect("", timeout_ms=SLOW)
    eq(value(con, "SELECT count(*) FROM redlock_nodes"), 0, "nodes of an empty REDLOCK_NODES")
    return con


# --------------------------------------------------------------------------
# right credentials
# --------------------------------------------------------------------------

def test_requirepass_in_url_with_db():
    n = pw_node()
    con = h.connect(url(n, password=PW, db=2), timeout_ms=SLOW)
    tok = is_token(value(con, "SELECT redlock_acquire('auth-a', 10000)"), "acquire on a requirepass node")
    eq(get_in(n, 2, "auth-a"), tok, "the key in db 2")
    eq(keys_in(n, 0), [], "keys in db 0")
    rows = no_secret_in_table(con)
    eq((rows[0]["db"], rows[0]["username"], rows[0]["password"], rows[0]["state"], rows[0]["last_error"]),
       (2, None, MASK, "up", None), "the node row")
    eq(rows[0]["url"], "redis://:%s@127.0.0.1:%d/2" % (MASK, n.port), "the url column")
    eq(value(con, "SELECT redlock_release('auth-a')"), 1, "release")
    eq(keys_in(n, 2), [], "keys in db 2 after release")


def test_requirepass_by_columns_with_db():
    n = pw_node()
    con = empty_connection()
    con.execute("INSERT INTO redlock_nodes(host, port, db, password) VALUES (?, ?, 5, ?)",
                (n.host, n.port, PW))
    tok = is_token(value(con, "SELECT redlock_acquire('auth-b', 10000)"), "acquire")
    eq(get_in(n, 5, "auth-b"), tok, "the key in db 5")
    eq(keys_in(n, 0), [], "keys in db 0")
    no_secret_in_table(con)
    eq(value(con, "SELECT redlock_release('auth-b')"), 1, "release")


def test_acl_user_in_url_with_db():
    n = acl_node()
    con = h.connect(url(n, "alice", ALICE_PW, db=3), timeout_ms=SLOW)
    tok = is_token(value(con, "SELECT redlock_acquire('auth-c', 10000)"), "acquire as alice")
    eq(get_in(n, 3, "auth-c"), tok, "the key in db 3")
    eq(keys_in(n, 0), [], "keys in db 0")
    rows = no_secret_in_table(con)
    eq((rows[0]["username"], rows[0]["db"]), ("alice", 3), "username and db columns")
    eq(rows[0]["url"], "redis://alice:%s@127.0.0.1:%d/3" % (MASK, n.port), "the url column")
    # the commands really ran as alice
    r = admin(n)
    try:
        users = [l for l in r.cmd("CLIENT", "LIST").splitlines() if " user=alice " in l]
    finally:
        r.close()
    check(users, "no connection of user alice on the server")
    eq(value(con, "SELECT redlock_release('auth-c')"), 1, "release")


def test_acl_user_by_columns():
    n = acl_node()
    con = empty_connection()
    con.execute("INSERT INTO redlock_nodes(host, port, db, username, password) VALUES (?, ?, 1, 'alice', ?)",
                (n.host, n.port, ALICE_PW))
    tok = is_token(value(con, "SELECT redlock_acquire('auth-d', 10000)"), "acquire as alice")
    eq(get_in(n, 1, "auth-d"), tok, "the key in db 1")
    no_secret_in_table(con)


def test_credentials_with_reserved_characters_in_url():
    """User name and password percent-encoded in the URL; the url column
    shows the user name encoded the same way (it reads back as the same
    node and user)."""
    n = h.RedisNode(password=DEFAULT_PW)
    user, pw = "al@ice:x", "p@ss:w/rd%?#" + ALICE_PW
    n.cmd("ACL", "SETUSER", user, "on", ">" + pw, "~*", "&*", "+@all")
    enc = "al%40ice%3Ax:p%40ss%3Aw%2Frd%25%3F%23" + ALICE_PW
    con = h.connect("redis://%s@127.0.0.1:%d/4" % (enc, n.port), timeout_ms=SLOW)
    tok = is_token(value(con, "SELECT redlock_acquire('auth-e', 10000)"), "acquire with encoded credentials")
    eq(get_in(n, 4, "auth-e"), tok, "the key in db 4")
    rows = no_secret_in_table(con)
    eq(rows[0]["username"], user, "the decoded user name")
    eq(rows[0]["url"], "redis://al%%40ice%%3Ax:%s@127.0.0.1:%d/4" % (MASK, n.port), "the url column")
    # the shown url, with the password given again, is the same node and user
    con2 = empty_connection()
    con2.execute("INSERT INTO redlock_nodes(url) VALUES (?)",
                 (rows[0]["url"].replace(MASK, "p%40ss%3Aw%2Frd%25%3F%23" + ALICE_PW),))
    is_token(value(con2, "SELECT redlock_acquire('auth-e2', 10000)"), "acquire through the shown url")


def test_update_keeps_the_password():
    """An UPDATE of another column reads the password back masked and keeps
    the real one; a new password replaces it. Moving the node to another
    port takes the password again (test_the_masked_password_is_not_kept_for_another_server)."""
    n = pw_node()
    con = empty_connection()
    con.execute("INSERT INTO redlock_nodes(host, port, password) VALUES (?, 1, ?)", (n.host, PW))
    h.redlock_error(con, "UPDATE redlock_nodes SET port = ?", n.port, contains=("give the password again",))
    con.execute("UPDATE redlock_nodes SET port = ?, password = ?", (n.port, PW))
    con.execute("UPDATE redlock_nodes SET timeout_ms = ?", (SLOW,))
    is_token(value(con, "SELECT redlock_acquire('auth-f', 10000)"), "acquire after UPDATEs of the port and timeout")
    value(con, "SELECT redlock_release_all()")   # the nodes cannot change while locks are held
    con.execute("UPDATE redlock_nodes SET password = ?", (WRONG_PW,))
    msg = acquire_error(con, "auth-f2")
    check("WRONGPASS" in msg, "a replaced, wrong password: %r" % msg)
    no_secret(msg, "the error")
    con.execute("UPDATE redlock_nodes SET password = ?", (PW,))
    is_token(value(con, "SELECT redlock_acquire('auth-f3', 10000)"), "acquire with the password set back")
    no_secret_in_table(con)


def test_url_written_back_keeps_the_password():
    """The url column reads back with the password masked; an UPDATE that
    writes it back edited (a parameter added) keeps the real password
    instead of sending the mask to AUTH."""
    n = pw_node()
    con = empty_connection()
    con.execute("INSERT INTO redlock_nodes(url) VALUES (?)", (url(n, password=PW),))
    con.execute("UPDATE redlock_nodes SET url = url || '?timeout_ms=2000'")
    eq(node_rows(con)[0]["timeout_ms"], 2000, "the url's new parameter")
    is_token(value(con, "SELECT redlock_acquire('auth-u', 10000)"), "acquire after the url was written back")
    no_secret_in_table(con)


def test_another_user_name_takes_the_password_again():
    """Redis checks a password for its user: an UPDATE that changed the
    user name kept the password, so SQL that cannot read it could try it
    for other users of the server (and run as one it also opens). A user
    name changed, by column or in the url, takes the password again."""
    n = acl_node()
    n.cmd("ACL", "SETUSER", "bob", "on", ">" + ALICE_PW, "~*", "&*", "+@all")   # the same password
    con = empty_connection()
    con.execute("INSERT INTO redlock_nodes(url) VALUES (?)", (url(n, user="alice", password=ALICE_PW),))
    h.redlock_error(con, "UPDATE redlock_nodes SET username = 'bob'", contains=("give the password again",))
    h.redlock_error(con, "UPDATE redlock_nodes SET url = ?", "redis://bob:%s@127.0.0.1:%d" % (MASK, n.port),
                    contains=("give the password again",))
    h.redlock_error(con, "UPDATE redlock_nodes SET url = ?", "redis://:%s@127.0.0.1:%d" % (MASK, n.port),
                    contains=("give the password again",))
    eq(node_rows(con)[0]["username"], "alice", "the user name left as it was")
    con.execute("UPDATE redlock_nodes SET username = 'bob', password = ?", (ALICE_PW,))
    is_token(value(con, "SELECT redlock_acquire('auth-bob', 10000)"), "as bob, the password given again")
    no_secret_in_table(con)


def test_the_mask_written_to_a_node_without_a_password_sets_none():
    """The mask stands for the node's password; written back to a node
    that has none, it keeps none, in the url as in the password column
    (the url sent the eight asterisks to AUTH as a password)."""
    n = h.RedisNode()
    con = empty_connection()
    con.execute("INSERT INTO redlock_nodes(host, port) VALUES (?, ?)", (n.host, n.port))
    con.execute("UPDATE redlock_nodes SET url = ?", ("redis://:%s@127.0.0.1:%d" % (MASK, n.port),))
    eq(node_rows(con)[0]["password"], None, "no password after the url with the mask")
    con.execute("UPDATE redlock_nodes SET password = ?", (MASK,))
    eq(node_rows(con)[0]["password"], None, "no password after the mask in the column")
    is_token(value(con, "SELECT redlock_acquire('auth-mask', 10000)"), "acquire with no AUTH sent")


# --------------------------------------------------------------------------
# wrong or missing credentials
# --------------------------------------------------------------------------

def _wrong(node, node_url, resource, expect, key_dbs=(0,)):
    con = h.connect(node_url, timeout_ms=SLOW)
    msg = acquire_error(con, resource)
    for e in ("redlock: ", "node 1 127.0.0.1:%d" % node.port) + expect:
        check(e in msg, "the acquire error should mention %r: %r" % (e, msg))
    no_secret(msg, "the acquire error")
    rows = no_secret_in_table(con)
    err = rows[0]["last_error"] or ""
    for e in expect:
        check(e in err, "last_error should mention %r: %r" % (e, err))
    for db in key_dbs:
        eq(keys_in(node, db), [], "keys in db %d after a refused acquire" % db)
    return msg


def test_wrong_password_requirepass():
    n = pw_node()
    _wrong(n, url(n, password=WRONG_PW), "auth-g", ("AUTH failed",) + WRONGPASS_HINT)


def test_wrong_password_acl_user():
    n = acl_node()
    _wrong(n, url(n, "alice", WRONG_PW, db=2), "auth-h", ("AUTH failed", "WRONGPASS"), (0, 2))


def test_unknown_acl_user():
    n = acl_node()
    _wrong(n, url(n, "bob", ALICE_PW), "auth-i", ("AUTH failed", "WRONGPASS"))


def test_wrong_password_first_command_long():
    """A set of names as the first command of a connection with a wrong
    password: Redis refuses a command of more than 10 arguments from a
    client not yet authenticated and closes the connection, which must not
    hide AUTH's own answer, in the error nor in last_error, then or on the
    next call."""
    n = pw_node()
    con = h.connect(url(n, password=WRONG_PW), timeout_ms=SLOW)
    names = json.dumps(["auth-m%d" % i for i in range(6)])
    for what in ("first call", "next call"):
        msg = h.redlock_error(con, "SELECT redlock_acquire_many(?, 10000)", names)
        check("AUTH failed" in msg and "WRONGPASS" in msg, "%s: the error should say AUTH failed: %r" % (what, msg))
        no_secret(msg, "the acquire_many error")
        err = no_secret_in_table(con)[0]["last_error"] or ""
        check("AUTH failed" in err, "%s: last_error should say AUTH failed: %r" % (what, err))
    eq(keys_in(n, 0), [], "no key left")


def test_missing_password_is_a_refusal():
    """No password given to a requirepass server: the node is refused (not
    up), and both last_error and the acquire error say where the password
    goes, on the first call and on the next (late replies keep it); the
    ping agrees; once the password is given, the node is up."""
    n = pw_node()
    con = h.connect(url(n), timeout_ms=SLOW)
    for what in ("first acquire", "second acquire"):
        msg = acquire_error(con, "auth-j")
        for e in ("redlock: ", "node 1 127.0.0.1:%d" % n.port) + NOAUTH_HINT:
            check(e in msg, "the %s error should mention %r: %r" % (what, e, msg))
        check("the rest is not shown" not in msg, "the %s error gives the reason itself: %r" % (what, msg))
        h.settle(con)
        row = no_secret_in_table(con)[0]
        eq(row["state"], "refused", "state after the %s" % what)
        for e in NOAUTH_HINT:
            check(e in (row["last_error"] or ""), "last_error after the %s should mention %r: %r"
                  % (what, e, row["last_error"]))
    eq(keys_in(n, 0), [], "no key")
    eq(value(con, "SELECT redlock_ping()"), 0, "redlock_ping() counts the refused node as not answering")
    eq(node_rows(con)[0]["state"], "refused", "state after the ping")
    con.execute("UPDATE redlock_nodes SET password = ?", (PW,))
    eq(value(con, "SELECT redlock_ping()"), 1, "answering once the password is given")
    tok = is_token(value(con, "SELECT redlock_acquire('auth-j', 10000)"), "acquire with the password")
    eq(node_rows(con)[0]["state"], "up", "state with the password")
    eq(get_in(n, 0, "auth-j"), tok, "the key")
    value(con, "SELECT redlock_release_all()")


def test_ping_agrees_with_the_state_of_refused_nodes():
    """redlock_ping() counts what state calls answering: not a node that
    wants a password it did not get, nor one whose AUTH or SELECT failed
    (even where the open default user answers PING)."""
    good, noauth, wrong = pw_node(), pw_node(), pw_node()
    open_node = h.RedisNode()
    con = h.connect([url(good, password=PW), url(noauth), url(wrong, password=WRONG_PW),
                     url(open_node, db=99)], timeout_ms=SLOW)
    eq(value(con, "SELECT redlock_ping()"), 1, "one node answers as configured")
    states = [r["state"] for r in no_secret_in_table(con)]
    eq(states, ["up", "refused", "refused", "refused"], "states after the ping")
    eq(value(con, "SELECT redlock_ping()"), 1, "a second ping")
    eq(value(con, "SELECT count(*) FROM redlock_nodes WHERE state = 'up'"), 1, "nodes up")


def test_wrong_password_where_default_user_is_open():
    """AUTH fails, but the server would run the commands that follow as its
    open default user: the lock must not be taken (nor left) anyway."""
    n = acl_node(default_open=True)
    _wrong(n, url(n, "alice", WRONG_PW, db=1), "auth-k", ("AUTH failed", "WRONGPASS"), (0, 1))


def test_db_out_of_range():
    """SELECT fails (Redis has 16 databases): nothing may be written to db 0."""
    n = pw_node()
    con = h.connect(url(n, password=PW, db=99), timeout_ms=SLOW)
    msg = acquire_error(con, "auth-l")
    check("SELECT 99" in msg or "DB index" in msg, "the error should say the db is wrong: %r" % msg)
    no_secret(msg, "the acquire error")
    eq(keys_in(n, 0), [], "keys in db 0")


def test_no_from_the_wrong_database_does_not_count_3n():
    """SELECT fails on node 1, whose default user is open, so our commands
    run on database 0 there, where another client holds the name. That "no"
    is about another database: it must not count, so with node 2 down and
    node 3 saying yes the call fails with an error naming node 1's SELECT,
    instead of answering that the lock is held."""
    with h.Cluster(3) as c:
        wrong_db, dead, fit = c
        eq(wrong_db.cmd("SET", "wd", "their-token", "PX", "60000"), "OK", "another client holds wd in db 0")
        urls = ["redis://127.0.0.1:%d/99" % wrong_db.port, dead.url, fit.url]
        dead.terminate()
        con = h.connect(urls, timeout_ms=SLOW)
        msg = acquire_error(con, "wd")
        check("node 1 " in msg and ("SELECT 99" in msg or "DB index" in msg),
              "the error should name node 1 and its database: %r" % msg)
        h.settle(con)
        eq(fit.get("wd"), None, "the failed attempt cleaned up on node 3")
        eq(wrong_db.get("wd"), "their-token", "the other client's key untouched")
        eq(value(con, "SELECT state FROM redlock_nodes WHERE id = 1"), "refused", "state of the node whose SELECT failed")


def test_one_node_with_wrong_password_still_has_quorum():
    nodes = [pw_node() for _ in range(3)]
    con = h.connect([url(nodes[0], password=PW), url(nodes[1], password=WRONG_PW), url(nodes[2], password=PW)],
                    timeout_ms=SLOW)
    tok = is_token(value(con, "SELECT redlock_acquire('auth-m', 10000)"), "acquire with 2 of 3 nodes usable")
    eq([get_in(x, 0, "auth-m") for x in nodes], [tok, None, tok], "the key on each node")
    rows = no_secret_in_table(con)
    check("WRONGPASS" in (rows[1]["last_error"] or ""),
          "last_error of the node with the wrong password: %r" % rows[1]["last_error"])
    eq([rows[0]["last_error"], rows[2]["last_error"]], [None, None], "last_error of the good nodes")
    eq([r["state"] for r in rows], ["up", "refused", "up"], "state of each node (the refused one cannot vote)")
    eq(value(con, "SELECT redlock_release('auth-m')"), 1, "release")


def test_majority_with_wrong_credentials_is_an_error_naming_each_node():
    good, bad1, bad2 = pw_node(), pw_node(), acl_node()
    con = h.connect([url(good, password=PW), url(bad1, password=WRONG_PW), url(bad2, "alice", WRONG_PW)],
                    timeout_ms=SLOW)
    msg = acquire_error(con, "auth-n")
    for e in ("node 2 127.0.0.1:%d" % bad1.port, "node 3 127.0.0.1:%d" % bad2.port, "WRONGPASS"):
        check(e in msg, "the error should mention %r: %r" % (e, msg))
    check("node 1 " not in msg, "the good node is not a failure: %r" % msg)
    no_secret(msg, "the acquire error")
    for x in (good, bad1, bad2):
        h.wait_until(lambda: keys_in(x, 0) == [], 2, what="no lock key left on %s" % x.addr)
    no_secret_in_table(con)


# --------------------------------------------------------------------------
# the password is never shown
# --------------------------------------------------------------------------

def test_password_never_shown_in_sql():
    n = pw_node()
    con = h.connect(url(n, password=PW), timeout_ms=SLOW)
    is_token(value(con, "SELECT redlock_acquire('auth-o', 10000)"), "acquire")
    no_secret(value(con, "SELECT redlock_version()"), "redlock_version()")
    for r in con.execute("SELECT * FROM redlock_locks").fetchall():
        no_secret(r, "redlock_locks")
    for name in ("timeout_ms", "retry_delay_ms", "key_prefix", "fencing", "drift_factor"):
        no_secret(value(con, "SELECT redlock_config(?)", name), "redlock_config(%r)" % name)
    msg = h.sql_error(con, "SELECT redlock_config('nope')")
    no_secret(msg, "an unknown setting's error")
    # errors about rows that carry a password
    for sql, params in (
            ("INSERT INTO redlock_nodes(url) VALUES (?)", (url(n, password=PW),)),          # duplicate
            ("INSERT INTO redlock_nodes(url) VALUES (?)", ("redis://u:%s@bad host:1" % PW,)),
            ("INSERT INTO redlock_nodes(url) VALUES (?)", ("redis://u:%s@h:70000" % PW,)),
            ("INSERT INTO redlock_nodes(url) VALUES (?)", ("redis://u:%s@[::1" % PW,)),
            ("INSERT INTO redlock_nodes(host, port, password) VALUES (?, 0, ?)", (n.host, PW)),
            ("INSERT INTO redlock_nodes(host, port, password) VALUES (?, ?, ?)", (n.host, n.port, PW)),
            ("UPDATE redlock_nodes SET id = 7, password = ?", (PW,))):
        msg = h.sql_error(con, sql, *params)
        no_secret(msg, "the error of %s" % sql)
    no_secret_in_table(con)
    eq(value(con, "SELECT count(*) FROM redlock_nodes WHERE password = ?", PW), 0,
       "rows whose password column compares equal to the real password")


def test_password_not_in_load_error():
    con = sqlite3.connect(":memory:")
    con.enable_load_extension(True)
    import os
    old = os.environ.get("REDLOCK_NODES")
    os.environ["REDLOCK_NODES"] = "redis://alice:%s@bad host:6379" % ALICE_PW
    try:
        con.load_extension(h.EXT)
        raise AssertionError("loading with a bad REDLOCK_NODES should fail")
    except sqlite3.Error as e:
        check("REDLOCK_NODES" in str(e), "the load error should name REDLOCK_NODES: %r" % str(e))
        no_secret(str(e), "the load error")
    finally:
        if old is None:
            os.environ.pop("REDLOCK_NODES", None)
        else:
            os.environ["REDLOCK_NODES"] = old
        con.close()


def test_password_not_printed_by_shell():
    n = pw_node()
    good = url(n, password=PW)
    rc, out, err = h.shell("SELECT redlock_config('timeout_ms', 2000);\n"
                           "SELECT length(redlock_acquire('auth-p', 10000));\n"
                           "SELECT * FROM redlock_nodes;\n"
                           "SELECT redlock_release_all() > 0;\n"
                           "INSERT INTO redlock_nodes(url) VALUES ('%s');\n"
                           "UPDATE redlock_nodes SET password = '%s';\n"
                           "SELECT redlock_acquire('auth-p2', 10000);\n" % (good, WRONG_PW), good)
    check("60" in out.split(), "the shell should take the lock first: %r %r" % (out, err))
    check(MASK in out, "the shell shows the masked password: %r" % out)
    check("WRONGPASS" in err, "the shell shows the per-node error: %r" % err)
    no_secret(out, "the shell's output")
    no_secret(err, "the shell's errors")


def test_the_masked_password_is_not_kept_for_another_server():
    """The password reads back masked and writing the mask back keeps it;
    but an UPDATE that also moved the node (another host or port, TLS off
    or verification off) sent the kept password to a server that SQL had
    chosen, and that could not read it. The kept password now goes only to
    the same server, no less safely (TLS off, or its checks changed:
    test_tls.test_url_options_and_columns); anything else must give it
    again."""
    n = pw_node()
    con = h.connect(url(n, password=PW, db=1), timeout_ms=SLOW)
    is_token(value(con, "SELECT redlock_acquire('mask-a', 10000)"), "acquire with the password")
    eq(value(con, "SELECT redlock_release('mask-a')"), 1, "release")
    other = h.free_port()
    refused = [
        ("UPDATE redlock_nodes SET url = ?", ("redis://:%s@127.0.0.1:%d/1" % (MASK, other),)),
        ("UPDATE redlock_nodes SET url = ?", ("redis://:%s@localhost:%d/1" % (MASK, n.port),)),
        ("UPDATE redlock_nodes SET port = ?", (other,)),
        ("UPDATE redlock_nodes SET host = 'localhost'", ()),
        ("UPDATE redlock_nodes SET port = ?, password = ?", (other, MASK)),
    ]
    for sql, params in refused:
        h.redlock_error(con, sql, *params, contains=("give the password again",))
        r = node_rows(con)[0]
        eq((r["host"], r["port"], r["tls"], r["password"]), ("127.0.0.1", n.port, 0, MASK),
           "the node after the refused %s %r" % (sql, params))
    # the same server: the mask keeps the password
    con.execute("UPDATE redlock_nodes SET url = ?", ("redis://:%s@127.0.0.1:%d/2?timeout_ms=%d" % (MASK, n.port, SLOW),))
    con.execute("UPDATE redlock_nodes SET db = 3, timeout_ms = ?", (SLOW,))
    tok = is_token(value(con, "SELECT redlock_acquire('mask-b', 10000)"), "acquire with the kept password")
    eq(get_in(n, 3, "mask-b"), tok, "the key in db 3")
    eq(value(con, "SELECT redlock_release('mask-b')"), 1, "release")
    # another server with the password given again
    con.execute("UPDATE redlock_nodes SET port = ?, password = ?", (other, "another-password"))
    eq(node_rows(con)[0]["port"], other, "moved with a password of its own")
    no_secret_in_table(con)


# --------------------------------------------------------------------------
# the Redis user a lock needs (docs/security.md)
# --------------------------------------------------------------------------

LOCK_PW = "L0ck-Pa55-word"
# rules of the documented line a lock works without (waking waiters,
# scripts by digest, redlock_ping, the fleet tables)
OPTIONAL_RULES = {"+evalsha", "+publish", "+pubsub|numsub", "+subscribe", "+unsubscribe", "+ping", "+scan",
                  "+getrange"}


def _read(*path):
    with open(os.path.join(h.REPO, *path), encoding="utf-8") as f:
        return f.read()


def doc_acl_rules():
    """The rules of the ACL SETUSER line in docs/security.md (after the user name)."""
    lines = [l for l in _read("docs", "security.md").splitlines()
             if l.startswith("ACL SETUSER redlock on ")]
    eq(len(lines), 1, "the lock user's ACL SETUSER lines in docs/security.md")
    return [">" + LOCK_PW if r.startswith(">") else r for r in lines[0].split()[3:]]


def acl_list():
    """(command, arguments, need) of each entry of RL_ACL_LIST in src/rl_acl.c."""
    src = _read("src", "rl_acl.c")
    body = src[src.index("#define RL_ACL_LIST(X)"):]
    body = body[:body.index("\n\n")]
    return re.findall(r'X\("([a-z ]+)", "([^"]*)", ([A-Z]+)\)', body)


def lock_user(node, name, rules):
    """ACL user `name` on node with exactly `rules`; its URL."""
    node.cmd("ACL", "SETUSER", name, "reset", *rules)
    return url(node, name, LOCK_PW)


def test_acl_list_matches_the_scripts():
    """The one list of the commands the scripts use (src/rl_acl.c) is the
    set the scripts' text calls, plus EVAL and EVALSHA that run them; each
    entry's arguments fit the command's arity (a newer Redis refuses a
    check with other counts), and the documented ACL line grants exactly
    the list, the waiters' SUBSCRIBE and UNSUBSCRIBE, INFO, ROLE and PING."""
    listed = acl_list()
    names = {name for name, _, _ in listed}
    eq(len(names), len(listed), "commands listed once")
    called = set()
    for m in re.finditer(r"\bp?call\('([a-z]+)'(?:,\s*'([a-z]+)')?", _read("src", "rl_scripts.h")):
        called.add(m.group(1) + (" " + m.group(2) if m.group(1) == "pubsub" else ""))
    eq(sorted(names - {"eval", "evalsha"}), sorted(called), "commands the scripts call")
    check({"eval", "evalsha"} <= names, "EVAL and EVALSHA listed")
    needs = {name: need for name, _, need in listed}
    eq(sorted(n for n, need in needs.items() if need == "FENCING"), ["incr", "persist"],
       "needed with fencing only")
    eq(sorted(n for n, need in needs.items() if need == "HOLDER"), ["hset"],
       "needed with holder_info only")
    node = h.shared_cluster(1).nodes[0]
    for name, args, _ in listed:
        info = node.cmd("COMMAND", "INFO", name.replace(" ", "|"))[0]
        check(info, "COMMAND INFO knows %s" % name)
        arity, argc = info[1], len(name.split()) + len(args.split())
        check(argc == arity if arity > 0 else argc >= -arity,
              "%s checked with %d words, arity %d" % (name, argc, arity))
    rules = doc_acl_rules()
    granted = {r[1:].replace("|", " ") for r in rules if r.startswith("+")}
    eq(sorted(granted), sorted(names | {"subscribe", "unsubscribe", "info", "role", "ping"}),
       "the documented rules")


def test_the_documented_lock_user_can_do_everything_1n():
    """A user created with exactly the documented line takes, extends and
    releases exclusive (fenced, with holder details), shared and many-name
    locks, reads the holder and pings; nothing stays behind."""
    n = h.RedisNode()
    con = h.connect(lock_user(n, "locker", doc_acl_rules()), timeout_ms=SLOW)
    is_token(value(con, "SELECT redlock_acquire('lu', 10000)"), "acquire")
    check(value(con, "SELECT redlock_fence('lu')") >= 1, "a fencing number")
    check(value(con, "SELECT redlock_extend('lu', 20000)") > 10000, "extend")
    eq(json.loads(value(con, "SELECT redlock_holder('lu')"))["kind"], "exclusive", "holder")
    eq(value(con, "SELECT redlock_release('lu')"), 1, "release")
    is_token(value(con, "SELECT redlock_acquire_shared('ls', 10000, 0, 2)"), "shared")
    check(value(con, "SELECT redlock_extend('ls', 20000)") > 10000, "extend the shared hold")
    eq(json.loads(value(con, "SELECT redlock_holder('ls')"))["holders"], 1, "shared holder")
    eq(value(con, "SELECT redlock_release('ls')"), 1, "release the shared hold")
    is_token(value(con, "SELECT redlock_acquire_many(?, 10000)", '["m1", "m2"]'), "acquire_many")
    eq(value(con, "SELECT redlock_release_many(?)", '["m1", "m2"]'), 2, "release_many")
    eq(value(con, "SELECT redlock_ping()"), 1, "ping")
    h.settle(con)
    r = node_rows(con)[0]
    eq((r["state"], r["last_error"]), ("up", None), "the node")
    # the counters, the floor and the connection's holder details outlive the locks
    left = [k for k in n.keys() if not k.endswith(":fence") and "fence-floor" not in k and
            not k.startswith("redlock-client:")]
    eq(left, [], "keys left")


def test_the_documented_lock_user_can_wait_fairly_1n():
    """The same documented line covers fair waiting (redlock_config('fair',
    1)): the queue's scripts call only commands of the list, and a release
    wakes the queued waiter on its own channel; the queue goes with it."""
    import threading
    n = h.RedisNode()
    holder = h.connect(lock_user(n, "fair-holder", doc_acl_rules()), timeout_ms=SLOW, fair=1)
    waiter = h.connect(lock_user(n, "fair-waiter", doc_acl_rules()), timeout_ms=SLOW, fair=1)
    is_token(value(holder, "SELECT redlock_acquire('fq', 10000)"), "the holder's acquire")
    got = []
    t = threading.Thread(target=lambda: got.append(value(waiter, "SELECT redlock_acquire('fq', 10000, 20000)")))
    t.start()
    h.wait_until(lambda: n.cmd("PUBSUB", "CHANNELS", "fq:queue:*"), 10, what="the waiter queued and listening")
    eq(n.cmd("ZCARD", "fq:queue"), 2, "its entry (and the queue's mark)")
    eq(value(holder, "SELECT redlock_release('fq')"), 1, "release")
    t.join(30)
    is_token(got[0] if got else None, "the waiter's acquire")
    eq(value(waiter, "SELECT redlock_release('fq')"), 1, "the waiter's release")
    h.settle(holder, waiter)
    for con in (holder, waiter):
        r = node_rows(con)[0]
        eq((r["state"], r["last_error"]), ("up", None), "the node")
    eq([k for k in n.keys() if k.startswith("fq") and not k.endswith(":fence")], [], "keys left")


def test_a_lock_user_with_one_command_less_is_refused_naming_it_1n():
    """The documented line less any one rule the locks need: the node is
    refused (state refused, no vote) with an error naming what is missing.
    Without a rule it lists as optional, or without INCR and PERSIST with
    fencing 0 and HSET with holder_info 0, locks still work. (Each user's
    names are its own: the refused first call's acquire ran, and where the
    user cannot run the release script its key stays until its TTL.)"""
    n = h.RedisNode()
    rules = doc_acl_rules()
    for rule in [r for r in rules if r.startswith("+")]:
        user = "less-" + rule[1:].replace("|", "-")
        fit = rule in OPTIONAL_RULES
        less = [r for r in rules if r != rule]
        settings = ({"fencing": 0} if rule in ("+incr", "+persist") else
                    {"holder_info": 0} if rule == "+hset" else {})
        con = h.connect(lock_user(n, user, less), timeout_ms=SLOW)
        if not fit:
            named = "INFO or ROLE" if rule in ("+info", "+role") else rule[1:].upper()
            msg = acquire_error(con, user)
            check(named in msg and "its vote does not count" in msg, "without %s: %r" % (rule, msg))
            h.settle(con)
            r = node_rows(con)[0]
            eq(r["state"], "refused", "state without %s" % rule)
            check(named in (r["last_error"] or ""),
                  "last_error without %s: %r" % (rule, r["last_error"]))
        con.close()
        if not (fit or settings):
            continue
        con = h.connect(lock_user(n, user, less), timeout_ms=SLOW, **settings)
        what = "without %s %r" % (rule, settings)
        is_token(value(con, "SELECT redlock_acquire(?, 10000)", user + "-x"), "acquire " + what)
        is_token(value(con, "SELECT redlock_acquire_shared(?, 10000)", user + "-s"),
                 "shared " + what)
        names = json.dumps([user + "-m1", user + "-m2"])
        is_token(value(con, "SELECT redlock_acquire_many(?, 10000)", names), "many " + what)
        eq(value(con, "SELECT redlock_release_all()"), 4, "released " + what)
        eq(node_rows(con)[0]["state"], "up", "state " + what)
        con.close()


def test_a_user_who_can_set_but_not_release_gets_no_lock():
    """With fencing 0 and holder_info 0 the acquisition is a plain SET: a
    user allowed SET, GET, DEL, PEXPIRE, EVAL, EVALSHA, INFO, ROLE and
    pub/sub but not TYPE took a lock that no release or extend could
    touch (their scripts start with TYPE), so the key stayed its whole
    TTL. Now such a node is refused, naming what it lacks; with two fit
    nodes of three the lock works, and the refused node says why."""
    rules = ["on", ">" + LOCK_PW, "~*", "&*", "+set", "+get", "+del", "+pexpire", "+eval",
             "+evalsha", "+info", "+role", "+@pubsub"]
    n = h.RedisNode()
    con = h.connect(lock_user(n, "setter", rules), timeout_ms=SLOW, fencing=0, holder_info=0)
    msg = acquire_error(con, "sr")
    check("user setter may not run TYPE" in msg and "ACL SETUSER setter +type" in msg,
          "the error: %r" % msg)
    with h.Cluster(2) as fit:
        con = h.connect(list(fit) + [lock_user(n, "setter", rules)], timeout_ms=SLOW, fencing=0,
                        holder_info=0)
        is_token(value(con, "SELECT redlock_acquire('sr3', 10000)"), "two fit nodes of three")
        check(value(con, "SELECT redlock_extend('sr3', 20000)") > 10000, "extend")
        eq(value(con, "SELECT redlock_release('sr3')"), 1, "release")
        h.settle(con)
        r = node_rows(con)[2]
        eq(r["state"], "refused", "the node whose user may not run TYPE")
        check("TYPE" in (r["last_error"] or ""), "its last_error: %r" % r["last_error"])
        h.no_key(list(fit), "sr3", "on the fit nodes after release")


def test_a_permission_refused_inside_a_script_is_named_1n():
    """A fenced acquisition refused a command inside its script names it,
    instead of blaming the counter or the fencing floor (which do not
    exist), and leaves no lock key: a user that may not run INCR or GET
    (the connection's probe names them), and a user whose INCR or GET is
    taken away after the probe (only the script sees it then). A user
    whose key patterns leave out the counter is refused by the node before
    the script runs, and the error says what to change."""
    n = h.RedisNode()
    everything = ["on", ">" + LOCK_PW, "~*", "&*", "+@all"]
    for minus, named in (("-incr", "INCR"), ("-get", "GET")):
        con = h.connect(lock_user(n, "no" + minus[1:], everything + [minus]), timeout_ms=SLOW)
        msg = acquire_error(con, "pn")
        check("may not run %s" % named in msg and "holds no number" not in msg,
              "without %s: %r" % (named, msg))
    for minus, named in (("-incr", "(INCR pn:fence)"), ("-get", "(GET redlock-fence-floor)")):
        user = "later" + minus
        con = h.connect(lock_user(n, user, everything), timeout_ms=SLOW)
        is_token(value(con, "SELECT redlock_acquire('pn', 10000)"), "acquire before %s" % minus)
        eq(value(con, "SELECT redlock_release('pn')"), 1, "release before %s" % minus)
        n.cmd("ACL", "SETUSER", user, minus)
        msg = acquire_error(con, "pn")
        check(named in msg and "can't run this command" in msg and "ACL SETUSER" in msg and
              "holds no number" not in msg, "%s after the probe: %r" % (minus, msg))
        h.settle(con)
        eq(n.get("pn"), None, "the lock key deleted again (%s)" % minus)
    keys = ["on", ">" + LOCK_PW, "&*", "+@all", "~pk", "~redlock-client:*"]
    con = h.connect(lock_user(n, "keys", keys), timeout_ms=SLOW)
    msg = acquire_error(con, "pk")
    check("NOPERM" in msg and "ACL SETUSER" in msg and "holds no number" not in msg,
          "keys: %r" % msg)
    h.settle(con)
    eq(n.get("pk"), None, "no lock key (keys)")
