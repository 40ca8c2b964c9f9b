"""The fleet-wide tables redlock_fleet_locks and redlock_fleet_waiters: the
locks that other processes hold on the nodes (exclusive, shared with a
limit, names of a set, with and without holder details, fenced), read with
SCAN from the shell, Python's default mode and Node; a lock on a minority
never shown held; other programs' keys under the prefix never shown as
locks; the key limit holds and a cut read says so; a stopped node costs
one timeout; the traces of waiters and a fair queue's waiters; no token in any column; a database
file cannot make a reader read them."""
# SPDX-License-Identifier: BSD-3-Clause

import base64
import hashlib
import json
import os
import socket
import sqlite3
import subprocess
import tempfile
import threading
import time
import unittest
import uuid

import harness as h
from harness import check, eq, is_token, value

h.default_config(timeout_ms=h.RELAXED_TIMEOUT_MS)

NODE, NODE_WHY = h.node_setup()
HOST = socket.gethostname()[:64]
LOCK_COLS = ["resource", "kind", "held", "nodes", "quorum", "node_ids", "ttl_ms", "holders", "max_holders", "host",
             "pid", "app", "since", "holder_id", "note"]
WAIT_COLS = ["resource", "kind", "waiters", "nodes", "node_ids", "ttl_ms", "position", "host", "pid", "app", "since",
             "mode", "entry", "note"]


def table(con, name, where="", *params):
    cur = con.execute("SELECT * FROM %s %s" % (name, where), params)
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]


def locks(con, where="", *params):
    return table(con, "redlock_fleet_locks", where, *params)


def waiters(con, where="", *params):
    return table(con, "redlock_fleet_waiters", where, *params)


def by_name(rows):
    out = {}
    for r in rows:
        out.setdefault(r["resource"], []).append(r)
    return out


def no_token_anywhere(rows, tokens, what):
    """Every column of every row, against each live token and its SHA1."""
    for r in rows:
        for col, v in r.items():
            for t in tokens:
                for secret in (t, hashlib.sha1(t.encode()).hexdigest()):
                    check(secret not in str(v), "%s: column %s of %r shows a token" % (what, col, r))


def hex_token():
    return os.urandom(16).hex()


