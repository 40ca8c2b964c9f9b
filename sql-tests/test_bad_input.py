"""The bad-input table: every way a caller can get an argument,
a node row or a database file wrong, each with the outcome it must have,
nearly always an error whose text is given here.

Every case runs on a fresh connection, next to a second connection (the
"holder") that holds the lock bad:held on the three nodes of a shared
cluster. After the case:

* the outcome is the expected one: an error containing each expected text
  (starting with 'redlock: ' unless it is SQLite's own message), or the
  expected value;
* it came back within a few seconds (no case may hang), and the connection
  still answers;
* the holder's key is untouched on every node (same token, still expiring),
  and no key is left on any node but the holder's and the ones the case
  itself took.

Crashes and leaks in these paths are what `make test SANITIZE=1` (this file
under ASan/UBSan) and `make valgrind` (its bad_input scenario) look for."""
# SPDX-License-Identifier: BSD-3-Clause

import json
import os
import sqlite3
import tempfile
import time

import harness as h
from harness import check, eq

HELD = "bad:held"
SECRET = "Sup3rS3cretPw"
FOREIGN_TOKEN = "f" * 60
MASK = "********"
TTL_MSG = "ttl_ms must be a whole number of milliseconds from 1 to 2147483647"
WAIT_MSG = "wait_ms must be a whole number of milliseconds from 0 to 86400000"
TOKEN_MSG = "token must be the text redlock_acquire returned"
PORT_URL = "node URL: port must be a number from 1 to 65535"
PORT_COL = "port must be a whole number from 1 to 65535"
LIMIT = 65536            # RL_RESOURCE_MAX in src/rl_lock.h, key prefix included
TIME_LIMIT = 5.0         # seconds; per-node timeout 50 ms, no case waits


class Err:
    """An error containing every text; `ours`: starts with 'redlock: '."""

    def __init__(self, *texts, ours=True):
        self.texts, self.ours = texts, ours


def SqlErr(*texts):
    """An error raised by SQLite itself (argument counts, schema checks)."""
    return Err(*texts, ours=False)


class Val:
    def __init__(self, value):
        self.value = value


TOKEN = object()          # Val(TOKEN): any fresh 32-hex token


class Ctx:
    """What a case sees: the cluster, its connection, the holder's token,
    and whatever its setup left (ctx.tok, ctx.path, ...)."""

    def __init__(self, cluster, holder_token):
        self.c = cluster
        self.holder_token = holder_token
        self.con = None
        self.allow = set()   # keys the case may leave (fence counters aside)
        self.tmp = None


# --------------------------------------------------------------------------
# setups
# --------------------------------------------------------------------------

def setup_own(name, ttl=10000):
    """The case's connection takes lock `name` first (ctx.tok)."""
    def s(ctx):
        ctx.tok = h.is_token(h.value(ctx.con, "SELECT redlock_acquire(?, ?)", name, ttl),
                             "setup: acquire %s" % name)
        ctx.allow.add(name)
    return s


def setup_expired(name):
    """The case's connection took `name` for 50 ms; it has expired on every node."""
    def s(ctx):
        ctx.tok = h.is_token(h.value(ctx.con, "SELECT redlock_acquire(?, 50)", name),
                             "setup: acquire %s" % name)
        ctx.allow.add(name)
        h.wait_until(lambda: not any(n.cmd("EXISTS", name) for n in ctx.c), 5,
                     what="%s to expire on every node" % name)
    return s


def setup_released(name):
    """The case's connection took and released `name` (ctx.tok)."""
    def s(ctx):
        setup_own(name)(ctx)
        eq(h.value(ctx.con, "SELECT redlock_release(?)", name), 1, "setup: release %s" % name)
    return s


def setup_table_and_own(name):
    """A table w in the case's main database, and lock `name` (ctx.tok)."""
    def s(ctx):
        ctx.con.execute("CREATE TABLE w(x)")
        setup_own(name)(ctx)
    return s


def setup_prefix(prefix):
    def s(ctx):
        h.value(ctx.con, "SELECT redlock_config('key_prefix', ?)", prefix)
    return s


def setup_extra_node(ctx):
    """A second row (a closed port) that an UPDATE can collide with."""
    ctx.con.execute("INSERT INTO redlock_nodes(host, port) VALUES ('127.0.0.1', 9)")


def hostile_db(*ddl):
    """A database file whose schema uses the extension. It is written by a
    connection without the extension; deterministic stand-ins for the
    functions let SQLite accept CHECK, index and generated-column DDL."""
    def s(ctx):
        ctx.tmp = tempfile.mkdtemp(prefix="redlock-bad-")
        ctx.path = os.path.join(ctx.tmp, "hostile.db")
        db = sqlite3.connect(ctx.path, isolation_level=None)
        for name, n in (("redlock_acquire", 2), ("redlock_release", 1), ("redlock_release", 2),
                        ("redlock_extend", 3), ("redlock_config", 2), ("redlock_adopt", 2),
                        ("redlock_detach", 1)):
            db.create_function(name, n, lambda *a: "x", deterministic=True)
        for stmt in ddl:
            db.execute(stmt)
        db.close()
    s.database = True
    return s


# --------------------------------------------------------------------------
# extra checks after a case
# --------------------------------------------------------------------------

def _settle(con):
    """h.settle without a table: redlock_ping() waits for every node's PONG,
    which comes behind whatever the connection still owes. Some cases open
    a database whose schema this connection cannot read, so redlock_nodes
    (which h.settle reads) is out of reach there."""
    con.execute("SELECT redlock_ping()").fetchall()


def holds_key(key, raw_key=None):
    def chk(ctx, result):
        _settle(ctx.con)  # the call returned at a quorum: the last node's answer may be on its way
        for n in ctx.c:
            eq(n.cmd("GET", raw_key if raw_key is not None else key), result,
               "value of the lock's key on %s" % n.addr)
        ctx.allow.add(raw_key if raw_key is not None else key)
    return chk


