"""The redlock_nodes virtual table: seeding, INSERT by columns and by url,
UPDATE, DELETE, password masking, state and last_error."""
# SPDX-License-Identifier: BSD-3-Clause

import os
import subprocess
import tempfile

import harness as h
from harness import check, eq, is_token, node_rows, redlock_error, value

# not a timing test: a slow node on a loaded machine must not fail it
h.default_config(timeout_ms=h.RELAXED_TIMEOUT_MS)

MASK = "********"
SECRET = "Sup3rS3cretPw"


def count(con):
    return value(con, "SELECT count(*) FROM redlock_nodes")


def one(con, where, *params):
    cur = con.execute("SELECT * FROM redlock_nodes WHERE " + where, params)
    cols = [d[0] for d in cur.description]
    rs = cur.fetchall()
    eq(len(rs), 1, "rows matching %s %r" % (where, params))
    return dict(zip(cols, rs[0]))


def no_secret_anywhere(con, secret):
    for r in node_rows(con):
        for k, v in r.items():
            check(v is None or secret not in str(v),
                  "password readable in column %s: %r" % (k, v))


def test_columns():
    con = h.connect("redis://127.0.0.1:7001")
    cols = [d[0] for d in con.execute("SELECT * FROM redlock_nodes").description]
    for col in ("id", "host", "port", "db", "username", "password", "timeout_ms",
                "state", "last_error", "url"):
        check(col in cols, "redlock_nodes has no column %r (columns: %r)" % (col, cols))


def test_seeded_from_env():
    env = "redis://127.0.0.1:7001,redis://:%s@127.0.0.1:7002/2,redis://localhost:7003" % SECRET
    con = h.connect(env)
    rs = node_rows(con)
    eq([(r["host"], r["port"]) for r in rs],
       [("127.0.0.1", 7001), ("127.0.0.1", 7002), ("localhost", 7003)],
       "(host, port) seeded from REDLOCK_NODES")
    eq([r["db"] for r in rs], [0, 2, 0], "db seeded from REDLOCK_NODES")
    eq([r["password"] for r in rs], [None, MASK, None], "password column")
    eq(len({r["id"] for r in rs}), 3, "distinct ids")
    for r in rs:
        eq(r["state"], "idle", "state of a node not contacted yet (%s)" % r["port"])
    no_secret_anywhere(con, SECRET)


def test_default_node_when_env_unset():
    con = h.connect(None)
    rs = node_rows(con)
    eq([(r["host"], r["port"]) for r in rs], [("127.0.0.1", 6379)],
       "nodes when REDLOCK_NODES is unset")


def test_insert_by_columns():
    con = h.connect("redis://127.0.0.1:7001")
    con.execute("INSERT INTO redlock_nodes(host, port) VALUES ('127.0.0.1', 7002)")
    r = one(con, "port = 7002")
    eq((r["host"], r["db"], r["username"], r["password"]), ("127.0.0.1", 0, None, None),
       "host, db, username, password of a node inserted by columns")
    check(isinstance(r["id"], int), "id should be an integer: %r" % (r["id"],))
    con.execute("INSERT INTO redlock_nodes(host, port, db, username, password, timeout_ms) "
                "VALUES ('127.0.0.1', 7003, 4, 'bob', ?, 120)", (SECRET,))
    r = one(con, "port = 7003")
    eq((r["db"], r["username"], r["password"], r["timeout_ms"]), (4, "bob", MASK, 120),
       "db, username, password, timeout_ms inserted by columns")
    check(r["url"] is None or SECRET not in r["url"], "password in url: %r" % r["url"])
    eq(count(con), 3, "row count")
    no_secret_anywhere(con, SECRET)
    eq(value(con, "SELECT count(*) FROM redlock_nodes WHERE password = ?", SECRET), 0,
       "rows whose password compares equal to the clear password")


