"""A session: reentrancy per connection, the redlock_locks table,
redlock_release_all(), release when the connection closes, redlock_validity
and the strict redlock_lock, each from /usr/bin/python3 and from the real
sqlite3 shell. (Auto-extension: test_autoextend.py; fencing: test_fencing.py.)

Run: /usr/bin/python3 sql-tests/run.py test_session
 or: /usr/bin/python3 sql-tests/test_session.py   (also prints the notes)
"""
# SPDX-License-Identifier: BSD-3-Clause

import json
import os
import re
import secrets
import sqlite3
import sys
import tempfile
import threading
import time

import harness as h
from harness import check, eq, holds, is_token, no_key, value
from harness import (lock_row, lock_rows, note, probe, probed, redis_writes, run_directly as _run_directly, sh,
                     spin_until, timeout_env as env)

COLUMNS = ["resource", "token", "ttl_ms", "validity_ms", "holds", "fence", "nodes",
           "extensions", "auto_extend", "state", "lost_reason", "kind", "max_holders",
           "xact_holds"]





# --------------------------------------------------------------------------
# reentrancy
# --------------------------------------------------------------------------

def _reentrancy_python(n):
    c = h.shared_cluster(n)
    con = h.connect(env(c))
    tok = is_token(value(con, "SELECT redlock_acquire('re', 20000)"))
    h.settle(con)  # the acquire returned at a quorum: its last SET may still be on its way
    before = redis_writes(c)
    again = value(con, "SELECT redlock_acquire('re', 20000)")
    strict = value(con, "SELECT redlock_lock('re', 20000)")
    eq((again, strict), (tok, tok), "re-acquiring a name this connection holds: same token")
    eq(redis_writes(c), before, "SET/EVAL sent to the nodes by the re-acquisitions (none: at once)")
    eq(lock_row(con, "re")["holds"], 3, "holds after three acquisitions")
    for left in (2, 1):
        eq(value(con, "SELECT redlock_release('re')"), 1, "release giving back one hold")
        eq(lock_row(con, "re")["holds"], left, "holds after a release")
        holds(c, "re", tok, 20000, "key while %d hold(s) remain" % left)
        check(value(con, "SELECT redlock_validity('re')") > 0, "validity while holds remain")
    eq(value(con, "SELECT redlock_release('re')"), 1, "release of the last hold")
    no_key(c, "re", "after the last hold went")
    eq(lock_rows(con), [], "redlock_locks after the last hold went")
    eq(value(con, "SELECT redlock_release('re')"), None, "release when nothing is held")

    # an explicit token acts on the lock itself, whatever the count
    tok = is_token(value(con, "SELECT redlock_acquire('re', 20000)"))
    for _ in range(2):
        eq(value(con, "SELECT redlock_acquire('re', 20000)"), tok, "re-acquire")
    stranger = secrets.token_hex(16)
    eq(value(con, "SELECT redlock_release('re', ?)", stranger), 0,
       "release with a token that is not the lock's")
    eq(lock_row(con, "re")["holds"], 3, "holds after a release with a foreign token")
    holds(c, "re", tok, 20000, "key after a release with a foreign token")
    eq(value(con, "SELECT redlock_release('re', ?)", tok), 1, "release with the token, holds=3")
    no_key(c, "re", "after the release with the token")
    eq(lock_rows(con), [], "redlock_locks after the release with the token")
    eq(value(con, "SELECT redlock_release('re')"), None, "release after the token release")
    eq(value(con, "SELECT redlock_validity('re')"), None, "validity after the token release")


h.for_nodes(globals(), _reentrancy_python, (1, 3, 5))


def test_reentrancy_is_per_connection():
    c = h.shared_cluster(3)
    a, b = h.connect(env(c)), h.connect(env(c))
    tok = is_token(value(a, "SELECT redlock_acquire('pc', 20000)"))
    eq(value(a, "SELECT redlock_acquire('pc', 20000)"), tok, "same connection again")
    eq(value(b, "SELECT redlock_acquire('pc', 20000)"), None,
       "another connection of the same process: not reentrant")
    other = h.SqlProc(env(c))
    eq(other.value("SELECT redlock_acquire('pc', 20000)"), None, "another process")
    eq(value(b, "SELECT redlock_release('pc')"), None, "release by a connection holding nothing")
    eq(value(b, "SELECT redlock_validity('pc')"), None, "validity in a connection holding nothing")
    eq(value(b, "SELECT redlock_validity('pc', ?)", tok), None,
       "validity with the right token in a connection that does not hold it")
    eq(h.rows(b, "SELECT * FROM redlock_locks"), [], "redlock_locks of the other connection")
    # b deletes a's lock with the explicit token: it acts on the lock itself
    eq(value(b, "SELECT redlock_release('pc', ?)", tok), 1, "release by token from another connection")
    no_key(c, "pc", "after the token release from another connection")
    eq(value(a, "SELECT redlock_release('pc')"), 1, "a gives back one of its two holds (local)")
    eq(value(a, "SELECT redlock_release('pc')"), 0,
       "a's last release: the lock was deleted meanwhile, so it was not ours any more")
    eq(lock_rows(a), [], "a's redlock_locks afterwards")