def test_locks_of_other_processes_python_default_mode_3n():
    c = h.shared_cluster(3)
    t0 = int(time.time() * 1000)
    a = h.SqlProc(c, client_name="etl-a")
    b = h.SqlProc(c, client_name="etl-b", holder_info=0)
    s1 = h.SqlProc(c, client_name="etl-s1")
    s2 = h.SqlProc(c, client_name="etl-s2", holder_info=0)
    m = h.SqlProc(c, client_name="etl-m")
    tokens = [is_token(a.value("SELECT redlock_acquire('fl-x', 30000)")),
              is_token(b.value("SELECT redlock_acquire('fl-n', 30000)")),
              is_token(s1.value("SELECT redlock_acquire_shared('fl-s', 30000, 0, 2)")),
              is_token(s2.value("SELECT redlock_acquire_shared('fl-s', 30000, 0, 2)")),
              is_token(m.value("SELECT redlock_acquire_many('[\"fl-m1\",\"fl-m2\",\"fl-m3\"]', 30000)"))]
    t1 = int(time.time() * 1000)
    dk = "redlock-client:" + tokens[0][:16]  # a's holder details
    h.wait_until(lambda: all(n.cmd("EXISTS", "fl-x:fence", dk, "fl-s:holders", "redlock-fence-floor") == 4
                             for n in c), what="the companion keys there to be skipped")
    con = h.connect(c, python_default=True)
    con.execute("CREATE TABLE seen(resource TEXT, kind TEXT)")
    con.execute("INSERT INTO seen VALUES ('x', 'y')")  # Python's default mode: a transaction is open now
    check(con.in_transaction, "a transaction is open")
    h.wait_until(lambda: len(locks(con, "WHERE nodes = 3")) == 7, what="every lock on all three nodes")
    rows = locks(con)
    eq(list(rows[0].keys()), LOCK_COLS, "the columns")
    named = by_name(rows)
    eq(sorted(named), ["fl-m1", "fl-m2", "fl-m3", "fl-n", "fl-s", "fl-x"], "only the locks, no companion key")
    for r in rows:
        eq((r["held"], r["nodes"], r["node_ids"]), (1, 3, "[1,2,3]"), "held on every node: %r" % r)
        check(0 < r["ttl_ms"] <= 30000, "ttl_ms: %r" % r)
        eq(r["note"], None, "no note on a lock row")
    x, = named["fl-x"]
    eq((x["kind"], x["quorum"], x["host"], x["pid"], x["app"]), ("exclusive", 2, HOST, a.proc.pid, "etl-a"),
       "exclusive with details")
    check(t0 - 5 <= x["since"] <= t1 + 5, "since %r within the calls" % x["since"])
    eq((x["holders"], x["max_holders"]), (None, None), "no holder count for an exclusive lock")
    n, = named["fl-n"]
    eq((n["kind"], n["host"], n["pid"], n["app"], n["since"]), ("exclusive", None, None, None, None),
       "holder_info 0: no details")
    shared = sorted(named["fl-s"], key=lambda r: r["app"] or "")
    eq([(r["kind"], r["holders"], r["max_holders"], r["quorum"]) for r in shared], [("shared", 2, 2, 3)] * 2,
       "two shared holders, limit 2: each needs 3 of 3 nodes (k*n/(k+1) + 1)")
    eq([(r["app"], r["pid"]) for r in shared], [(None, None), ("etl-s1", s1.proc.pid)], "each holder's details")
    check(shared[0]["holder_id"] != shared[1]["holder_id"], "two holders, two holder_ids")
    members = [named["fl-m%d" % i][0] for i in (1, 2, 3)]
    eq({(r["kind"], r["app"], r["pid"], r["holder_id"]) for r in members},
       {("set", "etl-m", m.proc.pid, members[0]["holder_id"])}, "one set: one holder_id, the set's details")
    eq(len({r["holder_id"] for r in rows}), 5, "five acquisitions, five holder_ids")
    eq(waiters(con), [], "nobody waits")
    no_token_anywhere(rows, tokens, "redlock_fleet_locks")
    con.commit()
    eq(value(con, "SELECT count(*) FROM seen"), 1, "the transaction committed as usual")
    for p in (a, b, s1, s2, m):
        p.kill()


def test_shell_reads_the_fleet_3n():
    c = h.shared_cluster(3)
    a = h.SqlProc(c, client_name="cron-a")
    tok = is_token(a.value("SELECT redlock_acquire('sh-x', 30000)"))
    h.wait_until(lambda: all(n.get("sh-x") == tok for n in c), what="the lock on every node")
    rc, out, err = h.shell(".mode json\nSELECT * FROM redlock_fleet_locks;", c, args=["-bail"])
    eq(rc, 0, "shell exit status (stderr %r)" % err)
    rows = json.loads(out)
    eq([(r["resource"], r["kind"], r["held"], r["nodes"], r["app"], r["pid"]) for r in rows],
       [("sh-x", "exclusive", 1, 3, "cron-a", a.proc.pid)], "the shell's rows")
    check(tok not in out + err, "no token in the shell's output")
    a.kill()


