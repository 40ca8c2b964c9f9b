"""The schema guard: a database file cannot make the functions with side
effects run, from any place of its schema, whatever the user's statement
says.

Each hostile file is written by a plain connection without the extension
(deterministic stand-ins let SQLite accept CHECK, index and generated-column
DDL). Its schema calls a function for the "attacker" (lock 'atk' for 600 s,
or unsafe_test_quorum = 1); the user's statement itself legitimately calls
the same function. The attacker's call must never run (checked in Redis and
in the settings) and the statement must end in a clear error. Every place is
tried with the file opened as main and attached.

SQLite 3.40 itself refuses DEFAULT, triggers, views (DIRECTONLY) and
generated columns and index expressions (non-deterministic); it does not
refuse a CHECK constraint: that is the extension's part."""
# SPDX-License-Identifier: BSD-3-Clause

import json
import os
import sqlite3
import subprocess
import tempfile
import unittest
import threading

import harness as h
from harness import check, eq, is_token, value

# not a timing test: a slow node on a loaded machine must not fail it
h.default_config(timeout_ms=h.RELAXED_TIMEOUT_MS)

ATK = "atk"  # the attacker's lock
JOB = "job"  # the user's own lock

# Where a schema can hold an expression; @F@ is the attacker's call.
PLACES = {
    "check": ["CREATE TABLE joblog(tok CHECK (coalesce(length(@F@), 1) > 0))"],
    "default": ["CREATE TABLE joblog(tok, extra DEFAULT (@F@))"],
    "generated_virtual": ["CREATE TABLE joblog(tok, g AS (@F@) VIRTUAL)"],
    "generated_stored": ["CREATE TABLE joblog(tok, g AS (@F@) STORED)"],
    "expression_index": ["CREATE TABLE joblog(tok)", "CREATE INDEX ji ON joblog(@F@)"],
    "partial_index": ["CREATE TABLE joblog(tok)", "CREATE INDEX ji ON joblog(tok) WHERE @F@ IS NOT NULL"],
    "trigger": ["CREATE TABLE joblog(tok)",
                "CREATE TRIGGER tr AFTER INSERT ON joblog BEGIN SELECT @F@; END"],
    "trigger_when": ["CREATE TABLE joblog(tok)",
                     "CREATE TRIGGER tr AFTER INSERT ON joblog WHEN @F@ IS NOT NULL BEGIN SELECT 1; END"],
    "view": ["CREATE TABLE joblog(tok)", "CREATE VIEW jobs AS SELECT @F@ AS t"],
}

# The attacker's call and the user's own call of the same function.
CALLS = {
    "acquire": ("redlock_acquire('atk', 600000)", "redlock_acquire('job', 10000)"),
    "lock": ("redlock_lock('atk', 600000)", "redlock_lock('job', 10000)"),
    "acquire_shared": ("redlock_acquire_shared('atk', 600000)", "redlock_acquire_shared('job', 10000)"),
    "config": ("redlock_config('unsafe_test_quorum', 1)", "redlock_config('timeout_ms')"),
    "adopt": ("redlock_adopt('atk', '%s')" % ("a" * 60), "redlock_adopt('job', '%s')" % ("0" * 60)),
}

# What a refusal may say: ours, or SQLite's own (at prepare or schema load).
CLEAR_ERRORS = ("redlock: ", "unsafe use of redlock_", "malformed database schema")


def _stand_ins(db):
    for name, n in (("redlock_acquire", 2), ("redlock_acquire_shared", 2), ("redlock_lock", 2), ("redlock_config", 1),
                    ("redlock_config", 2), ("redlock_release", 1), ("redlock_release", 2),
                    ("redlock_release_all", 0), ("redlock_extend", 2), ("redlock_extend", 3),
                    ("redlock_adopt", 2), ("redlock_detach", 1)):
        db.create_function(name, n, lambda *a: 1, deterministic=True)


def make_file(path, ddl):
    """Writes a database file with these statements, without the extension."""
    db = sqlite3.connect(path, isolation_level=None)
    _stand_ins(db)
    for stmt in ddl:
        db.execute(stmt)
    db.close()