def test_reentrancy_after_expiry_takes_a_new_lock():
    c = h.shared_cluster(3)
    con = h.connect(env(c))
    old = is_token(value(con, "SELECT redlock_acquire('exp', 150)"))
    h.wait_until(lambda: value(con, "SELECT redlock_validity('exp')") is None, 5,
                 what="the 150 ms lock's validity to end")
    eq(lock_row(con, "exp")["state"], "expired", "state after the validity ended")
    h.wait_until(lambda: all(n.cmd("EXISTS", "exp") == 0 for n in c), 5, what="key to expire")
    new = is_token(value(con, "SELECT redlock_acquire('exp', 20000)"))
    check(new != old, "acquiring an expired lock again must take a new lock, got the old token")
    eq(lock_row(con, "exp")["holds"], 1, "holds of the new lock")
    holds(c, "exp", new, 20000, "the new lock")


def test_reacquire_after_expiry_is_not_refused_by_its_own_old_key():
    """A lock whose validity this connection has seen end may still be on
    the nodes: its key lives for its TTL, the validity ends the drift
    allowance earlier (here 40% of it). Acquiring the name again then must
    not be refused by that key, which holds this connection's own old token:
    it goes, and a new lock is taken (it returned NULL until the key's TTL
    ran out)."""
    c = h.shared_cluster(3)
    con = h.connect(env(c), auto_extend=0, drift_factor=0.4)
    old = is_token(value(con, "SELECT redlock_acquire('reold', 3000)"))
    h.wait_until(lambda: value(con, "SELECT redlock_validity('reold')") is None, 5,
                 what="the lock's validity to end")
    check(all(n.get("reold") == old for n in c), "the old key is still on the nodes")
    new = is_token(value(con, "SELECT redlock_acquire('reold', 20000)"), "acquire again")
    check(new != old, "a new lock, not the expired one")
    holds(c, "reold", new, 20000, "the new lock", settle_cons=(con,))
    eq(value(con, "SELECT redlock_release('reold')"), 1, "the new lock is released")


def test_shell_exit_with_a_code_skips_the_release_as_the_readme_says():
    """The README's warning: the shell's `.exit 1` ends the process without
    closing the database, so a lock it holds stays until its TTL; with
    redlock_release_all() before it, or a plain `.exit`, nothing is left."""
    c = h.shared_cluster(3)
    runs = (("xs1", "SELECT redlock_acquire('xs1', 60000) IS NOT NULL;\n.exit 1\n", 1, True),
            ("xs2", "SELECT redlock_acquire('xs2', 60000) IS NOT NULL;\nSELECT redlock_release_all();\n.exit 1\n",
             1, False),
            ("xs3", "SELECT redlock_acquire('xs3', 60000) IS NOT NULL;\n.exit\n", 0, False))
    for name, sql, want_rc, left in runs:
        rc, out, err = h.shell(sql, h.timeout_env(c))
        eq((rc, err), (want_rc, ""), "%s: exit status and stderr (stdout %r)" % (name, out))
        if left:
            h.wait_until(lambda: all(n.get(name) for n in c), 5,
                         what="%s: the lock on every node after .exit 1" % name)
            for n in c:
                n.cmd("DEL", name)
        else:
            no_key(c, name, "%s: nothing left after the shell ended" % name)


def _reentrancy_shell(n):
    c = h.shared_cluster(n)
    with tempfile.TemporaryDirectory() as d:
        f = [os.path.join(d, "p%d" % i) for i in range(3)]
        out = sh("SELECT redlock_acquire('re', 20000) = redlock_acquire('re', 20000);\n"
                 "SELECT redlock_lock('re', 20000) = (SELECT token FROM redlock_locks);\n"
                 "SELECT holds FROM redlock_locks WHERE resource = 're';\n"
                 "SELECT redlock_release('re');\n"
                 "SELECT redlock_release('re');\n"
                 "SELECT holds FROM redlock_locks WHERE resource = 're';\n"
                 + h.SHELL_SETTLE + probe(c, f[0], "EXISTS", "re") +
                 "SELECT redlock_release('re');\n"
                 + h.SHELL_SETTLE + probe(c, f[1], "EXISTS", "re") +
                 "SELECT count(*) FROM redlock_locks;\n"
                 "SELECT redlock_release('re');\n"
                 # explicit token: deletes whatever the count
                 "SELECT redlock_acquire('re', 20000) IS NOT NULL, redlock_acquire('re', 20000) IS NOT NULL;\n"
                 "SELECT redlock_release('re', '%s');\n"
                 "SELECT holds FROM redlock_locks;\n"
                 "SELECT redlock_release('re', token) FROM redlock_locks;\n"
                 % secrets.token_hex(16)
                 + h.SHELL_SETTLE + probe(c, f[2], "EXISTS", "re") +
                 "SELECT count(*) FROM redlock_locks;\n"
                 "SELECT redlock_release('re');\n", c, "reentrancy in the shell")
        eq(out, ["1", "1", "3", "1", "1", "1", "1", "0", "NULL",
                 "1|1", "0", "2", "1", "0", "NULL"], "shell output")
        eq(probed(f[0]), ["1"] * n, "EXISTS on every node with one hold left")
        eq(probed(f[1]), ["0"] * n, "EXISTS on every node after the last release")
        eq(probed(f[2]), ["0"] * n, "EXISTS on every node after the token release (holds=2)")


h.for_nodes(globals(), _reentrancy_shell, (1, 3))