def test_node_reads_the_fleet_3n():
    if NODE is None:
        raise unittest.SkipTest(NODE_WHY)
    c = h.shared_cluster(3)
    a = h.SqlProc(c, client_name="node-peer")
    toks = [is_token(a.value("SELECT redlock_acquire('nd-x', 30000)")),
            is_token(a.value("SELECT redlock_acquire_shared('nd-s', 30000, 0, 5)"))]
    for i in range(300):  # keys of another program under the (empty) prefix
        c[0].cmd("SET", "nd-junk:%d" % i, "v")
    h.wait_until(lambda: all(n.cmd("EXISTS", "nd-x", "nd-s") == 2 for n in c), what="the locks on every node")
    r = subprocess.run([NODE, os.path.join(h.NODE_DIR, "fleet.js"), h.EXT_SO, "100"], cwd=h.NODE_DIR,
                       env=h.node_env(c), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=25)
    eq(r.returncode, 0, "node fleet.js exit status (stderr: %s)" % r.stderr.strip()[-500:])
    out = json.loads(r.stdout)
    eq(sorted((x["resource"], x["kind"], x["held"], x["nodes"], x["max_holders"]) for x in out["locks"]),
       [("nd-s", "shared", 1, 3, 5), ("nd-x", "exclusive", 1, 3, None)], "Node's rows")
    eq(out["waiters"], [], "no waiters")
    cut = [x for x in out["cut"] if x["kind"] == "incomplete"]
    eq(len(cut), 1, "a read of 100 keys per node is cut: %r" % out["cut"])
    check("node 1 has more than max_keys (100)" in cut[0]["note"], "the note says where: %r" % cut[0])
    for t in toks:
        check(t not in r.stdout, "no token in Node's rows")
    a.kill()


def test_minority_and_split_values_are_never_held_3n():
    c = h.shared_cluster(3)
    con = h.connect(c)
    mine, t1, t2, t3 = hex_token(), hex_token(), hex_token(), hex_token()
    c[0].cmd("SET", "mi", mine, "PX", "30000")       # a failed attempt's leftover
    c[1].cmd("SET", "sp", t1, "PX", "30000")         # two attempts, one node each
    c[2].cmd("SET", "sp", t2, "PX", "30000")
    for n in c[:2]:
        n.cmd("SET", "q2", t3, "PX", "30000")        # a majority
    named = by_name(locks(con))
    eq([(r["held"], r["nodes"], r["quorum"], r["node_ids"]) for r in named["mi"]], [(0, 1, 2, "[1]")],
       "one node of three: shown, not held")
    eq(sorted((r["held"], r["nodes"], r["node_ids"]) for r in named["sp"]), [(0, 1, "[2]"), (0, 1, "[3]")],
       "split values: two holders, neither held")
    check(named["sp"][0]["holder_id"] != named["sp"][1]["holder_id"], "the split values are two holders")
    eq([(r["held"], r["nodes"], r["node_ids"]) for r in named["q2"]], [(1, 2, "[1,2]")], "two of three: held")
    no_token_anywhere(sum(named.values(), []), [mine, t1, t2, t3], "minority rows")
    for k in ("mi", "sp", "q2"):
        for n in c:
            n.cmd("DEL", k)


def test_other_programs_keys_are_not_reported_as_locks_3n():
    c = h.shared_cluster(3)
    con = h.connect(c)
    redsync = base64.b64encode(os.urandom(16)).decode()
    nr, uu = hex_token(), str(uuid.uuid4())
    for n in c:
        n.cmd("SET", "f-plain", hex_token())                      # a token-like string without a TTL
        n.cmd("SET", "f-cache", "hello world", "PX", "30000")     # a cache entry
        n.cmd("SET", "f-json", '{"id": 12}', "PX", "30000")
        n.cmd("SET", "f-digits", "12345", "PX", "30000")          # a counter (as a fencing counter looks)
        n.cmd("SET", "f-long", "a" * 100, "PX", "30000")
        n.cmd("SET", "f-details", "redlock1\x1fh\x1f1\x1fa\x1f1\x1fexclusive", "PX", "30000")
        n.cmd("SET", "f-mark", "redlock-writer-waiting", "PX", "30000")  # not named <key>:writer-waiting
        n.cmd("HSET", "f-hash", "0c5a7a70-1:1", "1")               # Redisson keeps its locks in a hash
        n.cmd("PEXPIRE", "f-hash", "30000")
        n.cmd("ZADD", "f-board", "10", "alice", "20", "bob")       # a leaderboard
        n.cmd("ZADD", "f-zfake", "5", "", "3", "x")                # a '' member, but not our mark
        n.cmd("PEXPIRE", "f-zfake", "30000")
        n.cmd("RPUSH", "f-list", "job")
        n.cmd("SET", "f-nr", nr, "PX", "30000")                    # node-redlock, redis-py: our format
        n.cmd("SET", "f-rs", redsync, "PX", "30000")               # redsync
    for n in c[:2]:
        n.cmd("SET", "f-uu", uu, "PX", "30000")                    # a UUID token
    rows = locks(con)
    eq(sorted((r["resource"], r["kind"], r["held"], r["nodes"]) for r in rows),
       [("f-nr", "exclusive", 1, 3), ("f-rs", "foreign", 1, 3), ("f-uu", "foreign", 1, 2)],
       "only the locks: other clients' as such, no other key")
    eq([(r["host"], r["pid"], r["app"]) for r in rows], [(None, None, None)] * 3, "no details for them")
    eq(waiters(con), [], "no waiter: the marker-like value is not named as a marker")
    no_token_anywhere(rows, [nr, redsync, uu], "other clients' locks")


