#!/usr/bin/python3
"""The partition checker: real partitions (netns.py) taken down and up at
chosen moments of a lock's life, mid-acquire, mid-hold, mid-extend (with
and without auto-extension) and mid-release.

Three redis-server nodes and K workers (checker_partitions_worker.py),
each worker in a network namespace of its own with its own link to each
node. The workers contend for one lock, as checker.py's do (marker file,
fenced writes, counter, validity intervals). At the moment its phase
names, a worker asks this process's controller (the fault thread) to cut
its own links, in turn:

    minority brief    1 of the 3 nodes, 30 ms to half the TTL
    majority brief    2 of the 3, as long
    minority long     1 node, 1.2 to 3 TTLs (past a stalled connection's
                      keep time, max(1 s, TTL), at the long end)
    majority long     2 nodes, as long: the holder must lose its lock
    minority flap     1 node down and up every 20-80 ms for 1 to 2 TTLs
    majority flap     2 nodes, the same

Packets vanish while a link is down (no RST); what waited in the send
queues is delivered when it comes up. The controller heals every link at
the end of the run.

What must hold, and what the table shows per scenario:

- violations 0: checker.py's (overlapping validity intervals, lost
  updates, marker overlaps, fencing order, stale writes accepted), a
  holder that did not see its lock lost after a majority cut longer than
  the TTL, and "unbacked" answers (the engine said the lock is ours while
  fewer than a majority of the nodes held the token: a reply taken for
  another command's, as on a connection reused across a cut);
- every call returned within its bound while packets vanished (the
  longest call per kind is kept against it: timeout_ms, plus wait_ms for
  an acquire, plus one timeout_ms more with auto-extension, whose round
  may hold the connection first), within CALL_SLACK_S on a loaded host;
- no lock key left: the nodes are scanned after the workers have exited
  and the links healed; a key of the lock still there after
  KEYS_GRACE_S (past every TTL) is one left behind.

    /usr/bin/python3 sql-tests/checker_partitions.py PHASE [--seconds S] [--workers K]

PHASE is acquire, hold, extend or release. checker_matrix.py runs the four
as partition_mid_* (`make checker`); test_partitions.py has short
deterministic forms (`make test`). Needs root (netns.py): run() raises
unittest.SkipTest otherwise.
"""
# SPDX-License-Identifier: BSD-3-Clause

import argparse
import json
import os
import random
import select
import subprocess
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import checker                      # noqa: E402
import fence_store                  # noqa: E402
import netns                        # noqa: E402

WORKER = os.path.join(HERE, "checker_partitions_worker.py")
PHASES = ("acquire", "hold", "extend", "release")
RESOURCE = "partition"
TTL_MS = 400
TIMEOUT_MS = 100
WAIT_MS = 200
CONFIG = {"timeout_ms": TIMEOUT_MS, "retry_delay_ms": 20, "retry_jitter_ms": 10,
          "reconnect_min_ms": 20, "reconnect_max_ms": 100}
CALL_SLACK_S = 0.5       # beyond its bound, a call fails the run (a loaded 2-core host)
KEYS_GRACE_S = 1.5       # longer than any TTL of the run, and than a heal's retransmissions