def test_insert_by_url():
    con = h.connect("redis://127.0.0.1:7001")
    con.execute("INSERT INTO redlock_nodes(url) VALUES (?)",
                ("redis://alice:%s@127.0.0.1:7004/5" % SECRET,))
    r = one(con, "port = 7004")
    eq((r["host"], r["port"], r["db"], r["username"], r["password"]),
       ("127.0.0.1", 7004, 5, "alice", MASK), "node inserted by full url")
    check(isinstance(r["url"], str) and "127.0.0.1:7004" in r["url"] and SECRET not in r["url"],
          "url column should show the node without its password: %r" % (r["url"],))
    con.execute("INSERT INTO redlock_nodes(url) VALUES ('redis://127.0.0.1')")
    r = one(con, "port = 6379")
    eq((r["host"], r["db"], r["password"]), ("127.0.0.1", 0, None), "redis://host")
    con.execute("INSERT INTO redlock_nodes(url) VALUES ('redis://localhost:7005')")
    r = one(con, "port = 7005")
    eq((r["host"], r["db"]), ("localhost", 0), "redis://host:port")
    con.execute("INSERT INTO redlock_nodes(url) VALUES (?)",
                ("redis://:%s@127.0.0.1:7006" % SECRET,))
    r = one(con, "port = 7006")
    eq(r["password"], MASK, "password of redis://:pass@host:port")
    eq(count(con), 5, "row count")
    no_secret_anywhere(con, SECRET)


def test_update_and_delete():
    con = h.connect("redis://127.0.0.1:7001,redis://127.0.0.1:7002")
    con.execute("UPDATE redlock_nodes SET port = 7010 WHERE port = 7001")
    eq(sorted(r["port"] for r in node_rows(con)), [7002, 7010], "ports after UPDATE")
    con.execute("UPDATE redlock_nodes SET password = ? WHERE port = 7002", (SECRET,))
    eq(one(con, "port = 7002")["password"], MASK, "password after UPDATE")
    no_secret_anywhere(con, SECRET)
    con.execute("UPDATE redlock_nodes SET db = 3, timeout_ms = 99 WHERE port = 7010")
    r = one(con, "port = 7010")
    eq((r["db"], r["timeout_ms"]), (3, 99), "db, timeout_ms after UPDATE")
    con.execute("DELETE FROM redlock_nodes WHERE port = 7010")
    eq([r["port"] for r in node_rows(con)], [7002], "ports after DELETE")
    con.execute("DELETE FROM redlock_nodes")
    eq(count(con), 0, "rows after DELETE of all")


def test_update_port_makes_node_usable():
    c = h.shared_cluster(1)
    dead = h.free_port()
    con = h.connect("redis://127.0.0.1:%d" % dead)
    redlock_error(con, "SELECT redlock_acquire('up', 10000)", contains=(str(dead),))
    con.execute("UPDATE redlock_nodes SET port = ?", (c[0].port,))
    tok = is_token(value(con, "SELECT redlock_acquire('up', 10000)"),
                   "acquire after pointing the node at a live port")
    eq(c[0].get("up"), tok, "key on the live node")


def test_nodes_inserted_by_sql_are_used():
    c = h.shared_cluster(3)
    con = h.connect(c)
    con.execute("DELETE FROM redlock_nodes")
    for node in c:
        con.execute("INSERT INTO redlock_nodes(host, port) VALUES (?, ?)", (node.host, node.port))
    tok = is_token(value(con, "SELECT redlock_acquire('sqlnodes', 10000)"))
    h.holds(c, "sqlnodes", tok, 10000, "nodes configured by INSERT")


def test_table_belongs_to_the_connection():
    a = h.connect("redis://127.0.0.1:7001")
    b = h.connect("redis://127.0.0.1:7001")
    a.execute("INSERT INTO redlock_nodes(host, port) VALUES ('127.0.0.1', 7002)")
    eq(count(a), 2, "rows in the connection that inserted")
    eq(count(b), 1, "rows in another connection")


def test_bad_urls_are_errors():
    con = h.connect("redis://127.0.0.1:7001")
    for url in ("http://127.0.0.1:6379", "redis://127.0.0.1:0", "redis://127.0.0.1:70000",
                "redis://127.0.0.1:x", "redis://127.0.0.1:-1", "redis://", "redis://:6379",
                "127.0.0.1:6379", ""):
        redlock_error(con, "INSERT INTO redlock_nodes(url) VALUES (?)", url,
                      what="INSERT url %r" % url)
        eq(count(con), 1, "rows after refused url %r" % url)