def test_key_limit_holds_and_a_cut_read_says_so_3n():
    """5,000 keys of another program under the prefix on node 1: a read
    with max_keys 1000 runs 10 SCAN steps there (COUNT 100 each), ends with
    its 'incomplete' row and still shows what it saw; the default limit
    reads them all."""
    c = h.shared_cluster(3)
    c[0].cmd("EVAL", "for i = 1, 5000 do redis.call('set', 'app:junk:' .. i, 'v') end", "0")
    c[0].cmd("SET", "other:x", hex_token(), "PX", "30000")   # outside the prefix
    a = h.SqlProc(c, key_prefix="app:")
    tok = is_token(a.value("SELECT redlock_acquire('job', 30000)"))
    con = h.connect(c, key_prefix="app:")
    h.wait_until(lambda: all(n.get("app:job") == tok for n in c), what="the lock on every node")
    value(con, "SELECT redlock_ping()")  # connected: its set-up (the ACL probe, an EVAL) is not counted
    before = [(n.calls("scan"), n.calls("eval")) for n in c]
    rows = locks(con, "WHERE max_keys = 1000")
    after = [(n.calls("scan"), n.calls("eval")) for n in c]
    eq(after[0][0] - before[0][0], 10, "SCAN steps on node 1 for max_keys 1000")
    eq(after[0][1] - before[0][1], 10, "script calls on node 1 (one per step)")
    for i in (1, 2):
        eq(after[i][0] - before[i][0], 1, "node %d has a few keys: one step" % (i + 1))
    cut = [r for r in rows if r["kind"] == "incomplete"]
    eq(len(cut), 1, "one incomplete row: %r" % rows)
    eq([k for k, v in cut[0].items() if v is not None], ["kind", "note"], "the incomplete row's columns")
    check("node 1 has more than max_keys (1000) keys under the key prefix" in cut[0]["note"] and
          "redlock_fleet_locks(10000)" in cut[0]["note"], "the note: %r" % cut[0]["note"])
    eq(rows[-1]["kind"], "incomplete", "the incomplete row comes last")
    seen = [r for r in rows if r["kind"] != "incomplete"]
    check(all(r["resource"] == "job" for r in seen), "only the lock, prefix taken off: %r" % seen)
    eq(value(con, "SELECT max_keys FROM redlock_fleet_locks(1000) LIMIT 1"), 1000, "max_keys reads back")
    before = c[0].calls("scan")
    rows = locks(con)
    check(c[0].calls("scan") - before <= 10000 // 100, "the default limit's steps")
    eq([(r["resource"], r["kind"], r["held"], r["nodes"]) for r in rows], [("job", "exclusive", 1, 3)],
       "the default limit reads every key: the lock, no incomplete row")
    eq(locks(con, "WHERE max_keys = 2.0")[-1]["kind"], "incomplete", "a whole REAL is taken")
    for bad in (0, -1, 10000001, 1.5, "'x'"):
        h.redlock_error(con, "SELECT * FROM redlock_fleet_locks(%s)" % bad,
                        contains=("max_keys must be a whole number from 1 to 10000000",))
    no_token_anywhere(rows, [tok], "prefixed rows")
    a.kill()


def test_glob_characters_in_the_prefix_are_matched_as_they_are_1n():
    c = h.shared_cluster(1)
    con = h.connect(c, key_prefix="p*[")
    t1, t2 = hex_token(), hex_token()
    c[0].cmd("SET", "p*[job", t1, "PX", "30000")
    c[0].cmd("SET", "pX[job", t2, "PX", "30000")   # matched by the pattern p*[ if it were not escaped
    c[0].cmd("SET", "p*job", t2, "PX", "30000")
    eq([(r["resource"], r["held"]) for r in locks(con)], [("job", 1)], "the prefix's own key only")


def test_a_stopped_node_costs_one_timeout_and_no_node_is_an_error_3n():
    with h.Cluster(3) as cl:
        a = h.SqlProc(cl)
        tok = is_token(a.value("SELECT redlock_acquire('dn', 30000)"))
        h.wait_until(lambda: all(n.get("dn") == tok for n in cl), what="the lock on every node")
        for i in range(300):  # more than two steps on every node
            for n in cl:
                n.cmd("SET", "dn-junk:%d" % i, "v")
        con = h.connect(cl, timeout_ms=200)
        cl[2].stop()
        try:
            rows = locks(con)
            eq([(r["resource"], r["held"], r["nodes"], r["node_ids"]) for r in rows if r["kind"] != "incomplete"],
               [("dn", 1, 2, "[1,2]")], "the lock, from the nodes that answered")
            note = rows[-1]["note"]
            check(rows[-1]["kind"] == "incomplete" and "node 3 127.0.0.1:%d: no answer within 200 ms" % cl[2].port
                  in note, "the note names the stopped node: %r" % rows[-1])
            eq(value(con, "SELECT timeouts FROM redlock_stats WHERE id = 3"), 1,
               "one step waited for the stopped node, not one per step")
        finally:
            cl[2].cont()
        cl[0].kill9()
        cl[1].kill9()
        cl[2].kill9()
        h.redlock_error(con, "SELECT * FROM redlock_fleet_locks",
                        contains=("could not read the locks on the nodes: no node could be read", "node 1"))
        a.kill()


def test_waiters_writer_markers_and_subscribers_3n():
    c = h.shared_cluster(3)
    holder = h.SqlProc(c)
    toks = [is_token(holder.value("SELECT redlock_acquire_shared('wq', 30000)")),
            is_token(holder.value("SELECT redlock_acquire('wx', 30000)"))]
    waiting = [h.ShellProc("SELECT redlock_acquire('wq', 10000, 20000) IS NOT NULL;", c),
               h.ShellProc("SELECT redlock_acquire('wx', 10000, 20000) IS NOT NULL;", c),
               h.ShellProc("SELECT redlock_acquire_shared('wx', 10000, 20000) IS NOT NULL;", c)]
    con = h.connect(c)

    def seen():
        rows = waiters(con)
        return sorted((r["resource"], r["kind"], r["waiters"], r["nodes"]) for r in rows) == [
            ("wq", "subscribed", 1, 3), ("wq", "writer-waiting", None, 3), ("wx", "subscribed", 2, 3)] and rows

    rows = h.wait_until(seen, what="a writer's marker and the subscribers")
    eq(list(rows[0].keys()), WAIT_COLS, "the columns")
    for r in rows:
        eq(r["node_ids"], "[1,2,3]", "on every node: %r" % r)
        eq([r[k] for k in ("position", "host", "pid", "app", "since", "mode", "entry", "note")], [None] * 8,
           "no queue entry, no note: %r" % r)
        if r["kind"] == "writer-waiting":
            check(0 < r["ttl_ms"] <= 30000, "the marker's TTL: %r" % r)
        else:
            eq(r["ttl_ms"], None, "subscribers have no TTL")
    held = locks(con)
    eq(sorted((r["resource"], r["kind"]) for r in held), [("wq", "shared"), ("wx", "exclusive")],
       "the waiters' keys are not locks")
    no_token_anywhere(rows + held, toks, "waiters")
    eq(holder.value("SELECT redlock_release_all()"), 2, "the holder lets go")
    for p in waiting:
        rc, out, err = p.wait(30)
        eq((rc, out.strip()), (0, "1"), "the waiter got its lock (stderr %r)" % err)
    h.wait_until(lambda: waiters(con) == [], what="no trace of a waiter once they are served")
    holder.kill()


def test_a_database_file_cannot_make_a_reader_read_the_fleet_1n():
    """SQLITE_VTAB_DIRECTONLY: a view or trigger of a file over the tables
    is refused before any node is contacted, and a name of the file bound
    to them does not connect."""
    c = h.shared_cluster(1)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "hostile.db")
        db = sqlite3.connect(path, isolation_level=None)
        db.executescript("""
            CREATE VIEW v_locks AS SELECT * FROM redlock_fleet_locks;
            CREATE VIEW v_waiters AS SELECT * FROM redlock_fleet_waiters(100);
            CREATE TABLE t(x);
            CREATE TABLE seen(r);
            CREATE TRIGGER t_fleet AFTER INSERT ON t BEGIN
                INSERT INTO seen SELECT resource FROM redlock_fleet_locks;
            END;
            CREATE TABLE jobs(a);
            PRAGMA writable_schema = ON;
            UPDATE sqlite_master SET sql = 'CREATE VIRTUAL TABLE jobs USING redlock_fleet_locks', rootpage = 0
                WHERE name = 'jobs';
        """)
        db.close()
        before = int(c[0].cmd("INFO", "stats").split("total_connections_received:")[1].split()[0])
        con = h.connect(c, database=path)
        for sql in ("SELECT * FROM v_locks", "SELECT * FROM v_waiters", "INSERT INTO t VALUES (1)",
                    "SELECT * FROM jobs"):
            h.sql_error(con, sql, what=sql)
        after = int(c[0].cmd("INFO", "stats").split("total_connections_received:")[1].split()[0])
        eq(after - before, 0, "connections the refused reads made")
        eq(locks(con), [], "the extension's own table still reads")
        con.close()