class Controller:
    """The fault thread: cuts a worker's links when it asks, heals them on
    schedule (flapping ones down and up in between), and everything at the
    end of the run."""

    def __init__(self, net, sock, ttl_ms, seed=None):
        self.net, self.sock, self.ttl = net, sock, ttl_ms / 1000.0
        self.rng = random.Random(seed)
        self.events = []         # (time, "cut" or "heal", worker, nodes, the fault's last?)
        self.busy = set()        # workers with a fault under way (until its last event is made)
        self.made = {}           # "size length" -> [count, longest seconds]
        self.cut_latency = 0.0   # the longest a cut took to be made (the `ip` commands)
        self.until = None

    def schedule(self, now, length):
        """[(offset, down?)] for one fault, and its total length."""
        if length == "brief":
            d = self.rng.uniform(0.03, max(0.04, self.ttl / 2))
            return [(d, False)], d
        if length == "long":
            d = self.rng.uniform(1.2, 3.0) * self.ttl
            return [(d, False)], d
        span, t, steps, down = self.rng.uniform(1.0, 2.0) * self.ttl, 0.0, [], True
        while t < span:
            t += self.rng.uniform(0.02, 0.08)
            down = not down
            steps.append((t, down))
        if steps[-1][1]:
            t += self.rng.uniform(0.02, 0.08)
            steps.append((t, False))
        return steps, t

    def apply_due(self):
        """Makes the cuts and heals that are due."""
        now = time.monotonic()
        while self.events and self.events[0][0] <= now:
            _, what, i, nodes, last = self.events.pop(0)
            (self.net.cut if what == "cut" else self.net.heal)(i, nodes)
            if last:
                self.busy.discard(i)

    def cut(self, req):
        self.apply_due()        # an earlier fault's heal due now must not land on this one
        i, now = req["worker"], time.monotonic()
        if i in self.busy or now >= self.until - 0.05:
            return {}
        k = 1 if req["size"] == "minority" else 2
        nodes = sorted(self.rng.sample(range(len(self.net.nodes)), k))
        steps, total = self.schedule(now, req["length"])
        self.net.cut(i, nodes)
        # the links are down from here (`ip` takes a while on a loaded
        # host): the fault's length and its heal count from this moment
        t = time.monotonic()
        self.cut_latency = max(self.cut_latency, t - now)
        now = t
        for k, (off, down) in enumerate(steps):
            self.events.append((now + off, "cut" if down else "heal", i, nodes, k == len(steps) - 1))
        self.events.sort(key=lambda e: e[0])
        self.busy.add(i)
        key = "%s %s" % (req["size"], req["length"])
        m = self.made.setdefault(key, [0, 0.0])
        m[0] += 1
        m[1] = max(m[1], total)
        return {"nodes": nodes, "made_at": now, "heal_at": now + total, "seconds": total}

    def __call__(self, stop, until):
        self.until = until
        net = self.net
        while not stop.is_set():
            self.apply_due()
            now = time.monotonic()
            if now >= until and net.down:
                self.events.clear()
                self.busy.clear()
                net.heal()
            wake = self.events[0][0] if self.events else now + 0.05
            r, _, _ = select.select([self.sock], [], [], max(0.0, min(wake - time.monotonic(), 0.05)))
            if r:
                req = json.loads(self.sock.recv(65536))
                answer = self.cut(req) if req.get("op") == "cut" else {}
                try:
                    self.sock.sendto(json.dumps(answer).encode(), req["reply"])
                except OSError:
                    pass            # the worker is gone
        self.events.clear()
        net.heal()


def lock_keys(net, resource):
    """{node index: [(key, PTTL)]} of the lock's keys (its fencing counter
    excepted, which lives for days by design)."""
    out = {}
    for n in net.nodes:
        keys = [k for k in n.cmd("KEYS", resource + "*") if not k.endswith(":fence")]
        if keys:
            out[n.index] = [(k, n.cmd("PTTL", k)) for k in sorted(keys)]
    return out


class PartitionResult(checker.Result):
    TABLE_HEAD = ("| fault | cuts | acquisitions | violations | longest call (its bound) | keys left |\n"
                  "|---|---|---|---|---|---|")

    def __init__(self, phase, reports, counter, seconds, log, made, keys_at_exit, keys_left, cut_latency=0.0):
        super().__init__(reports, counter, seconds, log)
        self.phase = phase
        self.unbacked = sum(r.get("unbacked", 0) for r in reports)
        self.backed_checks = sum(r.get("backed_checks", 0) for r in reports)
        self.cut_holds = sum(r.get("cut_holds", 0) for r in reports)
        self.out_of_step = sum(r.get("out_of_step", 0) for r in reports)
        self.violations += self.unbacked + self.out_of_step
        self.made, self.cut_latency = made, cut_latency
        self.faults = sum(m[0] for m in made.values())
        self.keys_at_exit, self.keys_left = keys_at_exit, keys_left
        # per kind: the call furthest beyond its bound (seconds, bound)
        self.calls = {}
        for r in reports:
            for kind, (took, bound) in r.get("calls", {}).items():
                top = self.calls.get(kind)
                if top is None or took - bound > top[0] - top[1]:
                    self.calls[kind] = (took, bound)
        self.longest = max(((k, t, b) for k, (t, b) in self.calls.items()), key=lambda x: x[1] - x[2],
                           default=("-", 0.0, 0.0))

    def longest_text(self):
        kind, took, bound = self.longest
        return "%s %.0f ms (bound %.0f ms)" % (kind, took * 1000, bound * 1000)

    def calls_text(self):
        return ", ".join("%s %.0f/%.0f" % (k, t * 1000, b * 1000) for k, (t, b) in sorted(self.calls.items()))

    def over_bound(self):
        _, took, bound = self.longest
        return took - bound > CALL_SLACK_S

    def keys_left_count(self):
        return sum(len(v) for v in self.keys_left.values())

    def faults_text(self):
        return ", ".join("%s %d" % (k, self.made[k][0]) for k in sorted(self.made))

    def summary(self, label):
        return (super().summary(label) +
                " unbacked=%d out_of_step=%d backed_checks=%d faults=%d (%s) holds_through_a_long_majority_cut=%d calls_ms=%s "
                "cut_made_within_ms=%.0f keys_at_exit=%r keys_left=%r"
                % (self.unbacked, self.out_of_step, self.backed_checks, self.faults, self.faults_text().replace(" ", "_"),
                   self.cut_holds, self.calls_text().replace(" ", "_"), self.cut_latency * 1000, self.keys_at_exit,
                   self.keys_left))

    def table_row(self, label):
        return "| %s | %d | %d | %d | %s | %d |" % (label, self.faults, self.acquisitions, self.violations,
                                                    self.longest_text(), self.keys_left_count())