def key_absent(key):
    def chk(ctx, result):
        _settle(ctx.con)
        for n in ctx.c:
            check(not n.cmd("EXISTS", key), "key %r exists on %s after the case" % (key, n.addr))
    return chk


def secret_not_in_error(ctx, result):
    check(SECRET not in str(result), "the password appears in the error: %r" % (result,))


def node_rows_unchanged(n):
    def chk(ctx, result):
        eq(h.value(ctx.con, "SELECT count(*) FROM redlock_nodes"), n, "rows in redlock_nodes")
        eq(h.value(ctx.con, "SELECT group_concat(id) FROM redlock_nodes"),
           ",".join(str(i) for i in range(1, n + 1)), "ids in redlock_nodes")
    return chk


def holder_ttl_kept(ctx, result):
    for n in ctx.c:
        p = n.pttl(HELD)
        check(p > 30000, "the holder's TTL on %s was changed: PTTL %r" % (n.addr, p))


# --------------------------------------------------------------------------
# the table: (name, sql, params, expected, setup, extra check)
# --------------------------------------------------------------------------

A2 = "SELECT redlock_acquire(?, ?)"
A3 = "SELECT redlock_acquire(?, ?, ?)"
AM2 = "SELECT redlock_acquire_many(?, ?)"
RM1 = "SELECT redlock_release_many(?)"
RM2 = "SELECT redlock_release_many(?, ?)"
INS_URL = "INSERT INTO redlock_nodes(url) VALUES (?)"
INS_COLS = "INSERT INTO redlock_nodes(host, port) VALUES (?, ?)"


def node_url(ctx):
    return (ctx.c[0].url,)


def companion_of(key):
    """The lock key a fence counter belongs to (else key)."""
    for suffix in (b":fence",):
        if key.endswith(suffix):
            return key[:-len(suffix)]
    return key