def test_no_nodes_is_an_error_1n():
    c = h.shared_cluster(1)
    con = h.connect(c)
    con.execute("DELETE FROM redlock_nodes")
    h.redlock_error(con, "SELECT * FROM redlock_fleet_waiters", contains=("no Redis nodes configured",))


def test_a_shared_lock_lists_at_most_20_holders_and_counts_them_all_3n():
    """25 holders of one shared lock (written as the extension writes them,
    without details): 20 rows, the first to expire, each with holders 25."""
    c = h.shared_cluster(3)
    con = h.connect(c)
    toks = [hex_token() for _ in range(25)]
    for n in c:
        now = int(n.cmd("TIME")[0]) * 1000
        n.cmd("ZADD", "many", "-1", "")      # the mark of a shared lock without a limit
        for i, t in enumerate(toks):
            n.cmd("ZADD", "many", str(now + 20000 + 100 * i), t)
        n.cmd("PEXPIREAT", "many", str(now + 20000 + 100 * 25))
    rows = locks(con)
    eq(len(rows), 20, "holder rows listed")
    eq({(r["kind"], r["holders"], r["max_holders"], r["quorum"], r["held"], r["nodes"]) for r in rows},
       {("shared", 25, 0, 2, 1, 3)}, "every row counts all 25 holders; no limit: a majority")
    ttls = [r["ttl_ms"] for r in rows]
    check(max(ttls) <= 20000 + 100 * 19, "the first 20 to expire: %r" % ttls)
    eq(len({r["holder_id"] for r in rows}), 20, "one holder_id each")
    no_token_anywhere(rows, toks, "shared holders")


