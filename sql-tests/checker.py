#!/usr/bin/python3
"""A mutual-exclusion checker for redlock, after Jepsen's lock tests.

K worker processes (checker_worker.py), each with its own connection and
the extension loaded, loop for a few seconds: take one lock (with wait_ms),
and while holding it create an exclusive marker file (O_EXCL), do a
deliberately non-atomic read-sleep-write of a shared counter file, and
write with the lock's fencing number to a protected resource that checks
fencing numbers (fence_store.py). Each hold lasts a random part of the
validity the engine reported, sometimes nearly all of it; some are
extended, re-entered, or paused with SIGSTOP past the TTL. Meanwhile the
caller may inject faults into the nodes. The checker then counts:

* acquisitions: holds the workers report;
* interval overlaps: two holds overlap in time. A hold is the interval
  from the moment its acquire returned to that moment plus the validity
  the engine reported (or to the release, if sooner), on CLOCK_MONOTONIC,
  which all processes of the machine share. It is a subset of the lock's
  real life on a correct engine, so an overlap is a true violation;
* lost updates: completed increments - final counter;
* overlaps: a worker found the marker already there;
* fence order: a hold whose fencing number is not larger than that of
  every hold that started before it (fences checked: holds with a number);
* stale writes accepted: the resource took an older hold's write after a
  newer hold had written (stale writes rejected are counted, not errors);
* losses unseen: a worker paused past its TTL found its lock still valid.

violations = the sum of these; a correct lock gives 0 where the README
promises safety. A run can only be trusted if a broken lock run the same
way (negative control) reports violations: see test_checker.py and
mutants.py.

Library use (from the sql-tests directory)::

    import checker
    res = checker.run(["redis://127.0.0.1:7001", ...], workers=6, seconds=3,
                      faults=lambda stop, until: ...)
    print(res.summary("clean")); assert res.violations == 0

Command line, against running nodes::

    /usr/bin/python3 sql-tests/checker.py redis://127.0.0.1:7001,redis://... [workers] [seconds]
"""
# SPDX-License-Identifier: BSD-3-Clause

import json
import os
import random
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import fence_store

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PYTHON = "/usr/bin/python3"
WORKER = os.path.join(HERE, "checker_worker.py")
EXT = os.path.abspath(os.environ.get("REDLOCK_EXT") or os.path.join(REPO, "redlock"))  # workers run elsewhere

# How a hold is spent, unless a run says otherwise: mostly short, some for a
# random part of the validity, some for nearly all of it.
HOLD_MIX = {"hold_ms": [1, 8], "long_p": 0.12, "nearly_all_p": 0.06}


NO_VIOLATION_FOUND = "negative control found no violation"


def run_long_enough(attempt, seconds):
    """attempt(seconds) runs a scenario and returns (problems, result). When
    its only problem is too few acquisitions ("only N acquisitions": a host
    starved of CPU, a sanitizer build beside another test module), or a
    negative control that has not met its violation yet (a broken lock
    shows only when the races fall its way: 58 acquisitions in a loaded
    1.5 s run found none once), it runs once more, three times as long. Any
    other problem, a violation above all, is returned at once: safety is
    never retried."""
    problems, res = attempt(seconds)
    if problems and all((p.startswith("only ") and p.endswith(" acquisitions")) or p.startswith(NO_VIOLATION_FOUND)
                        for p in problems):
        problems, res = attempt(seconds * 3)
    return problems, res


def scratch(prefix):
    """The scratch of a run whose workers get orders over a datagram socket
    (the partition checkers): a new directory d, the shared counter (holding
    0), the marker's path, a new fence store, and the controller's socket
    bound at d/control. Returns (d, counter, marker, fence_db, ctl,
    ctl_path); the caller closes ctl and removes d."""
    d = tempfile.mkdtemp(prefix=prefix)
    counter, marker, fence_db = (os.path.join(d, x) for x in ("counter", "marker", "fences.db"))
    fence_store.Store.create(fence_db)
    with open(counter, "w") as f:
        f.write("0\n")
    ctl_path = os.path.join(d, "control")
    ctl = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    ctl.bind(ctl_path)
    return d, counter, marker, fence_db, ctl, ctl_path