def user_sql(place, call, mode):
    schema = "" if mode == "main" else "h."
    if place == "view":
        return "SELECT %s, t FROM %sjobs" % (call, schema)
    return "INSERT INTO %sjoblog(tok) VALUES (%s)" % (schema, call)


def open_as(c, path, mode):
    """A connection with the file as main, or a configured one with it attached as h."""
    if mode == "main":
        # no settings: a schema that names redlock_config refuses them
        return h.connect(c, database=path, defaults=True)
    con = h.connect(c)
    con.execute("ATTACH ? AS h", (path,))
    return con


def attach_or_error(con, path):
    """ATTACH, or the error of a schema SQLite cannot load (then None)."""
    try:
        con.execute("ATTACH ? AS h", (path,))
        return None
    except sqlite3.Error as e:
        return str(e)


def no_lock_keys(c, what):
    for n in c:
        for key in (ATK, JOB):
            check(not n.cmd("EXISTS", key), "%s: key %r exists on %s" % (what, key, n.addr))


def quorum_setting_unchanged(con, what):
    """unsafe_test_quorum must still be 0 where it can be read at all."""
    try:
        q = value(con, "SELECT redlock_config('unsafe_test_quorum')")
    except sqlite3.Error as e:
        check(str(e).startswith("redlock: "), "%s: reading the setting: %r" % (what, e))
        return
    eq(q, 0, "%s: unsafe_test_quorum after the statement" % what)


def run_case(place, fn, mode):
    c = h.shared_cluster(3)
    attacker, user = CALLS[fn]
    what = "%s in %s, file as %s" % (fn, place, mode)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "hostile.db")
        make_file(path, [s.replace("@F@", attacker) for s in PLACES[place]])
        if mode == "main":
            con = open_as(c, path, mode)
            err = None
        else:
            con = h.connect(c)
            err = attach_or_error(con, path)
        attached = mode == "attach" and err is None
        if err is None:
            err = h.sql_error(con, user_sql(place, user, mode), what=what)
        check(any(err.startswith(p) or p in err for p in CLEAR_ERRORS),
              "%s: the error should say why: %r" % (what, err))
        if place == "check":
            # SQLite 3.40 runs it: the refusal has to be ours, naming the table
            check(err.startswith("redlock: ") and "joblog" in err,
                  "%s: the extension should refuse and name the table: %r" % (what, err))
        if "malformed database schema" not in err:
            h.settle(con)  # (a schema SQLite cannot load stops every statement: nothing ran)
        no_lock_keys(c, what)
        if fn == "config":
            if attached:
                con.execute("DETACH h")
            quorum_setting_unchanged(con, what)
        con.close()


def _make_tests():
    for place in PLACES:
        for fn in CALLS:
            for mode in ("main", "attach"):
                def t(place=place, fn=fn, mode=mode):
                    run_case(place, fn, mode)
                t.__name__ = "test_%s_%s_%s" % (place, fn, mode)
                globals()[t.__name__] = t


_make_tests()


# --------------------------------------------------------------------------
# spellings SQLite resolves to the same function
# --------------------------------------------------------------------------

def test_check_spellings_are_found():
    c = h.shared_cluster(1)
    for spelled in ('"ReDlOcK_AcQuIrE"', "[redlock_acquire]", "`REDLOCK_ACQUIRE`", "Redlock_Acquire"):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "hostile.db")
            make_file(path, ["CREATE TABLE joblog(tok CHECK (coalesce(length(%s('atk', 600000)), 1) > 0))" % spelled])
            con = open_as(c, path, "attach")
            h.redlock_error(con, "INSERT INTO h.joblog VALUES (redlock_acquire('job', 10000))",
                            what="CHECK spelled %s" % spelled, contains=("joblog", "DETACH"))
            h.settle(con)
            no_lock_keys(c, "CHECK spelled %s" % spelled)
            con.close()


def holding_with_hostile_attached(c, d, check_sql):
    """A connection that holds the lock 'mine' and then attaches, as h, a
    file whose table joblog has the CHECK check_sql. Returns (con, token)."""
    path = os.path.join(d, "hostile.db")
    make_file(path, ["CREATE TABLE joblog(%s)" % check_sql])
    con = h.connect(c)
    tok = is_token(value(con, "SELECT redlock_acquire('mine', 60000)"))
    con.execute("ATTACH ? AS h", (path,))
    return con, tok