def test_an_interrupt_ends_a_long_read_1n():
    """sqlite3_interrupt (con.interrupt()) is seen between two steps: a read
    of 50,000 keys (500 steps) stops early with the interrupt's error."""
    c = h.shared_cluster(1)
    c[0].cmd("EVAL", "for i = 1, 50000 do redis.call('set', 'int:' .. i, 'v') end", "0")
    con = h.connect(c)
    done = threading.Event()

    def interrupt():
        while not done.is_set():
            con.interrupt()
            time.sleep(0.001)
    before = c[0].calls("scan")
    t = threading.Thread(target=interrupt)
    t.start()
    try:
        msg = h.redlock_error(con, "SELECT count(*) FROM redlock_fleet_locks(1000000)",
                              contains=("interrupted (sqlite3_interrupt) while reading the nodes' keys",))
    finally:
        done.set()
        t.join()
    check(c[0].calls("scan") - before < 500, "stopped before the last step: %r" % msg)
    eq(value(con, "SELECT count(*) FROM redlock_fleet_locks WHERE kind = 'incomplete'"), 1,
       "the next read runs (cut by the default limit)")


if __name__ == "__main__":
    h.run_directly(globals())


def test_fair_queue_waiters_in_order_3n():
    """Three fair waiters in other processes behind a holder are rows of
    kind queued, positions 1 to 3 in the order they began to wait, each
    with its mode, since, nodes and entry (the member on the nodes); a
    killed waiter's row goes once its lease ran out and the ones behind
    move up; another program's sorted sets under queue names are not
    read; no token in any row."""
    c = h.shared_cluster(3)
    for n in c:  # another program's sorted sets: no mark
        n.cmd("ZADD", "fz:queue", 1, "0123456789abcdef:x")
        n.cmd("ZADD", "fz:queue-lease", 9999999999999, "0123456789abcdef:x")
        n.cmd("PEXPIRE", "fz:queue", 60000)
        n.cmd("PEXPIRE", "fz:queue-lease", 60000)
    holder = h.connect(c, fair=1)
    toks = [is_token(value(holder, "SELECT redlock_acquire('fq', 30000)"))]
    con = h.connect(c)
    procs, threads, got = [], [], {}
    t0 = int(time.time() * 1000)
    for name, fn in (("w1", "redlock_acquire"), ("w2", "redlock_acquire_shared"), ("w3", "redlock_acquire")):
        p = h.SqlProc(c, fair=1, queue_lease_ms=400)
        procs.append(p)
        sql = "SELECT %s('fq', 30000, 20000)" % fn

        def run(p=p, name=name, sql=sql):
            try:
                got[name] = p.value(sql)
            except Exception as e:  # the killed one
                got[name] = e
        t = threading.Thread(target=run, daemon=True)
        t.start()
        threads.append(t)
        n = len(procs)
        rows = h.wait_until(lambda: (lambda r: len(r) == n and all(x["nodes"] == 3 for x in r) and r)(
            waiters(con, "WHERE kind = 'queued'")), 10, what="waiter %s queued on every node" % name)
        last = max(r["since"] for r in rows)
        h.wait_until(lambda: time.time() * 1000 > last + 1, 1, what="the wall clock to move on")
    t1 = int(time.time() * 1000)
    rows = waiters(con, "WHERE kind = 'queued'")
    seen = list(rows)
    eq(list(rows[0].keys()), WAIT_COLS, "the columns")
    eq([(r["resource"], r["position"], r["mode"], r["waiters"], r["nodes"], r["node_ids"]) for r in rows],
       [("fq", 1, "exclusive", 3, 3, "[1,2,3]"), ("fq", 2, "shared", 3, 3, "[1,2,3]"),
        ("fq", 3, "exclusive", 3, 3, "[1,2,3]")], "three waiters in arrival order")
    check(t0 <= rows[0]["since"] < rows[1]["since"] < rows[2]["since"] <= t1, "since in order: %r" % rows)
    members = [m for m in c[0].cmd("ZRANGE", "fq:queue", 1, -1)]
    eq([r["entry"] for r in rows], members, "the entries are the queue's members, in its order")
    for r in rows:
        eq([r[k] for k in ("ttl_ms", "host", "pid", "app", "note")], [None] * 5, "no details: %r" % r)
    eq([r for r in waiters(con) if r["resource"] == "fz"], [], "another program's sorted sets are not read")
    eq([r["resource"] for r in locks(con)], ["fq"], "nor are they locks")
    procs[1].kill()  # w2: its entry stays on the nodes until its lease runs out
    rows = h.wait_until(lambda: (lambda r: [x["position"] for x in r] == [1, 2] and r)(
        waiters(con, "WHERE kind = 'queued'")), 10, what="the killed waiter's row to go")
    seen += rows
    eq([(r["entry"], r["mode"], r["waiters"]) for r in rows],
       [(members[0], "exclusive", 2), (members[2], "exclusive", 2)], "the one behind moved up")
    eq(value(holder, "SELECT redlock_release('fq')"), 1, "the holder lets go")
    threads[0].join(30)
    toks.append(is_token(got.get("w1")))
    eq(procs[0].value("SELECT redlock_release('fq')"), 1, "w1 lets go")
    threads[2].join(30)
    toks.append(is_token(got.get("w3")))
    eq(procs[2].value("SELECT redlock_release('fq')"), 1, "w3 lets go")
    no_token_anywhere(seen, toks, "queued waiters")
    h.wait_until(lambda: [r for r in waiters(con) if r["kind"] == "queued"] == [], 10,
                 what="no queued row once they are served")
    for p in procs:
        p.kill()
    for n in c:
        n.cmd("DEL", "fz:queue", "fz:queue-lease")


