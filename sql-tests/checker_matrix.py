#!/usr/bin/python3
"""The fault matrix of the mutual-exclusion checker (checker.py).

Each scenario starts its own redis-server nodes (5 masters), runs the
checker with 6 worker processes under one kind of fault, and says what it
expects:

    safe      0 violations, and enough acquisitions to prove something
    blocked   no acquisitions at all and 0 violations (a majority is gone)
    limit     a documented limit: violations are allowed; the fencing
              numbers must stay in order and every stale write be rejected
    broken    a negative control: violations must be found

    /usr/bin/python3 sql-tests/checker_matrix.py [--seconds S] [--only a,b] [--list]

prints one summary line per scenario, then a table (fault, acquisitions,
violations, fences checked) and exits 1 when a scenario missed its
expectation. `make checker` runs it; test_checker.py runs a few scenarios
for a shorter time in `make test`; mutants.py runs a few against engines
built with deliberate bugs.
"""
# SPDX-License-Identifier: BSD-3-Clause

import argparse
import os
import sqlite3
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import harness as h                    # noqa: E402
from faultproxy import FaultProxy      # noqa: E402
import checker                         # noqa: E402
import checker_many                    # noqa: E402
import checker_handoff                 # noqa: E402
import checker_xact                    # noqa: E402
import checker_partitions              # noqa: E402

WORKERS = 6
TTL_MS = 300            # short, so that "after the TTL" fits many times into a run
FAST_RECONNECT = {"reconnect_min_ms": 20, "reconnect_max_ms": 100}
MIN_ACQUISITIONS = 30   # a "safe" run with fewer proves little


class Outcome:
    def __init__(self, res, expect, faults_done, min_acquisitions=MIN_ACQUISITIONS, min_faults=2):
        self.res, self.expect, self.faults_done = res, expect, faults_done
        self.min_acquisitions, self.min_faults = min_acquisitions, min_faults

    def problems(self):
        r, out = self.res, []
        if self.expect == "safe":
            if r.violations:
                out.append("%d violations where safety is promised" % r.violations)
            if r.acquisitions < self.min_acquisitions:
                out.append("only %d acquisitions" % r.acquisitions)
        elif self.expect == "blocked":
            if r.acquisitions or r.violations:
                out.append("a lock was handed out without a majority (%d acquisitions, %d violations)"
                           % (r.acquisitions, r.violations))
            if not r.errors:
                out.append("no errors reported although a majority was gone")
        elif self.expect == "limit":
            if r.fence_disorder or r.stale_accepted:
                out.append("fencing failed: %d holds out of order, %d stale writes accepted"
                           % (r.fence_disorder, r.stale_accepted))
            if r.acquisitions < MIN_ACQUISITIONS:
                out.append("only %d acquisitions" % r.acquisitions)
        elif self.expect == "broken":
            if not r.violations:
                out.append(checker.NO_VIOLATION_FOUND + ": the checker cannot be trusted")
        if self.faults_done is not None and self.faults_done < self.min_faults:
            out.append("the fault happened only %d times" % self.faults_done)
        if r.loss_unseen:
            out.append("%d paused holders did not see their lock lost" % r.loss_unseen)
        if hasattr(r, "over_bound") and r.over_bound():
            out.append("a call took longer than its bound: %s" % r.longest_text())
        if hasattr(r, "keys_left_count") and r.keys_left_count():
            out.append("lock keys left on the nodes after the run: %r" % r.keys_left)
        return out


def _urls(nodes):
    return [n.url for n in nodes]


def _run(urls, seconds, **kw):
    kw.setdefault("ttl_ms", TTL_MS)
    kw.setdefault("workers", WORKERS)
    return checker.run(urls, seconds=seconds, **kw)


# ---- scenarios: each takes the run length and returns an Outcome ----------

def clean(seconds):
    with h.Cluster(5) as c:
        return Outcome(_run(_urls(c), seconds), "safe", None)