def test_reentrancy_not_after_validity_reached_0():
    """Once redlock_validity says 0 (expired), re-acquiring must take a new
    lock, never count a hold of the expired one. Tried 20 times, acquiring
    right after the first 0: a lock with under 1 ms left is expired too."""
    c = h.shared_cluster(1)
    # The first attempt, right after the 0, is the one that matters; when the
    # key is still on the node it is refused, and a short retry delay (as in
    # the shell test below) just keeps the 20 rounds from costing seconds.
    con = h.connect(env(c), retry_delay_ms=5, retry_jitter_ms=2)
    reused = []
    for i in range(20):
        res = "z%d" % i
        old = is_token(value(con, "SELECT redlock_acquire(?, 20)", res))
        h.wait_until(lambda: value(con, "SELECT redlock_validity(?)", res) is None, 5,
                     interval=0, what="validity 0")
        new = value(con, "SELECT redlock_acquire(?, 20000, 1000)", res)
        if new == old:
            r = lock_row(con, res)
            reused.append("%s: holds %d, state %s" % (res, r["holds"], r["state"]))
    eq(reused, [], "acquisitions right after redlock_validity returned 0 that handed back the "
                   "expired lock (of 20)")


def test_reentrancy_after_expiry_shell():
    """The same from the shell: spin until redlock_validity is 0, then acquire;
    24 names, each must get a new lock."""
    c = h.shared_cluster(3)
    sql = "SELECT redlock_config('retry_delay_ms', 5), redlock_config('retry_jitter_ms', 2);\n"
    for i in range(24):
        sql += ("INSERT INTO t SELECT 'e%d', redlock_acquire('e%d', 30);\n" % (i, i)
                + spin_until("redlock_validity('e%d') IS NULL" % i) + "\n"
                "INSERT INTO t2 SELECT 'e%d', redlock_acquire('e%d', 20000, 2000);\n"
                "SELECT resource, (SELECT tok FROM t2 WHERE res = resource) NOT IN "
                "(SELECT tok FROM t WHERE res = resource), holds, state FROM redlock_locks "
                "WHERE resource = 'e%d';\n" % (i, i, i))
    out = sh("CREATE TEMP TABLE t(res, tok);\nCREATE TEMP TABLE t2(res, tok);\n" + sql, c,
             "re-acquire after expiry")
    got = [l for l in out[1:] if not l.startswith("spun")]
    eq(len(got), 24, "rows: %r" % got)
    bad = [l for i, l in enumerate(got) if l != "e%d|1|1|held" % i]
    eq(bad, [], "re-acquisitions right after redlock_validity said 0 that did not give a new "
                "held lock (resource|new token|holds|state), of 24")
    eq(out.count("spun|1"), 24, "spins ended by validity 0")


def test_outer_release_after_lock_was_retaken_says_lost():
    """Hole 5: an outer hold's lock expired; an inner acquire took it anew
    (one hold) and its release deleted the key; the outer release then
    returned NULL ("holds none") instead of 0 ("lost"). The same when the
    lock expired under two holds of it."""
    c = h.shared_cluster(3)
    con = h.connect(c)
    tok = is_token(value(con, "SELECT redlock_acquire('nest', 200)"), "outer acquire")
    h.wait_until(lambda: value(con, "SELECT redlock_validity('nest')") is None, 5,
                 what="the outer hold's validity to run out")
    tok2 = is_token(value(con, "SELECT redlock_acquire('nest', 5000)"), "inner acquire, taken anew")
    check(tok2 != tok, "the inner acquire took the lock anew")
    eq(value(con, "SELECT redlock_release('nest')"), 1, "inner release (its own lock)")
    eq(value(con, "SELECT redlock_release('nest')"), 0, "outer release after its lock expired")
    eq(value(con, "SELECT redlock_release('nest')"), None, "a third release: no hold left")
    # two holds, then the lock expires under both
    is_token(value(con, "SELECT redlock_acquire('nest2', 200)"), "outer acquire")
    is_token(value(con, "SELECT redlock_acquire('nest2', 200)"), "inner acquire")
    h.wait_until(lambda: value(con, "SELECT redlock_validity('nest2')") is None, 5,
                 what="the validity to run out")
    eq(value(con, "SELECT redlock_release('nest2')"), 0, "inner release after expiry")
    eq(value(con, "SELECT redlock_release('nest2')"), 0, "outer release after expiry")
    eq(value(con, "SELECT redlock_release('nest2')"), None, "no hold left")


# --------------------------------------------------------------------------
# redlock_locks
# --------------------------------------------------------------------------

def _locks_table_python(n):
    c = h.shared_cluster(n)
    con = h.connect(env(c))
    eq(lock_rows(con), [], "redlock_locks of a new connection")
    cur = con.execute("SELECT * FROM redlock_locks")
    eq([d[0] for d in cur.description], COLUMNS, "redlock_locks columns")
    ta = is_token(value(con, "SELECT redlock_acquire('a', 8000)"))
    tb = is_token(value(con, "SELECT redlock_acquire('b', 9000)"))
    value(con, "SELECT redlock_acquire('b', 9000)")
    rs = lock_rows(con)
    eq([r["resource"] for r in rs], ["a", "b"], "resources listed")
    for r, tok, ttl, nh in ((rs[0], ta, 8000, 1), (rs[1], tb, 9000, 2)):
        what = "row %s" % r["resource"]
        eq((r["token"], r["ttl_ms"], r["holds"], r["extensions"], r["auto_extend"], r["state"],
            r["lost_reason"]), (tok, ttl, nh, 0, 0, "held", None), what)
        check(0 < r["validity_ms"] <= ttl, "%s: validity_ms %r not in (0, %d]"
              % (what, r["validity_ms"], ttl))
        check(isinstance(r["fence"], int) and r["fence"] >= 1, "%s: fence %r" % (what, r["fence"]))
        eq(r["fence"], value(con, "SELECT redlock_fence(?)", r["resource"]), what + " fence")
        check(c.quorum <= r["nodes"] <= n, "%s: nodes %r, expected %d..%d"
              % (what, r["nodes"], c.quorum, n))
    check(value(con, "SELECT redlock_extend('a', 20000)") > 0, "manual extend")
    r = lock_row(con, "a")
    eq((r["ttl_ms"], r["extensions"], r["state"]), (20000, 1, "held"), "row a after extend")
    check(8000 < r["validity_ms"] <= 20000, "row a validity after extend: %r" % r["validity_ms"])
    eq(h.rows(h.connect(env(c)), "SELECT * FROM redlock_locks"), [], "another connection's table")
    # rows copied at scan start: releasing while scanning neither skips nor repeats rows
    value(con, "SELECT redlock_acquire('c', 8000)")
    value(con, "SELECT redlock_acquire('d', 8000)")
    eq(h.rows(con, "SELECT resource, redlock_release(resource) FROM redlock_locks ORDER BY resource"),
       [("a", 1), ("b", 1), ("c", 1), ("d", 1)], "SELECT redlock_release(resource) FROM redlock_locks")
    eq([(r["resource"], r["holds"]) for r in lock_rows(con)], [("b", 1)],
       "left after one release each (b had two holds)")
    for k in ("a", "c", "d"):
        no_key(c, k, "released through the table")
    holds(c, "b", tb, 9000, "b, one hold left")
    eq(h.rows(con, "SELECT redlock_release(resource) FROM redlock_locks"), [(1,)], "second pass")
    eq(lock_rows(con), [], "redlock_locks at the end")
    no_key(c, "b", "b at the end")