def test_a_queue_lists_at_most_20_waiters_and_counts_them_all_3n():
    """25 live entries and a dead one at the head, written as waiters leave
    them: the dead one is no row, the first 20 are rows 1 to 20 (the
    order by since, then entry), the 20th says that 25 wait."""
    c = h.shared_cluster(3)
    live = ["%016x:%s" % (i, "xs"[i % 2]) for i in range(25)]
    dead = "ffffffffffffffff:x"
    for n in c:
        now = int(float(n.cmd("TIME")[0]) * 1000)
        for k in ("cq:queue", "cq:queue-lease"):
            n.cmd("ZADD", k, -1, "redlock-queue")
        n.cmd("ZADD", "cq:queue", 5, dead)
        n.cmd("ZADD", "cq:queue-lease", now - 1000, dead)
        for i, m in enumerate(live):
            n.cmd("ZADD", "cq:queue", 1000 + i // 2, m)  # pairs of equal times: by entry
            n.cmd("ZADD", "cq:queue-lease", now + 60000, m)
        n.cmd("PEXPIRE", "cq:queue", 60000)
        n.cmd("PEXPIRE", "cq:queue-lease", 60000)
    con = h.connect(c)
    rows = waiters(con, "WHERE resource = 'cq'")
    eq([(r["position"], r["entry"], r["since"], r["mode"]) for r in rows],
       [(i + 1, live[i], 1000 + i // 2, "exclusive" if i % 2 == 0 else "shared") for i in range(20)],
       "the first 20 live entries in order")
    eq({(r["kind"], r["waiters"], r["nodes"]) for r in rows}, {("queued", 25, 3)}, "25 wait, on every node")
    eq([r["note"] for r in rows][:19], [None] * 19, "no note but on the last row")
    eq(rows[19]["note"], "25 waiters queued, the first 20 listed (at most 20 per name and node)", "the cut")
    for n in c:
        n.cmd("DEL", "cq:queue", "cq:queue-lease")