CASES = [
    # -- ttl_ms ----------------------------------------------------------------
    ("ttl_zero", A2, ("bad:r", 0), Err(TTL_MSG)),
    ("ttl_negative", A2, ("bad:r", -1), Err(TTL_MSG)),
    ("ttl_fraction", A2, ("bad:r", 1.5), Err(TTL_MSG)),
    ("ttl_text", A2, ("bad:r", "10"), Err(TTL_MSG)),
    ("ttl_null", A2, ("bad:r", None), Err(TTL_MSG)),
    ("ttl_blob", A2, ("bad:r", b"\x10"), Err(TTL_MSG)),
    ("ttl_above_max", A2, ("bad:r", 2 ** 31), Err(TTL_MSG)),
    ("ttl_beyond_redis", A2, ("bad:r", 2 ** 62), Err(TTL_MSG)),
    ("extend_ttl_zero", "SELECT redlock_extend(?, 0)", (HELD,), Err(TTL_MSG)),
    ("extend_ttl_above_max", "SELECT redlock_extend(?, ?, ?)", (HELD, 2 ** 31, FOREIGN_TOKEN),
     Err(TTL_MSG)),
    # -- wait_ms ---------------------------------------------------------------
    ("wait_negative", A3, ("bad:r", 1000, -1), Err(WAIT_MSG)),
    ("wait_above_a_day", A3, ("bad:r", 1000, 86400001), Err(WAIT_MSG)),
    ("wait_absurd", A3, ("bad:r", 1000, 2 ** 62), Err(WAIT_MSG)),
    ("wait_fraction", A3, ("bad:r", 1000, 1.5), Err(WAIT_MSG)),
    ("wait_text", A3, ("bad:r", 1000, "5"), Err(WAIT_MSG)),
    ("wait_null", A3, ("bad:r", 1000, None), Err(WAIT_MSG)),
    # -- resource --------------------------------------------------------------
    ("resource_empty", A2, ("", 1000), Err("resource is empty")),
    ("resource_null", A2, (None, 1000), Err("resource is NULL")),
    ("resource_1mib", A2, ("x" * (1 << 20), 1000),
     Err("resource is too long (1048576 bytes; at most 65536)")),
    ("resource_limit_plus_one", A2, ("x" * (LIMIT + 1), 1000),
     Err("resource is too long (65537 bytes; at most 65536)")),
    ("resource_at_limit", A2, ("y" * LIMIT, 1000), Val(TOKEN), None, holds_key("y" * LIMIT)),
    ("resource_limit_counts_prefix", A2, ("z" * (LIMIT - 1), 1000),
     Err("key_prefix plus resource may be at most 65536 bytes"), setup_prefix("pp")),
    ("resource_nul_byte", A2, ("bad\x00r", 1000), Err("resource must not contain NUL characters")),
    ("resource_blob", A2, (b"\xff\xfe", 1000), Err("resource must be text (got a blob)")),
    ("resource_number", A2, (42, 1000), Err("resource must be text (got a number)")),
    # not UTF-8 but TEXT: a Redis key is bytes; taken byte for byte
    ("resource_text_not_utf8", "SELECT redlock_acquire(CAST(x'ff41' AS TEXT), 1000)", (),
     Val(TOKEN), None, holds_key("non-utf8", raw_key=b"\xffA")),
    ("release_resource_null", "SELECT redlock_release(?)", (None,), Err("resource is NULL")),
    ("extend_resource_blob", "SELECT redlock_extend(?, 1000)", (b"x",),
     Err("resource must be text (got a blob)")),
    # -- tokens ----------------------------------------------------------------
    ("token_null", "SELECT redlock_release(?, ?)", (HELD, None), Err("token is NULL")),
    ("token_empty", "SELECT redlock_release(?, ?)", (HELD, ""),
     Err(TOKEN_MSG, "(got an empty text)")),
    ("token_blob", "SELECT redlock_release(?, ?)", (HELD, b"\x00" * 16), Err(TOKEN_MSG)),
    ("token_nul_byte", "SELECT redlock_release(?, ?)", (HELD, "f" * 16 + "\x00" + "f" * 15),
     Err(TOKEN_MSG)),
    ("token_too_long", "SELECT redlock_release(?, ?)", (HELD, "f" * 2000), Err(TOKEN_MSG)),
    ("token_someone_elses", "SELECT redlock_release(?, ?)", (HELD, FOREIGN_TOKEN), Val(0)),
    ("token_of_another_lock", "SELECT redlock_release(?, ?)", lambda ctx: (HELD, ctx.tok), Val(0),
     setup_own("bad:mine")),
    ("token_of_expired_lock", "SELECT redlock_release(?, ?)", lambda ctx: ("bad:exp", ctx.tok),
     Val(0), setup_expired("bad:exp")),
    ("extend_token_null", "SELECT redlock_extend(?, 1000, ?)", (HELD, None), Err("token is NULL")),
    ("extend_someone_elses", "SELECT redlock_extend(?, 1000, ?)", (HELD, FOREIGN_TOKEN), Val(None),
     None, holder_ttl_kept),
    ("extend_expired_lock", "SELECT redlock_extend(?, 10000, ?)", lambda ctx: ("bad:exp", ctx.tok),
     Val(None), setup_expired("bad:exp"), key_absent("bad:exp")),
    ("double_release", "SELECT redlock_release(?)", ("bad:d",), Val(None), setup_released("bad:d")),
    ("double_release_by_token", "SELECT redlock_release(?, ?)", lambda ctx: ("bad:d", ctx.tok),
     Val(0), setup_released("bad:d")),
    ("extend_after_release", "SELECT redlock_extend(?, 10000)", ("bad:d",), Val(None),
     setup_released("bad:d"), key_absent("bad:d")),
    ("extend_after_release_by_token", "SELECT redlock_extend(?, 10000, ?)",
     lambda ctx: ("bad:d", ctx.tok), Val(None), setup_released("bad:d"), key_absent("bad:d")),
    ("release_never_held", "SELECT redlock_release(?)", (HELD,), Val(None)),
    # -- node URLs -------------------------------------------------------------
    # -- detach and adopt -------------------------------------------------------
    ("detach_resource_null", "SELECT redlock_detach(?)", (None,), Err("resource is NULL")),
    ("detach_resource_blob", "SELECT redlock_detach(?)", (b"\xff",), Err("resource must be text (got a blob)")),
    ("detach_resource_too_long", "SELECT redlock_detach(?)", ("x" * (LIMIT + 1),),
     Err("resource is too long (65537 bytes; at most 65536)")),
    ("detach_never_held", "SELECT redlock_detach(?)", (HELD,), Val(None), None, holder_ttl_kept),
    ("detach_own", "SELECT redlock_detach(?) = ?", lambda ctx: ("bad:mine", ctx.tok), Val(1),
     setup_own("bad:mine"), lambda ctx, r: holds_key("bad:mine")(ctx, ctx.tok)),
    ("adopt_resource_empty", "SELECT redlock_adopt(?, ?)", ("", FOREIGN_TOKEN), Err("resource is empty")),
    ("adopt_resource_number", "SELECT redlock_adopt(?, ?)", (42, FOREIGN_TOKEN),
     Err("resource must be text (got a number)")),
    ("adopt_token_null", "SELECT redlock_adopt(?, ?)", (HELD, None), Err("token is NULL")),
    ("adopt_token_blob", "SELECT redlock_adopt(?, ?)", (HELD, b"\x00" * 32), Err(TOKEN_MSG)),
    ("adopt_token_empty", "SELECT redlock_adopt(?, ?)", (HELD, ""), Err(TOKEN_MSG, "(got an empty text)")),
    ("adopt_token_short", "SELECT redlock_adopt(?, ?)", (HELD, "f" * 31),
     Err("token must be the 60-character text")),
    ("adopt_token_too_long", "SELECT redlock_adopt(?, ?)", (HELD, "f" * 2000), Err(TOKEN_MSG)),
    ("adopt_someone_elses", "SELECT redlock_adopt(?, ?)", (HELD, FOREIGN_TOKEN), Val(None), None,
     holder_ttl_kept),
    ("adopt_expired_lock", "SELECT redlock_adopt(?, ?)", lambda ctx: ("bad:exp", ctx.tok), Val(None),
     setup_expired("bad:exp")),
    ("adopt_released_lock", "SELECT redlock_adopt(?, ?)", lambda ctx: ("bad:d", ctx.tok), Val(None),
     setup_released("bad:d"), key_absent("bad:d")),
    ("adopt_holding_another_token", "SELECT redlock_adopt(?, ?)", ("bad:mine", FOREIGN_TOKEN),
     Err("already holds this resource with another token"), setup_own("bad:mine")),
    # -- release before COMMIT -------------------------------------------------
    ("release_in_write_statement", "INSERT INTO w SELECT redlock_release(?)", ("bad:mine",),
     Err("redlock_release() refused", "COMMIT first"), setup_table_and_own("bad:mine"),
     lambda ctx, r: holds_key("bad:mine")(ctx, ctx.tok)),
    ("release_all_in_write_statement", "INSERT INTO w SELECT redlock_release_all()", (),
     Err("redlock_release_all() refused", "COMMIT first"), setup_table_and_own("bad:mine"),
     lambda ctx, r: holds_key("bad:mine")(ctx, ctx.tok)),
    # -- whole numbers as REAL (Node's better-sqlite3 binds every number so) ---
    ("ttl_whole_real", A2, ("bad:real", 10000.0), Val(TOKEN), None, holds_key("bad:real")),
    ("config_whole_real", "SELECT redlock_config('timeout_ms', ?)", (70.0,), Val(70)),
    ("config_quorum_real_lowered_while_held", "SELECT redlock_config('unsafe_test_quorum', ?)", (1.0,),
     Err("cannot lower the votes needed"), setup_own("bad:mine")),
    ("url_unknown_scheme", INS_URL, ("http://127.0.0.1:6379",), Err("node URL must start with redis://")),
    ("url_tls_option_without_tls", INS_URL, ("redis://127.0.0.1:6379?tls_verify=0",), Err("it needs rediss://")),
    ("url_malformed", INS_URL, ("redis//127.0.0.1:6379",), Err("node URL must start with redis://")),
    ("url_port_zero", INS_URL, ("redis://127.0.0.1:0",), Err(PORT_URL)),
    ("url_port_70000", INS_URL, ("redis://127.0.0.1:70000",), Err(PORT_URL)),
    ("url_port_text", INS_URL, ("redis://127.0.0.1:x",), Err(PORT_URL)),
    ("url_empty_host", INS_URL, ("redis://:6379",), Err("node URL has an empty host")),
    ("url_ipv6_unterminated", INS_URL, ("redis://[::1:6379",), Err("IPv6 address has no closing ']'")),
    ("url_absurdly_long", INS_URL, ("redis://" + "h" * 20000 + ":6379",),
     Err("node URL is too long (at most 16384 bytes)")),
    ("url_host_too_long", INS_URL, ("redis://" + "h" * 5000 + ":6379",), Err("host name is too long (at most 255 bytes)")),
    ("url_bad_db", INS_URL, ("redis://127.0.0.1:6379/x",), Err("the path must be a database number")),
    ("url_bad_escape", INS_URL, ("redis://alice:%zz@127.0.0.1",), Err("bad percent-escape")),
    ("url_escaped_nul", INS_URL, ("redis://alice:a%00b@127.0.0.1",), Err("bad percent-escape")),
    ("url_unknown_option", INS_URL, ("redis://127.0.0.1?foo=1",), Err("unknown option; the options are timeout_ms")),
    ("url_blob", INS_URL, (b"redis://127.0.0.1:6380",), Err("url must be text")),
    ("url_and_host", "INSERT INTO redlock_nodes(url, host) VALUES (?, ?)",
     ("redis://127.0.0.1:6380", "127.0.0.1"), Err("give either url or host")),
    ("url_password_not_echoed", INS_URL, ("redis://alice:%s@bad host:6379" % SECRET,),
     Err("host has a character that is not allowed"), None, secret_not_in_error),
    # -- node columns, duplicates, ids -----------------------------------------
    ("host_empty", INS_COLS, ("", 6380), Err("host must be a non-empty text")),
    ("host_nul_byte", INS_COLS, ("127.0.0.1\x00evil", 6380), Err("host must not contain NUL characters")),
    ("port_zero", INS_COLS, ("127.0.0.1", 0), Err(PORT_COL)),
    ("port_70000", INS_COLS, ("127.0.0.1", 70000), Err(PORT_COL)),
    ("port_text", INS_COLS, ("127.0.0.1", "x"), Err(PORT_COL)),
    ("db_negative", "INSERT INTO redlock_nodes(host, port, db) VALUES ('127.0.0.1', 6380, -1)", (),
     Err("db must be a whole number from 0 to 1000000")),
    ("timeout_zero", "INSERT INTO redlock_nodes(host, port, timeout_ms) VALUES ('127.0.0.1', 6380, 0)",
     (), Err("timeout_ms must be a whole number from 1 to 600000")),
    ("password_too_long", "INSERT INTO redlock_nodes(host, port, password) VALUES ('127.0.0.1', 6380, ?)",
     ("p" * 600,), Err("user name or password is too long (at most 512 bytes)")),
    ("password_nul_byte", "INSERT INTO redlock_nodes(host, port, password) VALUES ('127.0.0.1', 6380, ?)",
     (SECRET + "\x00tail",), Err("password must not contain NUL characters"), None, secret_not_in_error),
    ("username_nul_byte", "INSERT INTO redlock_nodes(host, port, username) VALUES ('127.0.0.1', 6380, ?)",
     ("ali\x00ce",), Err("username must not contain NUL characters")),
    ("duplicate_node_url", INS_URL, node_url, Err("is listed already (node 1)", "each node must be listed once"),
     None, node_rows_unchanged(3)),
    ("duplicate_node_columns", INS_COLS, lambda ctx: ("127.0.0.1", ctx.c[1].port),
     Err("is listed already (node 2)"), None, node_rows_unchanged(3)),
    ("duplicate_id", "INSERT INTO redlock_nodes(id, host, port) VALUES (1, '127.0.0.1', 6380)", (),
     Err("a node with id 1 exists already"), None, node_rows_unchanged(3)),
    ("update_id", "UPDATE redlock_nodes SET id = 99 WHERE id = 1", (),
     Err("a node's id cannot be changed"), None, node_rows_unchanged(3)),
    ("update_state", "UPDATE redlock_nodes SET state = 'up' WHERE id = 1", (),
     Err("state and last_error are read-only")),
    ("update_into_duplicate", "UPDATE redlock_nodes SET port = ? WHERE id = 4",
     lambda ctx: (ctx.c[0].port,), Err("is listed already (node 1)"), setup_extra_node),
    # -- argument counts (SQLite's own refusal: fixed-arity registrations) -----
    ("acquire_no_arguments", "SELECT redlock_acquire()", (),
     SqlErr("wrong number of arguments to function redlock_acquire()")),
    ("acquire_one_argument", "SELECT redlock_acquire('bad:r')", (),
     SqlErr("wrong number of arguments to function redlock_acquire()")),
    ("acquire_four_arguments", "SELECT redlock_acquire('bad:r', 1000, 0, 1)", (),
     SqlErr("wrong number of arguments to function redlock_acquire()")),
    ("release_three_arguments", "SELECT redlock_release('bad:r', 'a', 'b')", (),
     SqlErr("wrong number of arguments to function redlock_release()")),
    ("extend_one_argument", "SELECT redlock_extend('bad:r')", (),
     SqlErr("wrong number of arguments to function redlock_extend()")),
    ("config_no_arguments", "SELECT redlock_config()", (),
     SqlErr("wrong number of arguments to function redlock_config()")),
    ("version_one_argument", "SELECT redlock_version(1)", (),
     SqlErr("wrong number of arguments to function redlock_version()")),
    # -- settings --------------------------------------------------------------
    ("detach_two_arguments", "SELECT redlock_detach('bad:r', 'x')", (),
     SqlErr("wrong number of arguments to function redlock_detach()")),
    ("adopt_one_argument", "SELECT redlock_adopt('bad:r')", (),
     SqlErr("wrong number of arguments to function redlock_adopt()")),
    ("config_unknown", "SELECT redlock_config('nope')", (), Err("unknown setting 'nope'", "timeout_ms")),
    ("config_bad_value", "SELECT redlock_config('timeout_ms', 'x')", (),
     Err("timeout_ms takes a whole number, not text: milliseconds from 1 to 600000")),
    ("config_prefix_nul", "SELECT redlock_config('key_prefix', ?)", ("pre\x00fix",),
     Err("key_prefix must not contain NUL characters")),
    ("config_name_nul", "SELECT redlock_config(?)", ("timeout_ms\x00junk",),
     Err("the setting name must not contain NUL characters")),
    ("config_null_name", "SELECT redlock_config(NULL)", (), Err("the setting name must be text")),
    ("config_prefix_too_long", "SELECT redlock_config('key_prefix', ?)", ("p" * 1025,),
     Err("key_prefix must be text of at most 1024 bytes")),
    # -- observability -------------------------------------------------------------
    ("holder_null", "SELECT redlock_holder(NULL)", (), Err("resource is NULL")),
    ("holder_number", "SELECT redlock_holder(7)", (), Err("resource must be text (got a number)")),
    ("holder_empty", "SELECT redlock_holder('')", (), Err("resource is empty")),
    ("holder_too_long", "SELECT redlock_holder(?)", ("x" * (LIMIT + 1),), Err("resource is too long")),
    ("holder_no_arguments", "SELECT redlock_holder()", (),
     SqlErr("wrong number of arguments to function redlock_holder()")),
    ("ping_one_argument", "SELECT redlock_ping(1)", (),
     SqlErr("wrong number of arguments to function redlock_ping()")),
    ("client_name_too_long", "SELECT redlock_config('client_name', ?)", ("a" * 65,),
     Err("client_name must be text of at most 64 bytes")),
    ("client_name_number", "SELECT redlock_config('client_name', 5)", (),
     Err("client_name takes text, not a whole number")),
    ("allow_evicting_two", "SELECT redlock_config('allow_evicting_nodes', 2)", (),
     Err("allow_evicting_nodes must be 0")),
    ("holder_info_text", "SELECT redlock_config('holder_info', 'on')", (),
     Err("holder_info takes a whole number, not text")),
    ("stats_insert", "INSERT INTO redlock_stats(id) VALUES (1)", (),
     SqlErr("table redlock_stats may not be modified")),
    ("view_holder", "SELECT * FROM v", (), SqlErr("unsafe use of redlock_holder()"),
     hostile_db("CREATE VIEW v AS SELECT redlock_holder('bad:held')")),
    ("view_ping", "SELECT * FROM v", (), SqlErr("unsafe use of redlock_ping()"),
     hostile_db("CREATE VIEW v AS SELECT redlock_ping()")),
    ("view_stats", "SELECT * FROM v", (), SqlErr('unsafe use of virtual table "redlock_stats"'),
     hostile_db("CREATE VIEW v AS SELECT * FROM redlock_stats")),
    # -- a database file using the extension (SQLITE_DIRECTONLY) ---------------
    ("view_acquire", "SELECT * FROM v", (), SqlErr("unsafe use of redlock_acquire()"),
     hostile_db("CREATE VIEW v AS SELECT redlock_acquire('bad:view', 10000)"), key_absent("bad:view")),
    ("view_release_holder", "SELECT * FROM v", (), SqlErr("unsafe use of redlock_release()"),
     hostile_db("CREATE VIEW v AS SELECT redlock_release('bad:held', '%s')" % FOREIGN_TOKEN)),
    ("view_config", "SELECT * FROM v", (), SqlErr("unsafe use of redlock_config()"),
     hostile_db("CREATE VIEW v AS SELECT redlock_config('key_prefix', 'evil:')")),
    ("view_nodes", "SELECT * FROM v", (), SqlErr('unsafe use of virtual table "redlock_nodes"'),
     hostile_db("CREATE VIEW v AS SELECT * FROM redlock_nodes")),
    ("trigger_acquire", "INSERT INTO t VALUES (1)", (), SqlErr("unsafe use of redlock_acquire()"),
     hostile_db("CREATE TABLE t(x)",
                "CREATE TRIGGER tr AFTER INSERT ON t BEGIN SELECT redlock_acquire('bad:trg', 10000); END"),
     key_absent("bad:trg")),
    ("trigger_adds_node", "INSERT INTO t VALUES (1)", (),
     SqlErr('unsafe use of virtual table "redlock_nodes"'),
     hostile_db("CREATE TABLE t(x)", "CREATE TRIGGER tr AFTER INSERT ON t BEGIN "
                "INSERT INTO redlock_nodes(host, port) VALUES ('127.0.0.1', 9); END"),
     node_rows_unchanged(3)),
    ("default_acquire", "INSERT INTO t DEFAULT VALUES", (), SqlErr("unsafe use of redlock_acquire()"),
     hostile_db("CREATE TABLE t(x DEFAULT (redlock_acquire('bad:dflt', 10000)))"), key_absent("bad:dflt")),
    # SQLite 3.40 itself does not refuse a DIRECTONLY function in a CHECK
    # constraint: the extension has to (redlock_guard).
    ("check_acquire", "INSERT INTO t VALUES (1)", (), Err("CHECK constraint"),
     hostile_db("CREATE TABLE t(x CHECK (redlock_acquire('bad:chk', 10000) IS NOT NULL))"),
     key_absent("bad:chk")),
    ("check_release_holder", "INSERT INTO t VALUES (1)", (), Err("CHECK constraint"),
     hostile_db("CREATE TABLE t(x CHECK (redlock_release('bad:held', '%s') IS NOT NULL))"
                % FOREIGN_TOKEN)),
    ("check_adopt_holder", "INSERT INTO t VALUES (1)", (), Err("CHECK constraint"),
     hostile_db("CREATE TABLE t(x CHECK (redlock_adopt('bad:held', '%s') IS NOT NULL))" % FOREIGN_TOKEN),
     holder_ttl_kept),
    ("check_detach", "INSERT INTO t VALUES (1)", (), Err("CHECK constraint"),
     hostile_db("CREATE TABLE t(x CHECK (redlock_detach('bad:held') IS NOT NULL))")),
    ("view_adopt", "SELECT * FROM v", (), SqlErr("unsafe use of redlock_adopt()"),
     hostile_db("CREATE VIEW v AS SELECT redlock_adopt('bad:held', '%s')" % FOREIGN_TOKEN)),
    ("trigger_detach", "INSERT INTO t VALUES (1)", (), SqlErr("unsafe use of redlock_detach()"),
     hostile_db("CREATE TABLE t(x)", "CREATE TRIGGER tr AFTER INSERT ON t BEGIN SELECT redlock_detach('x'); END")),
    ("generated_column", "INSERT INTO t(x) VALUES (1)", (),
     SqlErr("non-deterministic functions prohibited in generated columns"),
     hostile_db("CREATE TABLE t(x, y AS (redlock_acquire('bad:gen', 10000)))"), key_absent("bad:gen")),
    ("partial_index", "INSERT INTO t VALUES (1)", (),
     SqlErr("non-deterministic functions prohibited in partial index WHERE clauses"),
     hostile_db("CREATE TABLE t(x)",
                "CREATE INDEX i ON t(x) WHERE redlock_acquire('bad:pidx', 10000) IS NOT NULL"),
     key_absent("bad:pidx")),
    ("expression_index", "INSERT INTO t VALUES ('bad:eidx')", (),
     SqlErr("non-deterministic functions prohibited in index expressions"),
     hostile_db("CREATE TABLE t(x)", "CREATE INDEX i ON t(redlock_acquire(x, 10000))"),
     key_absent("bad:eidx")),
    # -- several names at once: redlock_acquire_many / redlock_release_many -----
    ("many_empty_array", AM2, ("[]", 1000), Err("resources_json is an empty array", "give at least one name")),
    ("many_null", AM2, (None, 1000), Err("resources_json is NULL", "json_group_array")),
    ("many_number", AM2, (42, 1000), Err("resources_json must be text holding a JSON array of names (got a number)")),
    ("many_blob", AM2, (b"[]", 1000), Err("resources_json must be text holding a JSON array of names (got a blob)")),
    ("many_not_json", AM2, ("[\"a\",", 1000), Err("resources_json is not valid JSON")),
    ("many_bare_name", AM2, ("bad:r", 1000), Err("resources_json is not valid JSON")),
    ("many_object", AM2, ('{"bad:r": 1}', 1000), Err("must be a JSON array of names, not a JSON object")),
    ("many_string", AM2, ('"bad:r"', 1000), Err("must be a JSON array of names, not a JSON text")),
    ("many_non_string", AM2, ('["bad:r", 7]', 1000),
     Err("element 2 of resources_json is a JSON integer; every name must be a JSON string"), None, key_absent("bad:r")),
    ("many_nested", AM2, ('["bad:r", ["x"]]', 1000), Err("element 2 of resources_json is a JSON array")),
    ("many_null_element", AM2, ('["bad:r", null]', 1000), Err("element 2 of resources_json is a JSON null")),
    ("many_duplicate", AM2, ('["bad:r", "bad:s", "bad:r"]', 1000), Err("'bad:r' is in the list twice"), None,
     key_absent("bad:s")),
    ("many_empty_name", AM2, ('["bad:r", ""]', 1000), Err("element 2 of resources_json is an empty name")),
    ("many_nul_escape", AM2, ('["bad:r\\u0000x"]', 1000), Err("contains \\u0000 (a NUL character)"), None,
     key_absent("bad:r")),
    ("many_escaped_backslash_u0000", AM2, ('["bad:r\\\\u0000"]', 1000), Val(TOKEN), None,
     holds_key("bad:r\\u0000")),
    ("many_over_limit", AM2, (lambda ctx: (json.dumps(["bad:%d" % i for i in range(10001)]), 1000)),
     Err("more than 10000 names", "split the set")),
    ("many_name_too_long", AM2, (json.dumps(["bad:r", "x" * (LIMIT + 1)]), 1000),
     Err("name 2 of the list", "key_prefix plus resource may be at most 65536 bytes"), None, key_absent("bad:r")),
    ("many_ttl_zero", AM2, ('["bad:r"]', 0), Err(TTL_MSG)),
    ("many_ttl_text", AM2, ('["bad:r"]', "10"), Err(TTL_MSG)),
    ("many_wait_negative", "SELECT redlock_acquire_many(?, ?, ?)", ('["bad:r"]', 1000, -1), Err(WAIT_MSG)),
    ("many_holds_held_name", AM2, (json.dumps(["bad:s", HELD]), 1000), Val(None), None, key_absent("bad:s")),
    ("many_already_listed", AM2, ('["bad:s", "bad:mine"]', 1000), Err("'bad:mine' (name 2 of the list) is already listed"),
     setup_own("bad:mine"), key_absent("bad:s")),
    ("many_three_arguments_release", "SELECT redlock_release_many('[]', 'a', 'b')", (),
     SqlErr("wrong number of arguments to function redlock_release_many()")),
    ("many_one_argument_acquire", "SELECT redlock_acquire_many('[]')", (),
     SqlErr("wrong number of arguments to function redlock_acquire_many()")),
    ("release_many_empty", RM1, ("[]",), Err("resources_json is an empty array")),
    ("release_many_not_array", RM1, ("{}",), Err("must be a JSON array of names, not a JSON object")),
    ("release_many_token_null", RM2, ('["bad:r"]', None), Err("token is NULL")),
    ("release_many_token_blob", RM2, ('["bad:r"]', b"\x00"), Err("token must be the text redlock_acquire_many returned")),
    ("release_many_someone_elses", RM2, (json.dumps([HELD]), FOREIGN_TOKEN), Val(0)),
    ("release_many_not_held", RM1, (json.dumps([HELD]),), Val(None)),
]