h.for_nodes(globals(), _locks_table_python, (1, 3, 5))


def test_locks_nodes_column_counts_yes_votes():
    with h.Cluster(3) as c:
        c[2].kill9()
        con = h.connect(env(c))
        value(con, "SELECT redlock_acquire('nd', 8000)")
        eq(lock_row(con, "nd")["nodes"], 2, "nodes that said yes with one of three dead")


def test_locks_expired_state():
    c = h.shared_cluster(3)
    con = h.connect(env(c))
    value(con, "SELECT redlock_acquire('short', 120)")
    value(con, "SELECT redlock_acquire('long', 20000)")
    h.wait_until(lambda: lock_row(con, "short")["state"] == "expired", 5,
                 what="state 'expired' for the 120 ms lock")
    r = lock_row(con, "short")
    eq((r["validity_ms"], r["lost_reason"]), (0, None), "expired row")
    eq(lock_row(con, "long")["state"], "held", "the other lock")


# RL_HELD_ENDED_MAX and RL_HELD_LOOK_EVERY, as the README documents them
ENDED_MAX = 1000
LOOK_EVERY = 64


def test_locks_keeps_at_most_1000_ended_locks():
    """A connection that takes names and lets them expire (a dedupe key per
    message) forgets the oldest expired ones beyond 1,000, looking every 64
    locks taken: after 3,000 expired and 64 more taken, the 1,000 taken
    last are listed, and a forgotten name is one the connection holds
    none of (release NULL, validity 0, extend NULL, fence NULL)."""
    c = h.shared_cluster(1)
    con = h.connect(env(c))
    first = is_token(value(con, "SELECT redlock_acquire('msg:0', 200)"), "the first name's token")
    eq(value(con, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2999) "
                  "SELECT count(redlock_acquire('msg:' || i, 200)) FROM n"), 2999, "names taken")
    h.wait_until(lambda: value(con, "SELECT count(*) FROM redlock_locks WHERE state = 'held'") == 0, 5,
                 what="every name expired")
    eq(value(con, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < %d) "
                  "SELECT count(redlock_acquire('keep:' || i, 60000)) FROM n" % LOOK_EVERY), LOOK_EVERY,
       "locks taken after they expired")
    eq(value(con, "SELECT count(*) FROM redlock_locks WHERE state = 'held'"), LOOK_EVERY, "valid locks listed")
    eq(value(con, "SELECT count(*) FROM redlock_locks WHERE state = 'expired'"), ENDED_MAX, "expired locks listed")
    eq(value(con, "SELECT min(0 + substr(resource, 5)) || '-' || max(0 + substr(resource, 5)) FROM redlock_locks "
                  "WHERE resource LIKE 'msg:%'"), "2000-2999", "the expired names still listed: those taken last")
    eq(value(con, "SELECT lost FROM redlock_lock_stats WHERE resource = 'msg:0'"), 1,
       "a forgotten name counted as lost")
    eq(value(con, "SELECT redlock_release('msg:0')"), None, "release of a forgotten name")
    eq(value(con, "SELECT redlock_validity('msg:0')"), None, "validity of a forgotten name")
    eq(value(con, "SELECT redlock_extend('msg:0', 1000)"), None, "extend of a forgotten name")
    eq(value(con, "SELECT redlock_fence('msg:0')"), None, "fence of a forgotten name")
    eq(value(con, "SELECT redlock_release('msg:0', ?)", first), 0, "release of a forgotten name by its token")
    eq(value(con, "SELECT redlock_release('msg:2999')"), 0, "release of an expired name still listed")
    eq(lock_row(con, "msg:2999"), None, "the released expired name's row")
    is_token(value(con, "SELECT redlock_acquire('msg:0', 10000)"), "a forgotten name taken anew")
    eq(value(con, "SELECT redlock_release_all()"), LOOK_EVERY + ENDED_MAX, "locks release_all gives back")


