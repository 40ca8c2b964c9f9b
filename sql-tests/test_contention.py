"""Several processes contending for one name never hold it at the same time.
(Small runs; a deeper checker lives elsewhere.)"""
# SPDX-License-Identifier: BSD-3-Clause

import os
import sqlite3
import tempfile
import threading

import harness as h
from harness import check, eq, is_token, value

# not a timing test: a slow node on a loaded machine must not fail it
h.default_config(timeout_ms=h.RELAXED_TIMEOUT_MS)


def _two_processes_alternate(n):
    c = h.shared_cluster(n)
    a = h.SqlProc(c)
    b = h.SqlProc(c)
    for i in range(3):
        first, second = (a, b) if i % 2 == 0 else (b, a)
        tok = is_token(first.value("SELECT redlock_acquire('alt', 10000)"), "round %d" % i)
        eq(second.value("SELECT redlock_acquire('alt', 10000)"), None,
           "round %d: the other process while the lock is held" % i)
        eq(second.value("SELECT redlock_release('alt')"), None,
           "round %d: release by the process that holds nothing" % i)
        h.holds(c, "alt", tok, 10000, "round %d" % i)
        eq(first.value("SELECT redlock_release('alt')"), 1, "round %d: release" % i)
        h.no_key(c, "alt", "round %d after release" % i)


h.for_nodes(globals(), _two_processes_alternate, (1, 3, 5))


def _shell_job(who, iterations):
    """SQL for one contender: acquire (waiting), mark the shared file as held
    (a second simultaneous holder violates the PRIMARY KEY), work, unmark,
    release (into the TEMP table: a release in a statement that writes the
    shared file would be refused before that write is committed)."""
    step = f"""
INSERT INTO tok SELECT redlock_acquire('job', 10000, 30000);
INSERT INTO m.holder(id, who) SELECT 1, '{who}' FROM tok WHERE t IS NOT NULL;
INSERT INTO m.log(who, ev) SELECT '{who}', CASE WHEN t IS NULL THEN 'miss' ELSE 'in' END FROM tok;
WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < 20000)
  SELECT count(*) FROM r;
INSERT INTO m.log(who, ev) SELECT '{who}', 'out' FROM tok WHERE t IS NOT NULL;
DELETE FROM m.holder WHERE who = '{who}';
UPDATE tok SET t = 'rel' || redlock_release('job') WHERE t IS NOT NULL;
INSERT INTO m.log(who, ev) SELECT '{who}', t FROM tok WHERE t IS NOT NULL;
DELETE FROM tok;
"""
    return ("SELECT redlock_config('retry_delay_ms', 10);\n"
            "SELECT redlock_config('retry_jitter_ms', 5);\n"
            "CREATE TEMP TABLE tok(t);\n" + step * iterations)


def _shells_contend(nodes, procs, iterations):
    c = h.shared_cluster(nodes)
    with tempfile.TemporaryDirectory() as d:
        marker = os.path.join(d, "marker.db")
        db = sqlite3.connect(marker, isolation_level=None)
        db.executescript("CREATE TABLE holder(id INTEGER PRIMARY KEY CHECK (id = 1), who);"
                         "CREATE TABLE log(seq INTEGER PRIMARY KEY, who, ev);")
        db.close()
        attach = ".timeout 20000\nATTACH '%s' AS m;\n" % marker
        shells = [h.ShellProc(attach + _shell_job("p%d" % i, iterations), c)
                  for i in range(procs)]
        results = [s.wait(120) for s in shells]
        for i, (rc, out, err) in enumerate(results):
            eq((rc, err), (0, ""), "contender p%d exit status and stderr" % i)
        db = sqlite3.connect(marker)
        log = db.execute("SELECT who, ev FROM log ORDER BY seq").fetchall()
        db.close()
        misses = [r for r in log if r[1] == "miss"]
        eq(misses, [], "contenders that gave up waiting")
        events = [r for r in log if r[1] != "miss"]
        eq(len(events), 3 * procs * iterations, "events logged")
        # The release is logged once it is done (after COMMIT), so the next
        # holder's 'in' may come before it; holds themselves never overlap.
        holds_ = [r for r in events if r[1] in ("in", "out")]
        for i in range(0, len(holds_), 2):
            who = holds_[i][0]
            eq(holds_[i:i + 2], [(who, "in"), (who, "out")],
               "holds %d..%d: one holder at a time" % (i, i + 1))
        for i in range(procs):
            who = "p%d" % i
            eq([ev for w, ev in events if w == who], ["in", "out", "rel1"] * iterations,
               "%s's events: each release gives back its own lock" % who)
        h.no_key(c, "job", "after all contenders released")


def test_shells_contend_1n():
    _shells_contend(1, 3, 4)


def test_shells_contend_3n():
    _shells_contend(3, 3, 4)


def test_threads_contend_3n():
    """Four connections in four threads of one process."""
    c = h.shared_cluster(3)
    state = {"holder": None, "entries": 0, "violations": [], "errors": []}
    guard = threading.Lock()

    def worker(i):
        con = h.connect(c, retry_delay_ms=10, retry_jitter_ms=5)
        try:
            for _ in range(5):
                tok = value(con, "SELECT redlock_acquire('thr', 10000, 30000)")
                if tok is None:
                    state["errors"].append("worker %d gave up waiting" % i)
                    return
                with guard:
                    if state["holder"] is not None:
                        state["violations"].append((state["holder"], i))
                    state["holder"] = i
                    state["entries"] += 1
                for _ in range(3):
                    value(con, "SELECT count(*) FROM redlock_nodes")
                with guard:
                    if state["holder"] != i:
                        state["violations"].append((i, state["holder"]))
                    state["holder"] = None
                r = value(con, "SELECT redlock_release('thr')")
                if r != 1:
                    state["errors"].append("worker %d release returned %r" % (i, r))
        except Exception as e:
            state["errors"].append("worker %d: %s" % (i, e))

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    check(not any(t.is_alive() for t in threads), "workers still running after 60 s")
    eq(state["errors"], [], "worker errors")
    eq(state["violations"], [], "two holders at once")
    eq(state["entries"], 20, "lock entries")


def test_waiters_taking_turns_on_one_name_are_woken_3n():
    """Waiters taking turns on one name are each woken by a release message
    (their retry delay is longer than their wait). A message left from a
    waiter's previous wait on the name (published before its UNSUBSCRIBE
    ran) was taken, in the next wait, for a release: the wait for the new
    subscriptions ended early and the other nodes' subscriptions were
    closed, so waiters slept through releases (hand-offs went from 0.4 ms
    to a retry delay). A message before the confirmations no longer
    counts."""
    with h.Cluster(3) as c:
        # a retry delay longer than the wait: every turn must come by a release message
        cons = [h.connect(c, retry_delay_ms=60000, retry_jitter_ms=0) for _ in range(3)]
        errors = []

        def worker(con):
            try:
                for _ in range(60):
                    tok = value(con, "SELECT redlock_acquire('turns', 10000, 10000)")
                    if tok is None:
                        errors.append("a waiter was not woken within 10 s")
                        return
                    if value(con, "SELECT redlock_release('turns', ?)", tok) != 1:
                        errors.append("a release failed")
                        return
            except Exception as e:
                errors.append(str(e))

        threads = [threading.Thread(target=worker, args=(con,)) for con in cons]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        eq(errors, [], "every turn taken and given back")