def _describe(params):
    out = []
    for p in params:
        r = repr(p)
        out.append(r if len(r) <= 40 else r[:30] + "...(%d)" % len(p))
    return "(" + ", ".join(out) + ")"


def _run(case):
    name, sql, params, expect = case[:4]
    setup = case[4] if len(case) > 4 else None
    extra = case[5] if len(case) > 5 else None
    c = h.shared_cluster(3)
    # Timing is not under test here: a generous per-node timeout, so that a
    # loaded machine (the sanitizer run) does not leave a node out.
    holder = h.connect(c, timeout_ms=2000)
    htok = h.is_token(h.value(holder, "SELECT redlock_acquire(?, 60000)", HELD), "holder's token")
    # acquire returns at a quorum: the last node's SET may still be on its way.
    h.wait_until(lambda: [n.get(HELD) for n in c] == [htok] * len(c), 10,
                 what="the holder's key on every node before the case")
    ctx = Ctx(c, htok)
    try:
        database = ":memory:"
        if setup is not None and getattr(setup, "database", False):
            setup(ctx)
            database = ctx.path
        ctx.con = h.connect(c, database=database, timeout_ms=2000)
        if setup is not None and not getattr(setup, "database", False):
            setup(ctx)
        args = params(ctx) if callable(params) else params
        what = "%s: %s %s" % (name, sql[:60], _describe(args))

        t0 = time.monotonic()
        try:
            rows = ctx.con.execute(sql, args).fetchall()
            result, failed = (rows[0][0] if rows and rows[0] else None), False
        except sqlite3.Error as e:
            result, failed = str(e), True
        took = time.monotonic() - t0
        check(took < TIME_LIMIT, "%s took %.1f s" % (what, took))

        if isinstance(expect, Err):
            check(failed, "%s: expected an error, got %r" % (what, result))
            if expect.ours:
                check(result.startswith("redlock: "),
                      "%s: the error should start with 'redlock: ': %r" % (what, result))
            for t in expect.texts:
                check(t in result, "%s: the error should mention %r, got %r" % (what, t, result))
        else:
            check(not failed, "%s: unexpected error %r" % (what, result))
            if expect.value is TOKEN:
                h.is_token(result, what)
            else:
                eq(result, expect.value, what)
        if extra:
            extra(ctx, result)

        # the connection lives on
        check(h.value(ctx.con, "SELECT redlock_version()"), "%s: the connection no longer answers" % what)
        # the holder's key is untouched, and nothing else is left behind
        _settle(ctx.con)
        for n in c:
            eq(n.get(HELD), htok, "%s: the holder's key on %s" % (what, n.addr))
            check(n.pttl(HELD) > 0, "%s: the holder's key lost its expiry on %s" % (what, n.addr))
            allowed = {k if isinstance(k, bytes) else k.encode() for k in {HELD} | ctx.allow}
            # holder details, a connection's, outlive its locks; so does a
            # set's fencing floor, like a counter
            stray = [k for k in n.cmd("KEYS", "*", raw=True)
                     if companion_of(k) not in allowed and k != b"redlock-fence-floor" and
                     not (b"redlock-client:" in k and n.cmd("GET", k, raw=True).startswith(b"redlock1\x1f"))]
            check(not stray, "%s: keys left on %s: %r" % (what, n.addr, [k[:40] for k in stray]))
    finally:
        if ctx.con is not None:
            ctx.con.close()
        if ctx.tmp:
            for f in os.listdir(ctx.tmp):
                os.unlink(os.path.join(ctx.tmp, f))
            os.rmdir(ctx.tmp)