def test_bad_columns_are_errors():
    con = h.connect("redis://127.0.0.1:7001")
    for host, port in (("127.0.0.1", 0), ("127.0.0.1", 70000), ("127.0.0.1", -1),
                       ("", 6379), (None, 6379), ("127.0.0.1", "x")):
        redlock_error(con, "INSERT INTO redlock_nodes(host, port) VALUES (?, ?)", host, port,
                      what="INSERT host %r port %r" % (host, port))
        eq(count(con), 1, "rows after refused host %r port %r" % (host, port))
    for port in (0, 70000):
        redlock_error(con, "UPDATE redlock_nodes SET port = ?", port,
                      what="UPDATE port = %r" % port)
        eq(one(con, "1")["port"], 7001, "port after refused UPDATE to %r" % port)


def test_bad_env_url_does_not_load_silently_wrong():
    """A bad REDLOCK_NODES must not become a working node list: either the
    load fails with a redlock: error, or the bad entry is not there."""
    try:
        con = h.connect("redis://127.0.0.1:7001,ftp://127.0.0.1:7002")
    except Exception as e:
        check("redlock: " in str(e), "load with bad REDLOCK_NODES: %r" % str(e))
        return
    ports = [r["port"] for r in node_rows(con)]
    check(7002 not in ports, "ftp:// url accepted as a node: %r" % ports)


def test_state_after_calls():
    with h.Cluster(3) as c:
        con = h.connect(c)
        c[1].kill9()
        is_token(value(con, "SELECT redlock_acquire('st', 10000)"),
                 "acquire with one node of three dead")
        by_port = {r["port"]: r for r in node_rows(con)}
        dead = by_port[c[1].port]
        eq(dead["state"], "down", "state of the killed node")
        check(isinstance(dead["last_error"], str) and dead["last_error"].strip(),
              "last_error of the killed node should say why: %r" % (dead["last_error"],))
        for node in (c[0], c[2]):
            eq(by_port[node.port]["state"], "up", "state of live node %s" % node.addr)


def test_password_auth():
    pw = "auth-pw-123"
    node = h.RedisNode(password=pw)
    try:
        con = h.connect("redis://:%s@127.0.0.1:%d" % (pw, node.port))
        tok = is_token(value(con, "SELECT redlock_acquire('pw', 10000)"),
                       "acquire on a node with requirepass")
        eq(node.get("pw"), tok, "key on the password-protected node")
        eq(value(con, "SELECT redlock_release('pw')"), 1, "release")
        nopw = h.connect("redis://127.0.0.1:%d" % node.port)
        try:
            r = value(nopw, "SELECT redlock_acquire('pw2', 10000)")
        except Exception as e:
            r = e
        check(not isinstance(r, str), "acquire without the password returned a token %r" % r)
        err = node_rows(nopw)[0]["last_error"]
        check(isinstance(err, str) and "auth" in err.lower(),
              "last_error should tell about authentication: %r" % (err,))
        eq(node.cmd("EXISTS", "pw2"), 0, "no key from the refused connection")
    finally:
        node.terminate()


def test_username_and_db():
    # the default user needs a password too, so that a failed AUTH as alice
    # cannot fall back to an open default user
    node = h.RedisNode(password="default-pw")
    try:
        node.cmd("ACL", "SETUSER", "alice", "on", ">alicepw", "~*", "&*", "+@all")
        con = h.connect("redis://alice:alicepw@127.0.0.1:%d/3" % node.port)
        tok = is_token(value(con, "SELECT redlock_acquire('acl', 10000)"),
                       "acquire as an ACL user in db 3")
        r = h.Resp(node.host, node.port, password="default-pw")
        try:
            eq(r.cmd("GET", "acl"), None, "key in db 0")
            r.cmd("SELECT", 3)
            eq(r.cmd("GET", "acl"), tok, "key in db 3")
        finally:
            r.close()
        nodepw = h.connect("redis://alice:wrongpw@127.0.0.1:%d/3" % node.port)
        try:
            res = value(nodepw, "SELECT redlock_acquire('acl2', 10000)")
        except Exception as e:
            res = e
        check(not isinstance(res, str), "acquire with a wrong password returned a token")
    finally:
        node.terminate()