def test_locks_read_only_and_directonly():
    c = h.shared_cluster(1)
    with tempfile.TemporaryDirectory() as d:
        con = h.connect(env(c), database=os.path.join(d, "x.db"))
        value(con, "SELECT redlock_acquire('ro', 8000)")
        for sql in ("INSERT INTO redlock_locks(resource) VALUES ('x')",
                    "UPDATE redlock_locks SET holds = 5",
                    "DELETE FROM redlock_locks"):
            h.sql_error(con, sql, what=sql)
        eq([(r["resource"], r["holds"]) for r in lock_rows(con)], [("ro", 1)],
           "table after the refused writes")
        con.execute("CREATE VIEW v AS SELECT resource FROM redlock_locks")
        con.execute("CREATE TABLE t(x)")
        con.execute("CREATE TABLE seen(n)")
        con.execute("CREATE TRIGGER tr AFTER INSERT ON t BEGIN "
                    "INSERT INTO seen SELECT count(*) FROM redlock_locks; END")
        msg = h.sql_error(con, "SELECT * FROM v", what="redlock_locks through a view")
        check("unsafe" in msg, "view: expected an 'unsafe use' error, got %r" % msg)
        msg = h.sql_error(con, "INSERT INTO t VALUES (1)", what="redlock_locks from a trigger")
        check("unsafe" in msg, "trigger: expected an 'unsafe use' error, got %r" % msg)
        eq(h.rows(con, "SELECT count(*) FROM seen"), [(0,)], "rows written by the trigger")


def test_locks_table_shell():
    c = h.shared_cluster(3)
    out = sh("SELECT group_concat(name, '|') FROM pragma_table_info('redlock_locks');\n"
             "SELECT count(*) FROM redlock_locks;\n"
             "SELECT redlock_acquire('a', 8000) IS NOT NULL;\n"
             "SELECT redlock_acquire('b', 9000) IS NOT NULL, redlock_acquire('b', 9000) IS NOT NULL;\n"
             "SELECT resource, length(token), ttl_ms, validity_ms BETWEEN 1 AND ttl_ms, holds, "
             "fence = redlock_fence(resource), nodes BETWEEN 2 AND 3, extensions, auto_extend, "
             "state, lost_reason FROM redlock_locks ORDER BY resource;\n"
             "SELECT redlock_release(resource) FROM redlock_locks ORDER BY resource;\n"
             "SELECT resource, holds FROM redlock_locks;\n"
             "SELECT redlock_release(resource) FROM redlock_locks;\n"
             "SELECT count(*) FROM redlock_locks;\n", c, "redlock_locks in the shell")
    eq(out, ["|".join(COLUMNS), "0", "1", "1|1",
             "a|60|8000|1|1|1|1|0|0|held|NULL", "b|60|9000|1|2|1|1|0|0|held|NULL",
             "1", "1", "b|1", "1", "0"], "shell output")
    no_key(c, "a")
    no_key(c, "b")
    with tempfile.TemporaryDirectory() as d:
        db = os.path.join(d, "v.db")
        rc, out, err = h.shell(".bail on\nCREATE VIEW v AS SELECT * FROM redlock_locks;\n"
                               "SELECT redlock_acquire('a', 8000) IS NOT NULL;\n"
                               "SELECT count(*) FROM v;\nSELECT 'after';", env(c), db=db)
        eq(rc, 1, "shell: a view over redlock_locks (exit status)")
        check("unsafe use" in err and "after" not in out,
              "shell view: expected 'unsafe use' on stderr; out=%r err=%r" % (out, err))
        rc, out, err = h.shell("DELETE FROM redlock_locks;", env(c))
        eq(rc, 1, "shell: DELETE FROM redlock_locks (exit status)")
        check("may not be modified" in err, "shell DELETE: %r" % err)


# --------------------------------------------------------------------------
# redlock_release_all and closing
# --------------------------------------------------------------------------

def _release_all_python(n):
    c = h.shared_cluster(n)
    con = h.connect(env(c))
    keep = h.connect(env(c))
    tk = is_token(value(keep, "SELECT redlock_acquire('other', 20000)"))
    for k in ("a", "b", "b", "c"):
        is_token(value(con, "SELECT redlock_acquire(?, 20000)", k))
    eq(value(con, "SELECT redlock_release_all()"), 3, "release_all with a, b (2 holds), c")
    for k in ("a", "b", "c"):
        no_key(c, k, "after release_all")
    holds(c, "other", tk, 20000, "another connection's lock after release_all")
    eq(lock_rows(con), [], "redlock_locks after release_all")
    eq(value(con, "SELECT redlock_release('b')"), None, "release after release_all")
    eq(value(con, "SELECT redlock_release_all()"), 0, "release_all with nothing held")
    is_token(value(con, "SELECT redlock_acquire('a', 20000)"))
    eq(value(con, "SELECT redlock_release_all()"), 1, "release_all again")
    no_key(c, "a", "after the second release_all")


h.for_nodes(globals(), _release_all_python, (1, 3, 5))


def _commands(node):
    """How many scripts the node has run (EVAL and EVALSHA calls): the
    commands our releases send. Commands a script runs are not counted."""
    n = 0
    for line in node.cmd("INFO", "commandstats").splitlines():
        if line.startswith(("cmdstat_eval:", "cmdstat_evalsha:")):
            n += int(line.split("calls=")[1].split(",")[0])
    return n