def test_check_release_all_keeps_the_users_locks():
    """A CHECK calling redlock_release_all() must not give back the user's locks."""
    c = h.shared_cluster(3)
    with tempfile.TemporaryDirectory() as d:
        con, tok = holding_with_hostile_attached(c, d, "n CHECK (coalesce(length(redlock_release_all()), 1) > 0)")
        h.redlock_error(con, "INSERT INTO h.joblog VALUES (redlock_release_all())",
                        what="release_all in a CHECK", contains=("redlock_release_all",))
        h.settle(con)
        eq([n.get("mine") for n in c], [tok] * len(c), "the user's lock after the statement")
        con.execute("DETACH h")
        eq(value(con, "SELECT redlock_release('mine')"), 1, "release after DETACH")


# --------------------------------------------------------------------------
# bypasses of the old text match
# --------------------------------------------------------------------------

def test_insert_select_from_redlock_locks():
    """redlock_locks starts with redlock_lock: reading it must not let a
    CHECK's redlock_lock run."""
    c = h.shared_cluster(3)
    with tempfile.TemporaryDirectory() as d:
        con, tok = holding_with_hostile_attached(
            c, d, "res CHECK (coalesce(length(redlock_lock('atk', 600000)), 1) > 0)")
        h.redlock_error(con, "INSERT INTO h.joblog SELECT resource FROM redlock_locks",
                        what="INSERT ... SELECT ... FROM redlock_locks", contains=("redlock_lock()",))
        h.settle(con)
        for n in c:
            check(not n.cmd("EXISTS", ATK), "the attacker's lock exists on %s" % n.addr)
        con.execute("DETACH h")
        eq(value(con, "SELECT redlock_release('mine', ?)", tok), 1, "release of the user's lock")


def test_another_busy_statement_naming_the_function():
    """A statement that names the function and is still being stepped must
    not let a CHECK's call through in another statement."""
    c = h.shared_cluster(3)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "hostile.db")
        make_file(path, ["CREATE TABLE joblog(tok CHECK (coalesce(length(redlock_acquire('atk', 600000)), 1) > 0))"])
        con = h.connect(c)
        con.execute("ATTACH ? AS h", (path,))
        busy = con.cursor()
        busy.execute("SELECT x, 'redlock_acquire' FROM (SELECT 1 AS x UNION ALL SELECT 2)")
        eq(busy.fetchone(), (1, "redlock_acquire"), "first row of the busy statement")
        other = con.cursor()
        h.raises(lambda: other.execute("INSERT INTO h.joblog VALUES (1)").fetchall(),
                 "INSERT while a statement naming redlock_acquire is busy")
        eq(busy.fetchone(), (2, "redlock_acquire"), "second row of the busy statement")
        h.settle(con)
        no_lock_keys(c, "a busy statement naming the function")
        con.close()


# --------------------------------------------------------------------------
# what keeps working
# --------------------------------------------------------------------------

CLEAN_DDL = [
    # near misses: longer names, a table whose name starts with a function's
    "CREATE TABLE redlock_locks_log(res TEXT CHECK (length(res) > 0), at DEFAULT (strftime('%s','now')))",
    "CREATE TABLE jobs(id INTEGER PRIMARY KEY, my_redlock_acquire TEXT, redlock_acquired INT,"
    " g AS (id * 2) STORED)",
    "CREATE INDEX jobs_g ON jobs(abs(id)) WHERE id > 0",
    "CREATE TRIGGER jobs_t AFTER INSERT ON jobs WHEN new.id > 0 BEGIN"
    " INSERT INTO redlock_locks_log(res) VALUES ('x'); END",
    "CREATE VIEW jobs_v AS SELECT id FROM jobs",
]