def test_whole_numbers_as_reals():
    """Node's better-sqlite3 binds every number as REAL: a REAL without a
    fraction is as good as an INTEGER for every column and argument, and a
    timeout_ms beside a url is range-checked like any other."""
    c = h.shared_cluster(1)
    n = c.nodes[0]
    con = h.connect([])
    con.execute("INSERT INTO redlock_nodes(id, host, port, db, timeout_ms, tls) VALUES (?, ?, ?, ?, ?, ?)",
                (7.0, n.host, float(n.port), 0.0, 2000.0, 0.0))
    eq([(r["id"], r["port"], r["timeout_ms"]) for r in node_rows(con)], [(7, n.port, 2000)], "the row")
    con.execute("UPDATE redlock_nodes SET timeout_ms = ? WHERE id = ?", (3000.0, 7.0))
    is_token(value(con, "SELECT redlock_acquire_many(?, ?, ?)", '["wr:a", "wr:b"]', 10000.0, 0.0), "acquire_many")
    eq(value(con, "SELECT redlock_release_many(?)", '["wr:a", "wr:b"]'), 2, "release_many")
    redlock_error(con, "INSERT INTO redlock_nodes(url, timeout_ms) VALUES (?, ?)", n.url, 4294967396,
                  contains=("timeout_ms must be a whole number",))
    redlock_error(con, "INSERT INTO redlock_nodes(url, timeout_ms) VALUES (?, ?)", n.url, 2.5,
                  contains=("timeout_ms must be a whole number",))
    redlock_error(con, "INSERT INTO redlock_nodes(host, port) VALUES (?, ?)", n.host, 6379.5,
                  contains=("port must be a whole number",))
    eq(count(con), 1, "rows after the refused INSERTs")


def test_long_url_is_shown_whole_and_writes_back():
    """The url column of a node with a long user name (percent-encoded, up
    to three bytes a byte) and a long TLS path is shown whole, never cut, and
    writing it back (the documented SET url = url) keeps the node as it was."""
    con = h.connect([])
    path = "/etc/ssl/certs/" + "./" * 400 + "ca-certificates.crt"
    con.execute("INSERT INTO redlock_nodes(url) VALUES (?)", ("rediss://127.0.0.1:6380?tls_ca_file=%s&tls_verify=1" % path,))
    con.execute("UPDATE redlock_nodes SET username = ?", ("\u00e9" * 256,))
    url = value(con, "SELECT url FROM redlock_nodes")
    check(url.endswith("tls_ca_file=%s" % path) or url.endswith("tls_ca_file=%s&tls_verify=1" % path)
          or ("tls_ca_file=%s&" % path) in url, "the url column ends cut: ...%r" % url[-60:])
    check(url.startswith("rediss://" + "%C3%A9" * 256 + "@127.0.0.1:6380/0"), "the url's start: %r" % url[:40])
    con.execute("UPDATE redlock_nodes SET url = url")
    eq(value(con, "SELECT url FROM redlock_nodes"), url, "the url after writing it back")
    eq(value(con, "SELECT username FROM redlock_nodes"), "\u00e9" * 256, "the user name after writing the url back")



OVERLAP_C = r"""
#include <sqlite3.h>
#include <stdio.h>
/* Prints the error of each statement, or "ok", then the ports. */
static int row(void *u, int n, char **v, char **c) { (void)u, (void)n, (void)c; printf("port %s\n", v[0]); return 0; }
static void run(sqlite3 *db, const char *sql) {
    char *e = 0;
    if (sqlite3_exec(db, sql, row, 0, &e) != SQLITE_OK) printf("error %s\n", e); else printf("ok\n");
    sqlite3_free(e);
}
int main(int argc, char **argv) {
    sqlite3 *db; sqlite3_stmt *a; char *e = 0;
    (void)argc;
    sqlite3_open(":memory:", &db);
    sqlite3_enable_load_extension(db, 1);
    if (sqlite3_load_extension(db, argv[1], 0, &e) != SQLITE_OK) { printf("load %s\n", e); return 1; }
    sqlite3_prepare_v2(db, "INSERT INTO redlock_nodes(host, port) VALUES ('127.0.0.1', 7002) RETURNING port", -1, &a, 0);
    printf("first %d\n", sqlite3_step(a));   /* under way: a row, not done */
    run(db, "INSERT INTO redlock_nodes(host, port) VALUES ('127.0.0.1', 7003), ('127.0.0.1', 99999)");
    run(db, "DELETE FROM redlock_nodes");
    printf("first %d\n", sqlite3_step(a));
    sqlite3_finalize(a);
    run(db, "SELECT port FROM redlock_nodes ORDER BY port");
    run(db, "INSERT INTO redlock_nodes(host, port) VALUES ('127.0.0.1', 7003)");
    run(db, "SELECT port FROM redlock_nodes ORDER BY port");
    sqlite3_close(db);
    return 0;
}
"""