# -- redlock_acquire_shared ---------------------------------------------------
S4 = "SELECT redlock_acquire_shared(?, ?, ?, ?)"
MAXH_MSG = "max_holders must be a whole number from 1 to 1000000, or 0 or NULL for no limit"
CASES += [
    ("shared_ttl_zero", "SELECT redlock_acquire_shared(?, ?)", ("bad:r", 0), Err(TTL_MSG)),
    ("shared_ttl_text", "SELECT redlock_acquire_shared(?, ?)", ("bad:r", "10"), Err(TTL_MSG)),
    ("shared_wait_negative", "SELECT redlock_acquire_shared(?, ?, ?)", ("bad:r", 1000, -1), Err(WAIT_MSG)),
    ("shared_max_holders_negative", S4, ("bad:r", 1000, 0, -1), Err(MAXH_MSG)),
    ("shared_max_holders_text", S4, ("bad:r", 1000, 0, "2"), Err(MAXH_MSG)),
    ("shared_max_holders_fraction", S4, ("bad:r", 1000, 0, 1.5), Err(MAXH_MSG)),
    ("shared_max_holders_blob", S4, ("bad:r", 1000, 0, b"\x02"), Err(MAXH_MSG)),
    ("shared_max_holders_huge", S4, ("bad:r", 1000, 0, 2 ** 40), Err(MAXH_MSG)),
    ("shared_resource_null", "SELECT redlock_acquire_shared(NULL, 1000)", (), Err("resource is NULL")),
    ("shared_resource_empty", "SELECT redlock_acquire_shared('', 1000)", (), Err("resource is empty")),
    ("shared_resource_number", "SELECT redlock_acquire_shared(7, 1000)", (), Err("resource must be text")),
    # the exclusive holder's key is left alone (the table's own check)
    ("shared_on_held_exclusive", "SELECT redlock_acquire_shared(?, 1000)", (HELD,), Val(None)),
    ("shared_no_arguments", "SELECT redlock_acquire_shared()", (),
     SqlErr("wrong number of arguments to function redlock_acquire_shared()")),
    ("shared_one_argument", "SELECT redlock_acquire_shared('bad:r')", (),
     SqlErr("wrong number of arguments to function redlock_acquire_shared()")),
    ("shared_five_arguments", "SELECT redlock_acquire_shared('bad:r', 1000, 0, 1, 1)", (),
     SqlErr("wrong number of arguments to function redlock_acquire_shared()")),
]