def test_clean_database_works_as_before():
    c = h.shared_cluster(3)
    with tempfile.TemporaryDirectory() as d:
        main, aux = os.path.join(d, "main.db"), os.path.join(d, "aux.db")
        make_file(main, CLEAN_DDL)
        make_file(aux, CLEAN_DDL)
        con = h.connect(c, database=main)
        con.execute("ATTACH ? AS aux", (aux,))
        tok = is_token(value(con, "SELECT redlock_acquire('job', 10000)"))
        con.execute("INSERT INTO jobs(my_redlock_acquire) VALUES (redlock_acquire('job', 10000))")
        con.execute("INSERT INTO aux.redlock_locks_log(res) SELECT resource FROM redlock_locks")
        eq(value(con, "SELECT my_redlock_acquire FROM jobs"), tok, "token stored in the table")
        eq(value(con, "SELECT redlock_config('unsafe_test_quorum')"), 0, "config readable")
        is_token(value(con, "SELECT redlock_lock('other', 10000)"))
        check(value(con, "SELECT redlock_extend('job', 20000)") > 10000, "extend")
        eq(value(con, "SELECT redlock_release('job')"), 1, "first release (two holds)")
        eq(value(con, "SELECT redlock_release('job')"), 1, "second release")
        eq(value(con, "SELECT redlock_release_all()"), 1, "release_all (the 'other' lock)")
        h.settle(con)
        for n in c:  # the fence counters and the connection's holder details outlive the locks
            eq(sorted(set(n.keys()) - set(n.keys("*:fence")) - set(n.keys("redlock-client:*"))), [],
               "lock keys on %s at the end" % n.addr)
        con.close()


def test_only_statements_using_the_file_are_refused():
    """While the file is attached, a statement that uses it cannot call the
    function; one that does not can (no code of the file can run in it);
    after DETACH every statement can."""
    c = h.shared_cluster(3)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "hostile.db")
        make_file(path, ["CREATE TABLE joblog(tok CHECK (coalesce(length(redlock_acquire('atk', 600000)), 1) > 0))",
                         "CREATE TABLE plain(x)"])
        con = h.connect(c)
        con.execute("ATTACH ? AS h", (path,))
        h.redlock_error(con, "INSERT INTO h.plain VALUES (redlock_acquire('job', 10000))",
                        what="a statement writing the file", contains=("attached database 'h'", "table 'joblog'"))
        con.execute("INSERT INTO h.plain VALUES (1)")
        for sql in ("SELECT redlock_acquire('job', 10000) FROM h.plain",
                    "SELECT redlock_acquire('job', 10000), (SELECT count(*) FROM h.plain)"):
            h.redlock_error(con, sql, what="a statement reading the file: " + sql,
                            contains=("attached database 'h'",))
        tok = is_token(value(con, "SELECT redlock_acquire('job', 10000)"), "a statement not using the file")
        eq(value(con, "SELECT redlock_release('job', ?)", tok), 1, "release, not using the file")
        h.settle(con)
        no_lock_keys(c, "calls while the file is attached")
        con.execute("DETACH h")
        tok = is_token(value(con, "SELECT redlock_acquire('job', 10000)"), "after DETACH")
        eq(value(con, "SELECT redlock_release('job', ?)", tok), 1, "release after DETACH")
        con.close()


def test_user_temp_trigger_still_works():
    """TEMP objects come only from this connection's own SQL: SQLite lets a
    TEMP trigger call a DIRECTONLY function, and so does the guard."""
    c = h.shared_cluster(1)
    con = h.connect(c)
    con.executescript("""
        CREATE TEMP TABLE want(res TEXT);
        CREATE TEMP TRIGGER take AFTER INSERT ON want BEGIN
            SELECT redlock_acquire(new.res, 10000);
        END;""")
    con.execute("INSERT INTO want VALUES ('from-trigger')")
    h.settle(con)
    check(c[0].get("from-trigger") is not None, "the TEMP trigger took its lock")
    eq(value(con, "SELECT redlock_release('from-trigger')"), 1, "release")
    con.close()