def start_workers(procs, seconds, what, timeout=60.0):
    """Waits until every worker said "ready" (checker_worker.await_start:
    its connection is open), then sends all of them one start, a moment
    from now, and the end of the run: returns (start_at, until). Loading
    took over 2 s under the sanitizers, past a start fixed beforehand."""
    deadline = time.monotonic() + timeout
    for p in procs:
        r, _, _ = select.select([p.stdout], [], [], max(0.0, deadline - time.monotonic()))
        line = p.stdout.readline() if r else ""
        if line.strip() != "ready":
            for q in procs:
                q.kill()
            err = p.stderr.read() if p.poll() is not None else "(no answer within %.0f s)" % timeout
            raise AssertionError("%s did not get ready: %r %s" % (what, line, err.strip()[-2000:]))
    start_at = time.monotonic() + 0.05
    until = start_at + seconds
    for p in procs:
        p.stdin.write("%.6f %.6f\n" % (start_at, until))
        p.stdin.flush()
    return start_at, until


def await_workers(procs, threads, faults, stop, start_at, until, wait_ms, what):
    """Runs faults(stop, until) in a thread from start_at (when faults is
    given), reads each worker's report (the last line it prints, JSON), then
    stops and joins every thread (the caller's pause threads too). Raises
    AssertionError when a worker fails or outlives the run, or the fault
    injection raised. Shared by the checkers of every lock kind."""
    fault_error = []
    if faults:
        def fault_main():
            try:
                now = time.monotonic()
                if start_at > now:
                    time.sleep(start_at - now)
                faults(stop, until)
            except BaseException as e:          # reported after the run
                fault_error.append(e)
        t = threading.Thread(target=fault_main, daemon=True)
        t.start()
        threads.append(t)
    reports = []
    limit = until + wait_ms / 1000.0 + 30
    for p in procs:
        try:
            out, err = p.communicate(timeout=max(1.0, limit - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise AssertionError("%s did not finish in time" % what)
        if p.returncode != 0 or not out.strip():
            raise AssertionError("%s failed (exit %s): %s" % (what, p.returncode, err.strip()[-2000:]))
        reports.append(json.loads(out.strip().splitlines()[-1]))
    stop.set()
    for t in threads:
        t.join(30)
    if fault_error:
        raise AssertionError("fault injection failed: %r" % (fault_error[0],))
    return reports


def end_run(stop, procs, d):
    """The end of every checker run, however it ended: stops the fault and
    pause threads, kills each worker still running (sent SIGCONT first, in
    case a fault left it stopped) and removes the run's folder."""
    stop.set()
    for p in procs:
        if p.poll() is None:
            try:
                os.kill(p.pid, signal.SIGCONT)
            except OSError:
                pass
            p.kill()
            p.wait()
    shutil.rmtree(d, ignore_errors=True)


def run_scenarios(argv, scenarios, problems, columns, cells):
    """The main of a checker of scenarios: argv is [seconds [names]] (names
    comma-separated; the default CHECKER_SECONDS, every scenario). Runs each
    (label, fn) of scenarios, fn(seconds) giving (result, expectation,
    faults done), judges it with problems(result, expectation, faults done),
    then prints a table of columns with a row of cells(result) each, and
    the misses. Returns the exit status: 1 when one missed."""
    import harness as h
    seconds = float(argv[0]) if argv else float(os.environ.get("CHECKER_SECONDS", 10))
    only = [x for x in argv[1].split(",") if x] if len(argv) > 1 else []
    rows, failed = [], []
    for label, fn in scenarios:
        if only and fn.__name__ not in only:
            continue
        res, expect, done = fn(seconds)
        h.report(res.summary(fn.__name__))
        p = problems(res, expect, done)
        if p:
            failed.append("%s: %s" % (fn.__name__, "; ".join(p)))
        rows.append("| %s | %s | %s |%s" % (label, expect, " | ".join(cells(res)), " **MISSED**" if p else ""))
        h.terminate_all()
    print()
    print("| scenario | expected | %s |" % " | ".join(columns))
    print("|---|---|" + "---|" * len(columns))
    for r in rows:
        print(r)
    for f in failed:
        print("MISSED " + f)
    return 1 if failed else 0

def _interval_overlaps(holds):
    """Consecutive holds (by start) whose intervals intersect, as pairs
    (the hold that was still running, the one that started within it)."""
    pairs, last = [], None
    for h in sorted(holds, key=lambda h: h["start"]):
        if last is not None and h["start"] < last["end"]:
            pairs.append((last, h))
        if last is None or h["end"] > last["end"]:
            last = h
    return pairs


def _chain(h):
    """The lock a hold belongs to: a lock handed on with detach and adopt
    (checker_handoff.py) is one chain of holds with one fencing number,
    named by the chain's first hold; any other hold is a chain of its own."""
    return h.get("chain", h["id"])


def _fence_disorder(holds):
    """Holds with a fencing number not larger than that of every hold that
    came before it: one whose acquire returned before this hold's acquire
    was called ("asked"; its return where a worker does not record it), or
    that ended before this hold's acquire returned. Two holds whose
    acquires were in flight at once and whose holds overlap are concurrent:
    mutual exclusion was already broken for them (a limit scenario, or a
    violation counted by the interval sweep), each attempt's counter went
    up on a quorum of its own, and their numbers may land in either order.
    A later hold of the same chain carries the same number."""
    n = 0
    fenced = sorted((h for h in holds if h["fence"] > 0), key=lambda h: h["start"])
    for i, h in enumerate(fenced):
        asked = h.get("asked", h["start"])
        for g in fenced[:i]:
            if g["start"] > asked and g.get("end", g["lease_end"]) > h["start"]:
                continue              # concurrent with h
            if g["fence"] > h["fence"] or (g["fence"] == h["fence"] and _chain(g) != _chain(h)):
                n += 1
                break
    return n, len(fenced)


def _stale_accepted(log, holds):
    """Writes of an older hold the store accepted after a newer hold wrote
    (a chain of holds writes under the chain's name and starts with its
    first hold)."""
    start = {}
    for h in holds:
        c = _chain(h)
        start[c] = min(start.get(c, h["start"]), h["start"])
    n, newest = 0, None
    for fence, hold, kind, accepted in log:
        if not accepted or hold not in start:
            continue
        if newest is not None and start[hold] < newest:
            n += 1
        newest = start[hold] if newest is None else max(newest, start[hold])
    return n


class Result:
    def __init__(self, reports, counter, seconds, log, pauses=0):
        self.reports = reports
        self.seconds = seconds
        self.workers = len(reports)
        self.counter = counter

        def total(key):
            return sum(r.get(key, 0) for r in reports)
        for key in ("acquisitions", "completed", "overlaps", "nulls", "errors", "release_not_1",
                    "extends", "extensions", "extends_lost", "reentries", "reentry_wrong", "paused",
                    "loss_seen", "loss_unseen", "abandoned", "late_writes", "node_changes",
                    "node_changes_refused", "zero_validity"):
            setattr(self, key, total(key))
        self.pauses = pauses
        self.error_samples = [e for r in reports for e in r["error_samples"]][:6]
        self.finished_late_ms = max(r.get("finished_late_ms", 0) for r in reports)
        self.holds = [h for r in reports for h in r["holds"]]
        self.lost_updates = self.completed - counter
        pairs = _interval_overlaps(self.holds)
        self.interval_overlaps = len(pairs)
        # overlaps where the earlier holder had no more yes votes than a bare
        # majority of its node list: one node losing its key early is enough
        self.overlap_yes = sorted(a["yes"] for a, _ in pairs)
        self.fence_disorder, self.fences_checked = _fence_disorder(self.holds)
        self.stale_accepted = _stale_accepted(log, self.holds)
        self.stale_rejected = sum(1 for e in log if not e[3])
        self.violations = (self.lost_updates + self.overlaps + self.interval_overlaps +
                           self.fence_disorder + self.stale_accepted + self.loss_unseen)

    def summary(self, label):
        return ("checker %-24s workers=%d seconds=%.1f acquisitions=%d violations=%d "
                "(interval_overlaps=%d lost_updates=%d overlaps=%d fence_disorder=%d "
                "stale_accepted=%d loss_unseen=%d) fences_checked=%d stale_rejected=%d "
                "paused=%d loss_seen=%d extends=%d extensions=%d reentries=%d node_changes=%d/%d refused "
                "nulls=%d errors=%d abandoned=%d late_writes=%d release_not_1=%d "
                "zero_validity=%d finished_late_ms=%d"
                % (label, self.workers, self.seconds, self.acquisitions, self.violations,
                   self.interval_overlaps, self.lost_updates, self.overlaps, self.fence_disorder,
                   self.stale_accepted, self.loss_unseen, self.fences_checked,
                   self.stale_rejected, self.paused, self.loss_seen, self.extends, self.extensions,
                   self.reentries, self.node_changes, self.node_changes_refused, self.nulls,
                   self.errors, self.abandoned, self.late_writes, self.release_not_1,
                   self.zero_validity, self.finished_late_ms)
                + (" overlaps_by_yes_votes_of_the_earlier_holder=%s" % self.overlaps_by_yes()
                   if self.overlap_yes else ""))

    def overlaps_by_yes(self):
        """{yes votes the earlier holder had: overlaps}, e.g. {3: 30, 5: 1}."""
        out = {}
        for y in self.overlap_yes:
            out[y] = out.get(y, 0) + 1
        return out

    def row(self, label):
        """One line of the README's table."""
        return "| %s | %d | %d | %d |" % (label, self.acquisitions, self.violations, self.fences_checked)


def _proc_state(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def _resume_paused(procs, pause_s, stop, counter):
    """A worker that stopped itself (SIGSTOP) is resumed pause_s later."""
    seen = {}
    while not stop.is_set() or seen:
        now = time.monotonic()
        for p in procs:
            if p.poll() is not None:
                seen.pop(p.pid, None)
                continue
            if _proc_state(p.pid) == "T":
                t = seen.setdefault(p.pid, now)
                if now - t >= pause_s:
                    os.kill(p.pid, signal.SIGCONT)
                    del seen[p.pid]
                    counter.append(now - t)
            else:
                seen.pop(p.pid, None)
        time.sleep(0.005)


def run(nodes, workers=6, seconds=3.0, resource="checker", ttl_ms=1000, wait_ms=1500,
        config=None, faults=None, worker_nodes=None, worker_extra=None, **behaviour):
    """Runs one checker round and returns a Result.

    nodes: list of redis:// URLs every worker uses; worker_nodes: optional
    list of URL lists instead, used in turn by the workers (for a
    split-brain control). config: redlock_config settings for every worker.
    worker_extra: optional list of dicts merged into the spec of the
    workers in turn. behaviour: spec entries for every worker (see
    checker_worker.py): hold_ms, long_p, nearly_all_p, pause_p, extend_p,
    long_hold, long_hold_p, reenter_p, churn_p, fresh_conn_every, think_ms,
    pause_checks; HOLD_MIX
    by default. faults: optional callable(stop_event, until) run in a
    thread during the run; it should return when stop_event is set (and
    leave the nodes usable)."""
    d = tempfile.mkdtemp(prefix="redlock-checker-")
    counter = os.path.join(d, "counter")
    marker = os.path.join(d, "marker")
    fence_db = os.path.join(d, "fences.db")
    fence_store.Store.create(fence_db)
    with open(counter, "w") as f:
        f.write("0\n")
    procs = []
    stop = threading.Event()
    threads = []
    pauses = []
    try:
        for i in range(workers):
            urls = worker_nodes[i % len(worker_nodes)] if worker_nodes else nodes
            spec = dict(HOLD_MIX)
            spec.update(behaviour)
            spec.update({"name": "w%d" % i, "nodes": ",".join(urls), "ext": EXT,
                         "config": config or {}, "resource": resource, "ttl_ms": ttl_ms,
                         "wait_ms": wait_ms, "counter": counter, "marker": marker,
                         "fence_db": fence_db})
            if worker_extra:
                spec.update(worker_extra[i % len(worker_extra)])
            procs.append(subprocess.Popen([PYTHON, WORKER, json.dumps(spec)], cwd=HERE, stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        start_at, until = start_workers(procs, seconds, "checker worker")
        if behaviour.get("pause_p") or any(e.get("pause_p") for e in worker_extra or ()):
            t = threading.Thread(target=_resume_paused, daemon=True,
                                 args=(procs, ttl_ms / 1000.0 * 1.5, stop, pauses))
            t.start()
            threads.append(t)
        reports = await_workers(procs, threads, faults, stop, start_at, until, wait_ms, "checker worker")
        with open(counter) as f:
            final = int(f.read().strip())
        return Result(reports, final, seconds, fence_store.read_log(fence_db), len(pauses))
    finally:
        end_run(stop, procs, d)


# ---------------------------------------------------------------------------
# Faults: each returns a callable(stop, until) for run(faults=...), and logs
# what it did into `log` so a test can check the fault really happened.
# ---------------------------------------------------------------------------

def rotating_minorities(n, size):
    """Groups of `size` nodes out of n, in turn: (0,1), (2,3), (4,0), ..."""
    i = 0
    while True:
        yield [(i + k) % n for k in range(size)]
        i += size


def _rotate(n, size, bad_s, gap_s, log, on, off):
    """on(i) for a rotating group of `size` of n nodes, off(i) bad_s later,
    gap_s of calm, the next group; each group is logged."""
    def faults(stop, until):
        for group in rotating_minorities(n, size):
            if stop.is_set() or time.monotonic() + bad_s + 0.1 > until:
                return
            for i in group:
                on(i)
            log.append(group)
            stop.wait(bad_s)
            for i in group:
                off(i)
            stop.wait(gap_s)
    return faults


def kill_restart(cluster, ttl_ms, log, size=2, down_s=None, gap_s=0.15):
    """kill -9 a rotating minority and restart it (without persistence)
    after down_s (default: after the TTL)."""
    down_s = ttl_ms / 1000.0 * 1.25 if down_s is None else down_s
    return _rotate(len(cluster), size, down_s, gap_s, log,
                   lambda i: cluster[i].kill9(), lambda i: cluster[i].restart())


def stop_cont(cluster, log, size=2, hung_s=0.5, gap_s=0.1):
    """SIGSTOP a rotating group of nodes, SIGCONT it hung_s later."""
    return _rotate(len(cluster), size, hung_s, gap_s, log,
                   lambda i: cluster[i].stop(), lambda i: cluster[i].cont())


def proxy_mode(proxies, log, apply, size=2, bad_s=0.5, gap_s=0.1):
    """apply(proxy) on a rotating group of proxies, back to pass bad_s later."""
    return _rotate(len(proxies), size, bad_s, gap_s, log,
                   lambda i: apply(proxies[i]), lambda i: proxies[i].pass_())


def resets(proxies, log, max_size=3, seed=None):
    """Every 30-120 ms, RST every connection of 1..max_size random nodes
    (a majority sometimes) for 5-30 ms: resets land in the middle of
    commands and replies."""
    rng = random.Random(seed)

    def faults(stop, until):
        while not stop.is_set() and time.monotonic() < until:
            group = rng.sample(range(len(proxies)), rng.randint(1, max_size))
            for i in group:
                proxies[i].reset()
            log.append(group)
            stop.wait(rng.uniform(0.005, 0.03))
            for i in group:
                proxies[i].pass_()
            stop.wait(rng.uniform(0.03, 0.12))
    return faults


# A forward clock jump of `jump` ms on a node takes that much off the
# remaining life of every key there (a node whose clock runs fast does the
# same, gradually). One atomic script per jump, on the lock key only: the
# fencing counter lives for days, a jump of a TTL does not touch it.
JUMP_SCRIPT = ("local t = redis.call('pttl', KEYS[1]) "
               "if t > 0 then if t <= tonumber(ARGV[1]) then redis.call('del', KEYS[1]) return 2 end "
               "redis.call('pexpire', KEYS[1], t - tonumber(ARGV[1])) return 1 end return 0")


def clock_jumps(cluster, which, key, ttl_ms, log, seed=None):
    """At random moments (every 10-60 ms), each node in `which` jumps its
    clock forward by 30-100 % of the TTL; log gets one entry per jump that
    shortened or expired a live lock key."""
    rng = random.Random(seed)

    def faults(stop, until):
        while not stop.is_set() and time.monotonic() < until:
            for i in which:
                try:
                    r = cluster[i].cmd("EVAL", JUMP_SCRIPT, 1, key,
                                       int(ttl_ms * rng.uniform(0.3, 1.0)))
                except (OSError, ConnectionError):
                    continue
                if r:
                    log.append(i)
            stop.wait(rng.uniform(0.01, 0.06))
    return faults


def combine(*fault_fns):
    """Runs several fault callables at once; the first failure is raised."""
    def faults(stop, until):
        errors = []

        def one(f):
            try:
                f(stop, until)
            except BaseException as e:
                errors.append(e)
        ts = [threading.Thread(target=one, args=(f,), daemon=True) for f in fault_fns]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if errors:
            raise errors[0]
    return faults


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    urls = argv[1].split(",")
    workers = int(argv[2]) if len(argv) > 2 else 6
    seconds = float(argv[3]) if len(argv) > 3 else 3.0
    res = run(urls, workers, seconds)
    print(res.summary("cli"))
    return 1 if res.violations else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