def test_release_all_and_close_take_few_commands_3n():
    """redlock_release_all and closing the connection give many locks back
    in one script per node for up to 1,000 of them, not one command per
    lock (500 locks over a link of 10 ms took 5 s to close): exclusive
    locks, shared holds, re-entered holds and a set of names alike, and
    every key goes. Another connection's lock stays."""
    with h.Cluster(3) as c:
        keep = h.connect(c)
        tk = is_token(value(keep, "SELECT redlock_acquire('other', 60000)"))
        names = ["r%d" % i for i in range(300)]
        for close in (False, True):
            con = h.connect(c)
            for name in names[:200]:
                is_token(value(con, "SELECT redlock_acquire(?, 60000)", name))
            is_token(value(con, "SELECT redlock_acquire('r0', 60000)"), "a second hold of r0")
            for name in names[200:250]:
                is_token(value(con, "SELECT redlock_acquire_shared(?, 60000)", name))
            is_token(value(con, "SELECT redlock_acquire_many(?, 60000)", json.dumps(names[250:])), "a set of 50")
            h.settle(con)
            before = [_commands(n) for n in c]
            if close:
                con.close()
            else:
                eq(value(con, "SELECT redlock_release_all()"), 300, "names given back by release_all")
            used = [_commands(n) - b for n, b in zip(c, before)]
            check(max(used) <= 2, "scripts per node to give 300 locks back (%s): %r"
                  % ("close" if close else "release_all", used))
            for node in c:
                eq(node.cmd("EXISTS", *names), 0, "keys of the given-back names on %s" % node.addr)
            holds(c, "other", tk, 60000, "another connection's lock")


def test_release_all_batches_long_names_by_their_bytes_3n():
    """Locks with long names go back in batches bounded by their bytes, not
    only by their number: 300 names of 40 KB in one command (12 MB to each
    node) outlasted a node timeout of 100 ms, every node was marked down,
    and most keys stayed until their TTL."""
    with h.Cluster(3) as c:
        con = h.connect(c, timeout_ms=100)
        names = ["%03d" % i + "L" * 40000 for i in range(300)]
        for name in names:
            is_token(value(con, "SELECT redlock_acquire(?, 60000)", name))
        h.settle(con)
        eq(value(con, "SELECT redlock_release_all()"), 300, "locks given back")
        h.settle(con)
        for node in c:
            eq(node.cmd("EXISTS", *names), 0, "keys left on %s" % node.addr)
        eq(value(con, "SELECT count(*) FROM redlock_nodes WHERE state = 'down'"), 0, "nodes marked down")


def test_release_all_returns_at_a_quorum_with_a_hung_node_3n():
    """redlock_release_all ends once a majority of the nodes has answered,
    as each redlock_release does: a hung node does not hold it for its
    whole timeout (20 s here). The hung node deletes the keys too once it
    runs again."""
    with h.Cluster(3) as c:
        con = h.connect(c, timeout_ms=20000)
        for i in range(5):
            is_token(value(con, "SELECT redlock_acquire(?, 60000)", "h%d" % i))
        h.settle(con)
        c.nodes[2].stop()
        try:
            start = time.monotonic()
            eq(value(con, "SELECT redlock_release_all()"), 5, "locks given back")
            took = time.monotonic() - start
            check(took < 5, "release_all took %.2f s with one of three nodes hung (node timeout 20 s)" % took)
        finally:
            c.nodes[2].cont()
        h.settle(con)
        for node in c:
            eq(node.cmd("EXISTS", *["h%d" % i for i in range(5)]), 0, "keys left on %s" % node.addr)


def test_release_all_shell():
    c = h.shared_cluster(3)
    with tempfile.TemporaryDirectory() as d:
        f1, f2 = os.path.join(d, "p1"), os.path.join(d, "p2")
        out = sh("SELECT redlock_acquire('a', 20000) IS NOT NULL;\n"
                 "SELECT redlock_acquire('b', 20000) IS NOT NULL, redlock_acquire('b', 20000) IS NOT NULL;\n"
                 "SELECT redlock_acquire('c', 20000) IS NOT NULL;\n"
                 + h.SHELL_SETTLE + probe(c, f1, "EXISTS", "a", "b", "c") +
                 "SELECT redlock_release_all();\n"
                 + h.SHELL_SETTLE + probe(c, f2, "EXISTS", "a", "b", "c") +
                 "SELECT count(*) FROM redlock_locks;\n"
                 "SELECT redlock_release_all();\n", c, "release_all in the shell")
        eq(out, ["1", "1|1", "1", "3", "0", "0"], "shell output")
        eq(probed(f1), ["3"] * 3, "EXISTS a b c on every node before release_all")
        eq(probed(f2), ["0"] * 3, "EXISTS a b c on every node after release_all")


def _close_python(n):
    c = h.shared_cluster(n)
    con = h.connect(env(c))
    toks = {}
    for k in ("a", "b", "b", "c"):
        toks[k] = is_token(value(con, "SELECT redlock_acquire(?, 30000)", k))
    for k, t in toks.items():
        holds(c, k, t, 30000, "before close")
    con.close()
    for k in toks:
        no_key(c, k, "right after con.close()")


h.for_nodes(globals(), _close_python, (1, 3, 5))


def _close_shell(n):
    c = h.shared_cluster(n)
    with tempfile.TemporaryDirectory() as d:
        for i, ending in enumerate(("", ".exit\n", ".quit\n")):
            f = os.path.join(d, "p%d" % i)
            out = sh("SELECT redlock_acquire('a', 30000) IS NOT NULL;\n"
                     "SELECT redlock_acquire('b', 30000) IS NOT NULL, redlock_acquire('b', 30000) IS NOT NULL;\n"
                     + h.SHELL_SETTLE + probe(c, f, "EXISTS", "a", "b") + ending, c,
                     "shell holding two locks, ending with %r" % (ending or "end of input"))
            eq(out, ["1", "1|1"], "shell output")
            eq(probed(f), ["2"] * n, "EXISTS a b on every node before the shell ends")
            for k in ("a", "b"):
                no_key(c, k, "after the shell ended with %r" % (ending or "end of input"))