def test_waiting_acquire_leaves_attached_files_unlocked():
    """The guard reads only databases the statement already uses: a long
    waiting acquire does not hold a read lock on an attached file, so
    another process can write it meanwhile (rollback-journal mode)."""
    c = h.shared_cluster(1)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "shared.db")
        make_file(path, ["CREATE TABLE log(x)"])
        holder = h.connect(c)
        is_token(value(holder, "SELECT redlock_acquire('busy', 60000)"))
        con = h.connect(c)
        con.execute("ATTACH ? AS shared", (path,))
        con.execute("CREATE TEMP TABLE got(t)")
        result = {}

        def wait():
            # a writing statement (as in a script that keeps its tokens in a
            # TEMP table): a read transaction it started would last until it ends
            con.execute("INSERT INTO got SELECT redlock_acquire('busy', 10000, 20000)")
            result["tok"] = value(con, "SELECT t FROM got")

        t = threading.Thread(target=wait)
        t.start()
        h.wait_until(lambda: c[0].cmd("PUBSUB", "NUMSUB", "busy:released")[1] >= 1,
                     what="the waiter subscribed")
        other = sqlite3.connect(path, isolation_level=None, timeout=0)
        try:
            other.execute("INSERT INTO log VALUES (1)")
            locked = None
        except sqlite3.Error as e:
            locked = str(e)
        other.close()
        eq(value(holder, "SELECT redlock_release('busy')"), 1, "the holder's release")
        t.join(25)
        check(not t.is_alive(), "the waiter did not return")
        eq(locked, None, "another process writing the attached file while the acquire waits")
        is_token(result.get("tok"), "the waiter's token")
        eq(value(con, "SELECT redlock_release('busy')"), 1, "the waiter's release")
        con.close()


# --------------------------------------------------------------------------
# a recent SQLite (3.50 or later) in Node: better-sqlite3 bundles its own
# --------------------------------------------------------------------------

NODE, NODE_WHY = h.node_setup()


def test_node_recent_sqlite_check():
    if NODE is None:
        raise unittest.SkipTest(NODE_WHY)
    c = h.shared_cluster(1)
    with tempfile.TemporaryDirectory() as d:
        env = h.node_env(c)
        r = subprocess.run([NODE, os.path.join(h.NODE_DIR, "schema_guard.js"), h.EXT_SO, d], cwd=h.NODE_DIR, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=25)
        eq(r.returncode, 0, "node schema_guard.js exit status (stderr: %s)" % r.stderr.strip()[-500:])
        out = json.loads(r.stdout)
    version = tuple(int(x) for x in out["sqlite_version"].split("."))
    check(version >= (3, 50, 0), "better-sqlite3 bundles SQLite %s, not 3.50 or later" % out["sqlite_version"])
    clean = out["cases"]["clean"]
    check(clean["ok"], "the extension in Node on a clean database: %r" % clean)
    is_token(clean["value"]["token"], "token in Node")
    for name in ("acquire_attach", "acquire_main", "config_attach", "config_main"):
        case = out["cases"][name]
        step = case.get("statement") or case.get("attach") or case.get("open")
        check(step is not None and not step["ok"], "%s: the hostile CHECK should be refused: %r" % (name, case))
        check(any(p in step["error"] for p in CLEAR_ERRORS), "%s: the error should say why: %r" % (name, step))
        q = case["quorum"]
        check(q["ok"] and q["value"] == 0 or not q["ok"] and q["error"].startswith("redlock: "),
              "%s: unsafe_test_quorum after the statement: %r" % (name, q))
    for n in c:
        for key in (ATK, JOB):
            check(not n.cmd("EXISTS", key), "Node: key %r exists on %s" % (key, n.addr))


def _bind_names(path, binds):
    """Writes a file whose schema binds ordinary-looking table names to the
    extension's tables (name -> module), as writable_schema lets anyone do."""
    raw = sqlite3.connect(path)
    for name in binds:
        raw.execute("CREATE TABLE %s(a)" % name)
    raw.execute("PRAGMA writable_schema = ON")
    for name, module in binds.items():
        raw.execute("UPDATE sqlite_master SET sql = ?, rootpage = 0 WHERE name = ?",
                    ("CREATE VIRTUAL TABLE %s USING %s" % (name, module), name))
    raw.commit()
    raw.close()