def test_table_is_complete():
    names = [c[0] for c in CASES]
    eq(len(names), len(set(names)), "distinct case names")
    check(len(CASES) >= 40, "the bad-input table has %d cases, fewer than 40" % len(CASES))


for _case in CASES:
    h.register(globals(), "test_bad_" + _case[0], _run, _case)


# --------------------------------------------------------------------------
# tokens: from getrandom(2), and no lock without one
# --------------------------------------------------------------------------

NO_RANDOM_C = r"""
#include <errno.h>
#include <stddef.h>
#include <sys/types.h>
ssize_t getrandom(void *buf, size_t len, unsigned int flags);
ssize_t getrandom(void *buf, size_t len, unsigned int flags) {
    (void)buf; (void)len; (void)flags;
    errno = ENOSYS;
    return -1;
}
"""


def test_tokens_fail_closed_without_getrandom():
    """With getrandom(2) failing (a preloaded stand-in), acquire is an error
    and no key is written: no weaker source of randomness is used."""
    c = h.shared_cluster(3)
    with tempfile.TemporaryDirectory(prefix="redlock-norandom-") as d:
        so = h.build_c(NO_RANDOM_C, os.path.join(d, "norandom.so"), ["-shared", "-fPIC"])
        old = os.environ.get("LD_PRELOAD")
        os.environ["LD_PRELOAD"] = ((old + " ") if old else "") + so   # a sanitizer runtime stays first
        try:
            rc, out, err = h.shell("SELECT 'token:' || redlock_acquire('bad:rnd', 10000);\n"
                                   "SELECT 'still:' || redlock_version();", c)
        finally:
            if old is None:
                os.environ.pop("LD_PRELOAD", None)
            else:
                os.environ["LD_PRELOAD"] = old
    check(rc != 0 and "getrandom" in err and "no lock taken" in err,
          "acquire without random bytes should fail closed: rc=%r out=%r err=%r" % (rc, out, err))
    check("token:" not in out and "still:" in out, "shell output: %r" % out)
    for n in c:
        eq(n.keys(), [], "keys on %s" % n.addr)