def test_a_write_while_another_is_under_way_is_refused():
    """Each statement on redlock_nodes is all or nothing: a statement that
    fails leaves the list as it was. A write that ran while another one was
    still under way (an INSERT ... RETURNING stepped once, from C) shared
    that one's saved list, so when it failed half way its first rows
    stayed. Such a write is now refused whole, saying why. (Python's
    sqlite3 finishes a write before the next starts, so a C program.)"""
    with tempfile.TemporaryDirectory(prefix="redlock-overlap-") as d:
        exe = h.build_c(OVERLAP_C, os.path.join(d, "overlap"), ["-lsqlite3"])
        out = subprocess.run([exe, h.EXT], capture_output=True, text=True, timeout=60,
                             env=dict(os.environ, REDLOCK_NODES="redis://127.0.0.1:7001")).stdout.splitlines()
    eq(out[0], "first 100", "the first write has a row: %r" % out)
    for line in out[1:3]:
        check(line.startswith("error redlock: another statement that writes is still under way"),
              "a write during the first one is refused: %r" % out)
    eq(out[3:], ["first 101", "port 7001", "port 7002", "ok", "ok", "port 7001", "port 7002", "port 7003", "ok"],
       "the first write done; the nodes: its own and none of the refused ones; then a write on its own works")


def test_url_written_back_keeps_the_nodes_own_timeout():
    """The url column did not show a node's own timeout_ms, so the
    README's own idiom, UPDATE ... SET url = url || '...', quietly put the
    node back on the setting's timeout. The url shows it now, and writing
    the url back keeps it; a url without it puts the node on the setting."""
    con = h.connect("", timeout_ms=50)
    con.execute("INSERT INTO redlock_nodes(url) VALUES ('redis://u:p@127.0.0.1:7005/3?timeout_ms=5')")
    r = one(con, "port = 7005")
    eq((r["timeout_ms"], r["url"]), (5, "redis://u:%s@127.0.0.1:7005/3?timeout_ms=5" % MASK), "timeout and url")
    con.execute("UPDATE redlock_nodes SET url = url WHERE port = 7005")
    eq(one(con, "port = 7005")["timeout_ms"], 5, "timeout_ms after SET url = url")
    con.execute("UPDATE redlock_nodes SET url = 'redis://u:%s@127.0.0.1:7005/4' WHERE port = 7005" % MASK)
    eq(one(con, "port = 7005")["timeout_ms"], 50, "a url without timeout_ms: the setting's")
    con.execute("UPDATE redlock_nodes SET port = port, timeout_ms = 7 WHERE port = 7005")
    con.execute("UPDATE redlock_nodes SET db = 5 WHERE port = 7005")
    eq(one(con, "port = 7005")["timeout_ms"], 7, "an UPDATE of another column keeps the node's own")


def test_short_numeric_ipv4_forms_are_refused():
    """The resolver takes the old short and numeric IPv4 forms (127.1,
    2130706433, 0x7f.1) and connects to 127.0.0.1, while a TLS node checked
    that text as a host name against the certificate (and sent it as SNI).
    They are refused when written, with the address in full."""
    con = h.connect("")
    for host in ("127.1", "2130706433", "0x7f.1", "127.0.1"):
        redlock_error(con, "INSERT INTO redlock_nodes(host, port) VALUES (?, 7001)", host,
                      contains=("127.0.0.1",), what="host %r" % host)
        redlock_error(con, "INSERT INTO redlock_nodes(url) VALUES (?)", "rediss://%s:7001" % host,
                      contains=("127.0.0.1",), what="url with host %r" % host)
    eq(value(con, "SELECT count(*) FROM redlock_nodes"), 0, "no node added")
    con.execute("INSERT INTO redlock_nodes(host, port) VALUES ('127.0.0.1', 7001)")
    con.execute("INSERT INTO redlock_nodes(host, port) VALUES ('localhost', 7002)")
    eq(value(con, "SELECT count(*) FROM redlock_nodes"), 2, "the full form and a name are fine")