def test_a_bound_name_of_the_files_reaches_the_error_cleaned():
    """The refusal names the file's table, which the file chose: escape
    sequences in it, or bytes that are not UTF-8, must not reach the error
    (a terminal would act on them; Python could not even decode it)."""
    c = h.shared_cluster(3)
    d = tempfile.mkdtemp(prefix="redlock-bindname-")
    path = os.path.join(d, "names.db")
    names = {"esc": "6576696c1b5d303b70776e6564071b5b324a", "bytes": "6261645fff6e616d65"}
    raw = sqlite3.connect(path)
    for tag in names:
        raw.execute("CREATE TABLE t_%s(a)" % tag)
    raw.execute("PRAGMA writable_schema = ON")
    for tag, hexname in names.items():
        raw.execute("UPDATE sqlite_master SET name = CAST(X'%s' AS TEXT), tbl_name = CAST(X'%s' AS TEXT), "
                    "rootpage = 0, sql = 'CREATE VIRTUAL TABLE \"' || CAST(X'%s' AS TEXT) || '\" USING redlock_nodes' "
                    "WHERE name = 't_%s'" % (hexname, hexname, hexname, tag))
        raw.execute("INSERT INTO sqlite_master VALUES ('view', 'v_%s', 'v_%s', 0, "
                    "'CREATE VIEW v_%s AS SELECT * FROM \"' || CAST(X'%s' AS TEXT) || '\"')" % (tag, tag, tag, hexname))
    raw.commit()
    raw.close()
    con = h.connect(c, database=path)
    for tag in names:
        try:
            con.execute("SELECT * FROM v_%s" % tag).fetchall()
            raise AssertionError("v_%s: the file's table should not connect" % tag)
        except sqlite3.Error as e:
            msg = str(e)
        except UnicodeDecodeError as e:
            raise AssertionError("v_%s: the error is not valid UTF-8 (%s)" % (tag, e))
        check(msg.startswith("redlock: ") and "USING redlock_nodes" in msg, "v_%s: %r" % (tag, msg))
        bad = [ch for ch in msg if ord(ch) < 32 or 0x7f <= ord(ch) < 0xa0]
        check(not bad, "v_%s: the error carries control characters %r: %r" % (tag, bad, msg))
    eq(value(con, "SELECT count(*) FROM main.redlock_nodes"), 3, "the extension's own table")
    con.close()


def test_a_file_cannot_bind_a_name_of_its_own_to_the_extensions_tables():
    """CREATE VIRTUAL TABLE is refused at run time, but a file that already
    declares `servers USING redlock_nodes` made the user's own INSERT INTO
    servers add a node (and DELETE remove them), and `jobs USING
    redlock_locks` showed lock tokens under an innocent name. Only the
    extension's own tables, under their own names, connect now."""
    c = h.shared_cluster(3)
    d = tempfile.mkdtemp(prefix="redlock-bind-")
    path = os.path.join(d, "bound.db")
    _bind_names(path, {"servers": "redlock_nodes", "jobs": "redlock_locks", "usage": "redlock_stats",
                       "redlock_lock_stats": "redlock_nodes"})
    for mode in ("main", "attached"):
        if mode == "main":
            con = h.connect(c, database=path)
            q = ""
        else:
            con = h.connect(c)
            con.execute("ATTACH ? AS aux", (path,))
            q = "aux."
        for sql in ("INSERT INTO %sservers(host, port) VALUES ('127.0.0.1', 1)" % q,
                    "DELETE FROM %sservers" % q, "SELECT * FROM %sjobs" % q, "SELECT * FROM %susage" % q,
                    "SELECT * FROM %sredlock_lock_stats" % q):
            h.redlock_error(con, sql, what="%s (%s)" % (sql, mode), contains=("USING redlock_",))
        eq(value(con, "SELECT count(*) FROM main.redlock_nodes"), 3, "the nodes after the refused writes (%s)" % mode)
        tok = is_token(value(con, "SELECT redlock_acquire('bind-%s', 10000)" % mode))
        h.redlock_error(con, "SELECT * FROM %sjobs" % q, contains=("USING redlock_",))
        eq(value(con, "SELECT token FROM main.redlock_locks"), tok, "the extension's own table still reads (%s)" % mode)
        eq(value(con, "SELECT redlock_release('bind-%s')" % mode), 1, "release (%s)" % mode)
        con.close()