def test_tokens_are_128_bit_and_distinct():
    c = h.shared_cluster(1)
    con = h.connect(c, timeout_ms=h.RELAXED_TIMEOUT_MS)    # about tokens, not slow nodes
    toks = [h.is_token(h.value(con, "SELECT redlock_acquire(?, 10000)", "bad:t%d" % i)) for i in range(200)]
    eq(len(set(toks)), len(toks), "distinct tokens")
    # the first 28 characters are public (the connection's holder-details id, the time); the rest is random
    eq(len({t[:16] for t in toks}), 1, "one connection, one details id")
    check(len({t[28:36] for t in toks}) > 190, "the random parts share prefixes: %r" % toks[:5])
    eq(len(toks[0]) - 28, 32, "128 bits as hex")


# --------------------------------------------------------------------------
# regressions found by fuzzing (fuzz/corpus/url/regress-*)
# --------------------------------------------------------------------------

def test_regress_url_column_reads_back_as_the_same_node():
    """fuzz_url found that the url column showed the decoded user name as
    is, so a user name with '@', ':', '/' or '%' made a URL that did not
    parse back, or named another host; and that the 512-byte limit was
    applied to the encoded text in a URL but the decoded text in columns."""
    con = h.connect("")
    users = ["p%he\x8ee0e", "a@b:c/d?e#f", "x" * 200 + "@", "\u00e9" * 256]   # the last: 512 bytes
    for i, user in enumerate(users):
        con.execute("INSERT INTO redlock_nodes(host, port, username, password) VALUES ('127.0.0.1', ?, ?, 'pw')",
                    (7100 + i, user))
    shown = [r[0] for r in con.execute("SELECT url FROM redlock_nodes ORDER BY id")]
    con.execute("DELETE FROM redlock_nodes")
    for u in shown:
        con.execute("INSERT INTO redlock_nodes(url) VALUES (?)", (u,))
    back = con.execute("SELECT username, host, port, password FROM redlock_nodes ORDER BY id").fetchall()
    eq(back, [(u, "127.0.0.1", 7100 + i, MASK) for i, u in enumerate(users)],
       "nodes read back from the url column %r" % [s[:60] for s in shown])
    # a user name of 512 bytes that takes more than 512 bytes encoded
    con.execute("INSERT INTO redlock_nodes(url) VALUES (?)", ("redis://%s:pw@127.0.0.1:7200" % ("%C3%A9" * 256),))
    eq(h.value(con, "SELECT username FROM redlock_nodes WHERE port = 7200"), "\u00e9" * 256, "decoded user name")
    h.redlock_error(con, "INSERT INTO redlock_nodes(url) VALUES (?)", "redis://%s:pw@127.0.0.1:7201" % ("%C3%A9" * 257),
                    contains=("user name or password is too long (at most 512 bytes)",))