h.for_nodes(globals(), _close_shell, (1, 3))


def test_close_shell_dot_open():
    """.open closes the shell's connection: its locks go at that moment."""
    c = h.shared_cluster(3)
    with tempfile.TemporaryDirectory() as d:
        f1, f2 = os.path.join(d, "p1"), os.path.join(d, "p2")
        out = sh("SELECT redlock_acquire('op', 30000) IS NOT NULL;\n"
                 + h.SHELL_SETTLE + probe(c, f1, "EXISTS", "op") +
                 ".open %s\n" % os.path.join(d, "other.db")
                 + probe(c, f2, "EXISTS", "op") +
                 "SELECT 'still running';\n", c, ".open in the shell")
        eq(out, ["1", "still running"], "shell output")
        eq(probed(f1), ["1"] * 3, "EXISTS op before .open")
        eq(probed(f2), ["0"] * 3, "EXISTS op right after .open closed the connection")


def test_close_bounded_when_nodes_hang():
    """Closing gives the locks back, but a hung node costs at most its
    timeout: close returns promptly with every node SIGSTOPped."""
    with h.Cluster(3) as c:
        con = h.connect(c, timeout_ms=50, auto_extend=1)  # default per-node timeouts
        for k in ("a", "b", "c"):
            is_token(value(con, "SELECT redlock_acquire(?, 30000)", k))
        for node in c:
            node.stop()
        done = threading.Event()
        t0 = time.monotonic()
        th = threading.Thread(target=lambda: (con.close(), done.set()), daemon=True)
        th.start()
        finished = done.wait(10)
        took = time.monotonic() - t0
        for node in c:
            node.cont()
        check(finished, "con.close() with every node hung did not return within 10 s")
        note("close with 3 locks (one auto-extension thread) and 3 hung nodes took %.0f ms "
             "(timeout_ms 50)" % (took * 1000))
        check(took < 3, "con.close() took %.1f s with a 50 ms per-node timeout" % took)


def test_close_bounded_when_nodes_hang_shell():
    with h.Cluster(3) as c, tempfile.TemporaryDirectory() as d:
        go = os.path.join(d, "go")
        script = os.path.join(d, "wait.sh")
        with open(script, "w") as f:
            f.write("while [ ! -e %s ]; do sleep 0.01; done\n" % go)
        sp = h.ShellProc("SELECT redlock_config('timeout_ms', 50);\n"
                         "SELECT redlock_acquire('a', 30000) IS NOT NULL;\n"
                         "SELECT redlock_acquire('b', 30000) IS NOT NULL;\n"
                         ".system /bin/sh %s\n" % script, c)
        h.wait_until(lambda: all(n.cmd("EXISTS", "a", "b") == 2 for n in c), 10,
                     what="the shell to hold a and b")
        for node in c:
            node.stop()
        t0 = time.monotonic()
        open(go, "w").close()
        try:
            rc, out, err = sp.wait(10)
        finally:
            for node in c:
                node.cont()
        took = time.monotonic() - t0
        eq((rc, out.split(), err), (0, ["50", "1", "1"], ""), "shell")
        note("sqlite3 shell exit with 2 locks and 3 hung nodes took %.0f ms (timeout_ms 50)"
             % (took * 1000))
        check(took < 3, "the shell took %.1f s to exit with a 50 ms per-node timeout" % took)


# --------------------------------------------------------------------------
# redlock_validity
# --------------------------------------------------------------------------

def _validity_python(n):
    c = h.shared_cluster(n)
    con = h.connect(env(c))
    eq(value(con, "SELECT redlock_validity('v')"), None, "validity of a name never taken")
    tok = is_token(value(con, "SELECT redlock_acquire('v', 5000)"))
    v1 = value(con, "SELECT redlock_validity('v')")
    check(isinstance(v1, int) and 0 < v1 <= 5000, "validity right after acquire: %r" % v1)
    v2 = value(con, "SELECT redlock_validity('v', ?)", tok)
    check(0 < v2 <= v1, "validity with the token: %r (first reading %r)" % (v2, v1))
    eq(value(con, "SELECT redlock_validity('v', ?)", secrets.token_hex(16)), None,
       "validity with a token that is not ours")
    eq(value(con, "SELECT redlock_validity('other')"), None, "validity of another name")
    # as this connection knows it: deleting the key behind its back changes nothing locally
    for node in c:
        node.cmd("DEL", "v")
    check(value(con, "SELECT redlock_validity('v')") > 0,
          "validity is what this connection knows (key deleted in Redis)")
    eq(value(con, "SELECT redlock_release('v')"), 0, "release after the key was deleted")
    eq(value(con, "SELECT redlock_validity('v')"), None, "validity after release")
    value(con, "SELECT redlock_acquire('v', 100)")
    h.wait_until(lambda: value(con, "SELECT redlock_validity('v')") is None, 5,
                 what="validity of a 100 ms lock to reach 0")
    eq(value(con, "SELECT typeof(redlock_validity('v'))"), "null", "validity type when expired")
    h.redlock_error(con, "SELECT redlock_validity(NULL)", what="validity(NULL)")
    h.redlock_error(con, "SELECT redlock_validity('v', 42)", what="validity with a number as token")


h.for_nodes(globals(), _validity_python, (1, 3))