def run(phase, seconds=10.0, workers=4, ttl_ms=TTL_MS, fault_p=None, seed=None):
    """One run with faults at `phase`, at fault_p of the cycles (default:
    every hold for "hold", where only the holder meets its moment, else
    0.6); returns a PartitionResult. unittest.SkipTest without root."""
    if phase not in PHASES:
        raise ValueError("phase: one of %s" % ", ".join(PHASES))
    if fault_p is None:
        fault_p = 1.0 if phase == "hold" else 0.6
    netns.require()
    d, counter, marker, fence_db, ctl, ctl_path = checker.scratch("redlock-partitions-")
    procs, stop, threads = [], threading.Event(), []
    try:
        with netns.Net(nodes=3, clients=workers) as net:
            for i in range(workers):
                # half the workers extend with the keeper, half by themselves
                config = dict(CONFIG, auto_extend=1 if phase == "hold" or i % 2 == 0 else 0)
                spec = {"name": "w%d" % i, "index": i, "nodes": net.nodes_env(i), "ext": checker.EXT,
                        "config": config, "resource": RESOURCE, "ttl_ms": ttl_ms, "wait_ms": WAIT_MS,
                        "hold_ms": [5, ttl_ms * 0.5], "counter": counter, "marker": marker,
                        "fence_db": fence_db, "mailbox": os.path.join(d, "w%d" % i), "control": ctl_path,
                        "node_sockets": [n.sock for n in net.nodes], "phase": phase, "fault_p": fault_p,
                        "think_ms": [0, 20]}
                procs.append(subprocess.Popen(net.client_argv(i, [checker.PYTHON, WORKER, json.dumps(spec)]),
                                              cwd=HERE, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                              stderr=subprocess.PIPE, text=True))
            start_at, until = checker.start_workers(procs, seconds, "partition worker")
            control = Controller(net, ctl, ttl_ms, seed=seed)
            reports = checker.await_workers(procs, threads, control, stop, start_at, until,
                                            4 * ttl_ms + WAIT_MS, "partition worker")
            net.heal()
            keys_at_exit = lock_keys(net, RESOURCE)
            time.sleep(KEYS_GRACE_S)
            keys_left = lock_keys(net, RESOURCE)
            with open(counter) as f:
                final = int(f.read().strip())
            return PartitionResult(phase, reports, final, seconds, fence_store.read_log(fence_db),
                                   control.made, keys_at_exit, keys_left, control.cut_latency)
    finally:
        ctl.close()
        checker.end_run(stop, procs, d)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("phase", choices=PHASES)
    ap.add_argument("--seconds", type=float, default=float(os.environ.get("CHECKER_SECONDS", 10)))
    ap.add_argument("--workers", type=int, default=4)
    a = ap.parse_args(argv)
    try:
        res = run(a.phase, a.seconds, a.workers)
    except unittest.SkipTest as e:
        print("SKIP checker_partitions: %s" % e)
        return 0
    print(res.summary("partition_mid_" + a.phase))
    if res.error_samples:
        print("samples: %r" % res.error_samples)
    print()
    print(PartitionResult.TABLE_HEAD)
    print(res.table_row("mid-" + a.phase))
    return 1 if res.violations or res.over_bound() or res.keys_left_count() else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