def kill9_restart_after_ttl(seconds):
    with h.Cluster(5) as c:
        log = []
        res = _run(_urls(c), seconds, faults=checker.kill_restart(c, TTL_MS, log), config=FAST_RECONNECT)
        return Outcome(res, "safe", len(log))


def restart_within_ttl_guarded(seconds):
    """Restarts without persistence that come back within the TTL, with
    restart_guard on: the restarted nodes forgot locks that are still valid."""
    with h.Cluster(5) as c:
        log = []
        res = _run(_urls(c), seconds, config=dict(FAST_RECONNECT, restart_guard=1),
                   faults=checker.kill_restart(c, TTL_MS, log, down_s=TTL_MS / 1000.0 * 0.2,
                                               gap_s=TTL_MS / 1000.0 * 1.5))
        return Outcome(res, "safe", len(log))


def sigstop_nodes(seconds):
    with h.Cluster(5) as c:
        log = []
        res = _run(_urls(c), seconds, faults=checker.stop_cont(c, log), config=FAST_RECONNECT)
        return Outcome(res, "safe", len(log))


def _majority(seconds, how):
    with h.Cluster(5) as c:
        for n in c.nodes[:3]:
            n.kill9() if how == "down" else n.stop()
        try:
            res = _run(_urls(c), seconds, wait_ms=200)
        finally:
            for n in c.nodes[:3]:
                n.cont()
        return Outcome(res, "blocked", None)


def majority_down(seconds):
    return _majority(seconds, "down")


def majority_hung(seconds):
    return _majority(seconds, "hung")


def client_pauses(seconds):
    """Workers SIGSTOP themselves in the middle of a read-modify-write and
    are resumed after 1.5 TTL: they must find the lock lost, and their
    fenced writes must be rejected once a newer holder has written."""
    with h.Cluster(5) as c:
        res = _run(_urls(c), seconds, pause_p=0.15)
        return Outcome(res, "safe", res.pauses, min_faults=1)