def test_validity_shell():
    c = h.shared_cluster(3)
    out = sh("SELECT redlock_validity('v');\n"
             "CREATE TEMP TABLE t AS SELECT redlock_acquire('v', 5000) AS tok;\n"
             "SELECT redlock_validity('v') BETWEEN 1 AND 5000;\n"
             "SELECT redlock_validity('v', tok) BETWEEN 1 AND 5000 FROM t;\n"
             "SELECT redlock_validity('v', '%s');\n" % secrets.token_hex(16) +
             "SELECT redlock_release('v');\n"
             "SELECT redlock_validity('v');\n"
             "SELECT redlock_acquire('w', 100) IS NOT NULL;\n"
             + spin_until("redlock_validity('w') IS NULL") + "\n"
             "SELECT redlock_validity('w'), state FROM redlock_locks;\n",
             c, "redlock_validity in the shell")
    eq(out, ["NULL", "1", "1", "NULL", "1", "NULL", "1", "spun|1", "NULL|expired"], "shell output")


# --------------------------------------------------------------------------
# the strict form: redlock_lock
# --------------------------------------------------------------------------

def test_lock_strict_python():
    c = h.shared_cluster(3)
    con, other = h.connect(env(c)), h.connect(env(c))
    tok = is_token(value(con, "SELECT redlock_lock('st', 20000)"))
    holds(c, "st", tok, 20000, "redlock_lock's lock")
    eq(value(con, "SELECT redlock_fence('st')"), lock_row(con, "st")["fence"], "fence of it")
    msg = h.redlock_error(other, "SELECT redlock_lock('st', 1000)", what="redlock_lock, held elsewhere",
                          contains=("held elsewhere",))
    m = re.search(r"(\d+) of (\d+) nodes", msg)
    check(m and m.group(2) == "3" and int(m.group(1)) >= 2,
          "the error should say on how many of the 3 nodes it is held: %r" % msg)
    t0 = time.monotonic()
    msg = h.redlock_error(other, "SELECT redlock_lock('st', 1000, 300)",
                          what="redlock_lock waiting 300 ms", contains=("held elsewhere",))
    check(time.monotonic() - t0 >= 0.25, "redlock_lock with wait_ms 300 gave up after %.0f ms"
          % ((time.monotonic() - t0) * 1000))
    holds(c, "st", tok, 20000, "the holder's lock after the refused attempts")
    eq(lock_rows(other), [], "redlock_locks of the refused connection")
    h.redlock_error(other, "SELECT redlock_lock('st', 0)", what="redlock_lock with ttl 0",
                    contains=("ttl_ms",))
    eq(value(con, "SELECT redlock_release('st')"), 1, "release")
    is_token(value(other, "SELECT redlock_lock('st', 20000)"), "redlock_lock once it is free")


def test_lock_strict_names_failing_nodes():
    with h.Cluster(3) as c:
        con = h.connect(env(c))
        c[0].kill9()
        c[1].kill9()
        msg = h.redlock_error(con, "SELECT redlock_lock('nf', 1000)", what="redlock_lock, 2 of 3 dead")
        for node in (c[0], c[1]):
            check(str(node.port) in msg, "the error should name dead node %s: %r" % (node.addr, msg))
        check(str(c[2].port) not in msg, "the error names the healthy node: %r" % msg)
        no_key(c, "nf", "after the failed redlock_lock")


def test_lock_strict_shell_bail():
    c = h.shared_cluster(3)
    holder = h.SqlProc(env(c))
    tok = is_token(holder.value("SELECT redlock_acquire('job', 20000)"))
    with tempfile.TemporaryDirectory() as d:
        db = os.path.join(d, "job.db")
        job = (".bail on\n"
               "CREATE TABLE IF NOT EXISTS work(step);\n"
               "INSERT INTO work VALUES ('before');\n"
               "SELECT redlock_lock('job', 5000, 200) IS NOT NULL;\n"
               "INSERT INTO work VALUES ('protected');\n"
               "SELECT 'after';\n"
               "SELECT redlock_release('job');\n")
        rc, out, err = h.shell(job, env(c), db=db)
        eq(rc, 1, "exit status of a .bail on job whose redlock_lock failed (stderr %r)" % err)
        check("after" not in out, "statements after the failed redlock_lock ran: %r" % out)
        m = re.search(r"redlock: .*", err)
        check(m and "held elsewhere" in m.group(0) and re.search(r"\d+ of 3 nodes", m.group(0)),
              "stderr should carry the redlock: error saying where it is held: %r" % err)
        note("strict form error: %s" % m.group(0))
        ro = sqlite3.connect(db)
        eq(ro.execute("SELECT step FROM work").fetchall(), [("before",)],
           "rows written by the job that could not lock")
        ro.close()
        holds(c, "job", tok, 20000, "the holder's lock after the job stopped")
        # once free, the same job runs through and its protected step happens
        eq(holder.value("SELECT redlock_release('job')"), 1, "holder releases")
        rc, out, err = h.shell(job, env(c), db=db)
        eq((rc, out.split(), err), (0, ["1", "after", "1"], ""), "the job once the lock is free")
        ro = sqlite3.connect(db)
        eq(ro.execute("SELECT step FROM work").fetchall(),
           [("before",), ("before",), ("protected",)], "rows after the second run")
        ro.close()
        no_key(c, "job", "after the job released")


def test_lock_strict_shell_nodes_down():
    with h.Cluster(3) as c:
        c[1].kill9()
        c[2].kill9()
        rc, out, err = h.shell(".bail on\nSELECT redlock_lock('nd', 1000);\nSELECT 'after';", c)
        eq(rc, 1, "exit status with 2 of 3 nodes dead")
        check("redlock: " in err and "after" not in out, "out=%r err=%r" % (out, err))
        for node in (c[1], c[2]):
            check(str(node.port) in err, "the error should name dead node %s: %r" % (node.addr, err))


if __name__ == "__main__":
    sys.exit(_run_directly(globals()))