def client_pauses_idle(seconds):
    """The same with 2 workers that pause between holds, so that a paused
    holder often resumes to find the lock free: it must still see it lost
    (an extend, tried by half of them, must not bring it back)."""
    with h.Cluster(5) as c:
        res = _run(_urls(c), seconds, workers=2, pause_p=0.5, think_ms=[20, 120],
                   pause_checks=["extend", "extend", "validity", "release"])
        return Outcome(res, "safe", res.pauses, min_acquisitions=MIN_ACQUISITIONS // 3)


def extends_during_faults(seconds):
    """Holds of up to 2.5 TTL, kept by explicit extends (half the workers)
    or auto-extension (the other half), while minorities are killed and
    restarted and some holders pause past their TTL."""
    with h.Cluster(5) as c:
        log = []
        extra = [{"config": dict(FAST_RECONNECT)}, {"config": dict(FAST_RECONNECT, auto_extend=1)}]
        res = _run(_urls(c), seconds, faults=checker.kill_restart(c, TTL_MS, log),
                   worker_extra=extra, long_hold=2.5, long_hold_p=0.5, extend_p=0.3, pause_p=0.04)
        return Outcome(res, "safe", len(log))


def repeated_acquires(seconds):
    with h.Cluster(5) as c:
        log = []
        res = _run(_urls(c), seconds, reenter_p=0.6, faults=checker.stop_cont(c, log),
                   config=FAST_RECONNECT)
        return Outcome(res, "safe", len(log))


def node_list_changes(seconds):
    """Workers take a row out of redlock_nodes and put it back, between
    holds and while holding (where it may be refused)."""
    with h.Cluster(5) as c:
        log = []
        res = _run(_urls(c), seconds, churn_p=0.4, faults=checker.stop_cont(c, log, size=1),
                   config=FAST_RECONNECT)
        return Outcome(res, "safe", len(log))


def duplicates_and_replicas(seconds):
    """Half the workers list the 5 masters; the other half list 5 rows of
    which only 3 are independent masters: n0, an alias of n0 (a
    pass-through proxy), n1, n2 and a writable replica of n3. Those must
    win all of n0, n1, n2 (a majority of the 5 masters too); their
    connections are new for every acquisition, so the first round of a
    connection is exercised each time."""
    with h.Cluster(5) as c:
        replica = h.RedisNode()
        replica.cmd("REPLICAOF", c[3].host, c[3].port)
        replica.cmd("CONFIG", "SET", "replica-read-only", "no")
        alias = FaultProxy(c[0].host, c[0].port)
        try:
            odd = [c[0].url, alias.url, c[1].url, c[2].url, replica.url]
            res = _run(_urls(c), seconds, worker_nodes=[_urls(c), odd],
                       worker_extra=[{}, {"fresh_conn_every": 1}])
            return Outcome(res, "safe", None)
        finally:
            alias.close()
            replica.terminate()


def _with_proxies(c, fn):
    proxies = [FaultProxy(x.host, x.port) for x in c]
    try:
        return fn(proxies)
    finally:
        for p in proxies:
            p.close()


def delayed_replies(seconds):
    with h.Cluster(5) as c:
        def go(proxies):
            log = []
            res = _run([p.url for p in proxies], seconds, config=FAST_RECONNECT,
                       faults=checker.proxy_mode(proxies, log, lambda p: p.delay_replies(300)))
            return Outcome(res, "safe", len(log))
        return _with_proxies(c, go)


def connection_resets(seconds):
    with h.Cluster(5) as c:
        def go(proxies):
            log = []
            res = _run([p.url for p in proxies], seconds, config=FAST_RECONNECT,
                       faults=checker.resets(proxies, log))
            return Outcome(res, "safe", len(log))
        return _with_proxies(c, go)


def slow_client_links(seconds):
    """Half the workers reach every node through a link that delays
    replies by 60 ms (their acquisitions take that long, and the validity
    must account for it); the other half are direct and retry often. A
    holder that over-reckons its validity is overtaken by a fast one: the
    slow ones mostly hold for nearly all of their validity, the fast ones
    hold briefly and pause between holds, so the slow ones get their turn."""
    with h.Cluster(5) as c:
        def go(proxies):
            for p in proxies:
                p.delay_replies(60)
            cfg = {"timeout_ms": 200, "retry_delay_ms": 10, "retry_jitter_ms": 5}
            slow = {"nearly_all_p": 0.7, "long_p": 0.1}
            fast = {"nearly_all_p": 0.0, "long_p": 0.0, "think_ms": [0, 20]}
            res = _run(_urls(c), seconds, worker_nodes=[[p.url for p in proxies], _urls(c)],
                       worker_extra=[slow, fast], config=cfg)
            return Outcome(res, "safe", None)
        return _with_proxies(c, go)


def _jumps(seconds, which, expect):
    with h.Cluster(5) as c:
        log = []
        res = _run(_urls(c), seconds, faults=checker.clock_jumps(c, which, "checker", TTL_MS, log),
                   long_p=0.3)
        return Outcome(res, expect, len(log))


def clock_jumps_minority(seconds):
    """Not safe either: a lock held on a bare majority that includes a
    jumping node loses its majority when that node's key expires early
    (the summary counts overlaps by the earlier holder's yes votes)."""
    return _jumps(seconds, [0, 1], "limit")


def clock_jumps_majority(seconds):
    return _jumps(seconds, [0, 1, 2], "limit")


def negative_quorum_1(seconds):
    with h.Cluster(5) as c:
        return Outcome(_run(_urls(c), seconds, config={"unsafe_test_quorum": 1}), "broken", None)


def negative_disjoint_nodes(seconds):
    with h.Cluster(5) as c:
        urls = _urls(c)
        return Outcome(_run(urls, seconds, worker_nodes=[urls[:2], urls[2:]]), "broken", None)


# ---- real partitions (netns.py; needs root): hand-offs between processes ----

def handoff_partitions(seconds):
    """Issue 36: locks handed on with detach, adopt and a longer extend,
    auto-extended, while single (client, node) links flap and, at some
    hand-offs, the sender is cut from one node while its keeper extends
    and the receiver from another (checker_handoff.py). A late extend of
    the sender must not cut the receiver's lock back. Skipped without root."""
    res = checker_handoff.run(seconds)
    # holds of up to 1.5 s after a timed hand-off: 2-5 acquisitions a second
    return Outcome(res, "safe", res.handoffs, min_acquisitions=max(5, int(seconds)),
                   min_faults=max(3, int(seconds / 2)))


# ---- real partitions (netns.py; needs root) at chosen moments of a hold ----

def _partitions(phase, seconds):
    """Links of a worker cut when it is about to acquire, just after it
    acquired (a hold kept by auto-extension), about to extend (by itself
    or by its keeper) or about to release: a minority or a majority of
    its nodes, briefly, for longer than the TTL, or flapping
    (checker_partitions.py). Skipped without root."""
    res = checker_partitions.run(phase, seconds)
    # holds of 0.5-1.5 TTL when the fault is mid-hold: fewer acquisitions
    few = phase == "hold"
    return Outcome(res, "safe", res.faults,
                   min_acquisitions=max(5, int(seconds)) if few else max(10, int(2 * seconds)),
                   min_faults=max(3, int(seconds / 2)))


def partition_mid_acquire(seconds):
    return _partitions("acquire", seconds)


def partition_mid_hold(seconds):
    return _partitions("hold", seconds)


def partition_mid_extend(seconds):
    return _partitions("extend", seconds)


def partition_mid_release(seconds):
    return _partitions("release", seconds)


# ---- several names at once (checker_many.py): overlapping sets of names ----

def _many(urls, seconds, **kw):
    kw.setdefault("ttl_ms", TTL_MS)
    kw.setdefault("workers", WORKERS)
    return checker_many.run(urls, seconds=seconds, **kw)


def _user_loop(urls, step, pause_s):
    """A "fault" that is only another user of the same nodes: step(con)
    in a loop on its own connection, pause_s apart (pacing, not waiting for
    anything). A refused call is no finding here: the workers' lock is what
    is checked."""
    def run(stop, until):
        con = h.connect(urls)
        try:
            while not stop.is_set() and time.monotonic() < until:
                try:
                    step(con)
                except sqlite3.OperationalError:
                    pass
                stop.wait(pause_s)
        finally:
            con.close()
    return run


def _companion_user(urls, name, log):
    """Takes, extends and releases the lock `name` in a loop (logging each
    hold), with the default settings (name:holder is where its holder
    details went before they became the connection's: nothing may touch
    it now either)."""
    def step(con):
        if con.execute("SELECT redlock_acquire(?, ?)", (name, TTL_MS)).fetchone()[0]:
            con.execute("SELECT redlock_extend(?, ?)", (name, TTL_MS)).fetchone()
            con.execute("SELECT redlock_release(?)", (name,)).fetchone()
            log.append(name)
    return _user_loop(urls, step, 0.002)  # leaves the CPUs to the workers


def companion_names(seconds):
    """The workers contend for the name cx:holder while another user takes,
    extends and releases cx on the same nodes: nothing done to cx may
    overwrite, delete or re-time their lock."""
    with h.Cluster(5) as c:
        log = []
        res = _run(_urls(c), seconds, resource="cx:holder", faults=_companion_user(_urls(c), "cx", log))
        return Outcome(res, "safe", len(log))


def _counter_namer(urls, name, log):
    """A hostile user: takes the lock `name` now and then, reads its
    fencing number n and, while it still holds the lock (so no other
    holder moves the counter on meanwhile), names the fencing counter
    name:fence as a lock with n as its token, to release it and to re-time
    it to 1 ms; then gives the lock back. Were either done, the next
    holder's number would start again at 1."""
    def step(con):
        if con.execute("SELECT redlock_acquire(?, ?, 200)", (name, TTL_MS)).fetchone()[0]:
            n = str(con.execute("SELECT redlock_fence(?)", (name,)).fetchone()[0])
            for sql in ("SELECT redlock_release(?, ?)", "SELECT redlock_extend(?, 1, ?)"):
                try:
                    con.execute(sql, (name + ":fence", n)).fetchone()
                except sqlite3.OperationalError:
                    pass  # refused: what a safe engine does
            con.execute("SELECT redlock_release(?)", (name,)).fetchone()
            log.append(n)
    return _user_loop(urls, step, 0.01)


def fence_counter_named(seconds):
    """The workers contend for cf with fencing numbers while a hostile user
    names cf:fence as a lock with the counter's value as the token: the
    numbers must stay in order."""
    with h.Cluster(5) as c:
        log = []
        res = _run(_urls(c), seconds, resource="cf", faults=_counter_namer(_urls(c), "cf", log))
        return Outcome(res, "safe", len(log))


def many_clean(seconds):
    with h.Cluster(5) as c:
        return Outcome(_many(_urls(c), seconds), "safe", None)


def many_kills_and_pauses(seconds):
    """kill -9 (restarted after the TTL) of one node and SIGSTOP of another,
    each rotating, at once: never more than a minority."""
    with h.Cluster(5) as c:
        log = []

        def faults(stop, until):
            k = 0
            while not stop.is_set() and time.monotonic() + TTL_MS / 1000.0 * 1.25 + 0.1 < until:
                dead, hung = c[k % 5], c[(k + 2) % 5]
                dead.kill9()
                hung.stop()
                log.append(k)
                stop.wait(TTL_MS / 1000.0 * 1.25)    # restarted empty only after the TTL
                hung.cont()
                dead.restart()
                stop.wait(0.15)
                k += 1
        res = _many(_urls(c), seconds, faults=faults, config=FAST_RECONNECT)
        return Outcome(res, "safe", len(log))


def many_client_pauses(seconds):
    with h.Cluster(5) as c:
        res = _many(_urls(c), seconds, pause_p=0.1)
        return Outcome(res, "safe", res.paused)


def many_negative_quorum_1(seconds):
    with h.Cluster(5) as c:
        return Outcome(_many(_urls(c), seconds, config={"unsafe_test_quorum": 1}), "broken", None)


# ---- locks of a transaction (checker_xact.py): the COMMIT guard ----------

def xact_client_pauses(seconds):
    """Jobs of one transaction each, on one database file, some paused past
    their TTL right before COMMIT: no paused job's write may be committed."""
    with h.Cluster(5) as c:
        res = checker_xact.run(_urls(c), seconds=seconds, ttl_ms=TTL_MS)
        return Outcome(res, "safe", res.pauses, min_faults=1)


SCENARIOS = [
    ("clean", clean),
    ("kill -9 + restart of a minority after the TTL", kill9_restart_after_ttl),
    ("restart of a minority within the TTL, restart_guard on", restart_within_ttl_guarded),
    ("SIGSTOP/SIGCONT of a minority", sigstop_nodes),
    ("majority down (kill -9)", majority_down),
    ("majority hung (SIGSTOP)", majority_hung),
    ("clients paused past the TTL (SIGSTOP)", client_pauses),
    ("clients paused past the TTL, lock mostly free", client_pauses_idle),
    ("extends and auto-extension during kills and pauses", extends_during_faults),
    ("repeated acquires by one connection", repeated_acquires),
    ("node-list changes", node_list_changes),
    ("duplicates and a replica in the list", duplicates_and_replicas),
    ("delayed replies from a minority", delayed_replies),
    ("connection resets mid-command", connection_resets),
    ("slow client links (replies +60 ms)", slow_client_links),
    ("clock jumps on a minority (limit)", clock_jumps_minority),
    ("clock jumps on a majority (limit)", clock_jumps_majority),
    ("another user of cx while workers contend for cx:holder", companion_names),
    ("a user naming cf:fence as a lock with its value", fence_counter_named),
    ("hand-offs under flapping partial partitions (root)", handoff_partitions),
    ("links cut mid-acquire (root)", partition_mid_acquire),
    ("links cut mid-hold, auto-extended (root)", partition_mid_hold),
    ("links cut mid-extend, own and keeper's (root)", partition_mid_extend),
    ("links cut mid-release (root)", partition_mid_release),
    ("NEGATIVE: quorum 1", negative_quorum_1),
    ("NEGATIVE: disjoint node sets", negative_disjoint_nodes),
    ("acquire_many: overlapping sets, clean", many_clean),
    ("acquire_many: kill -9 and SIGSTOP of a minority", many_kills_and_pauses),
    ("acquire_many: clients paused past the TTL", many_client_pauses),
    ("NEGATIVE: acquire_many with quorum 1", many_negative_quorum_1),
    ("acquire_xact: jobs paused past the TTL before COMMIT", xact_client_pauses),
]

SHORT = {"majority_down": 2.0, "majority_hung": 2.0}


def key_of(fn):
    return fn.__name__


def run_one(label, fn, seconds):
    out = fn(min(seconds, SHORT.get(key_of(fn), seconds)))
    h.report(out.res.summary(key_of(fn)))
    if out.res.error_samples:
        h.report("checker %s samples: %r" % (key_of(fn), out.res.error_samples))
    return out


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=float(os.environ.get("CHECKER_SECONDS", 10)))
    ap.add_argument("--only", default="", help="comma-separated scenario names (function names)")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args(argv)
    if a.list:
        for label, fn in SCENARIOS:
            print("%-28s %s" % (key_of(fn), label))
        return 0
    only = [x for x in a.only.split(",") if x]
    rows, failed, extra = [], [], {}    # extra: a scenario kind's own table (head -> rows)
    t0 = time.monotonic()
    for label, fn in SCENARIOS:
        if only and key_of(fn) not in only:
            continue
        try:
            out = run_one(label, fn, a.seconds)
        except unittest.SkipTest as e:  # cannot run here (needs root): said, not failed
            print("SKIP %s: %s" % (key_of(fn), e), flush=True)
            rows.append("| %s | skipped | - | - | - | - | %s" % (label, e))
            continue
        except Exception as e:          # a worker that crashed or hung: a finding too
            failed.append("%s: the run failed: %s" % (key_of(fn), str(e).strip()[-300:]))
            rows.append("| %s | - | - | - | - | - | **FAILED**" % label)
            h.terminate_all()
            continue
        problems = out.problems()
        if problems:
            failed.append("%s: %s" % (key_of(fn), "; ".join(problems)))
        r = out.res
        if hasattr(r, "table_row"):
            head = getattr(r, "TABLE_HEAD", checker_handoff.TABLE_HEAD)
            extra.setdefault(head, []).append(r.table_row(label) + ("" if not problems else " **MISSED**"))
        rows.append("| %s | %s | %d | %d | %d | %d |%s"
                    % (label, out.expect, r.acquisitions, r.violations, r.fences_checked,
                       r.stale_rejected, "" if not problems else " **MISSED**"))
        h.terminate_all()
    print()
    print("| fault | expected | acquisitions | violations | fences checked | stale writes rejected |")
    print("|---|---|---|---|---|---|")
    for line in rows:
        print(line)
    for head, lines in extra.items():
        print()
        print(head)
        for line in lines:
            print(line)
    print("\n%d scenarios in %.0f s, %d missed their expectation" % (len(rows), time.monotonic() - t0, len(failed)))
    for f in failed:
        print("MISSED " + f)
    return 1 if failed or not rows else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
