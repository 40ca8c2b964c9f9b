#!/usr/bin/python3
"""The hand-off checker: locks handed between processes (redlock_detach,
redlock_adopt, a longer redlock_extend) under flapping partial partitions,
with auto-extension on (issue 36).

Three redis-server nodes and K workers (checker_handoff_worker.py), each
worker in a network namespace of its own with its own link to each node
(netns.py). The workers contend for one lock; a holder releases it or
hands it to another worker, which adopts it and extends it longer.
Meanwhile this process's controller (the fault thread):

- flaps single (client, node) links: every 150-400 ms one link that is up
  goes down for 30-300 ms (packets vanish, nothing is reset);
- times the cuts of a hand-off ("timed" in the table) when the sender
  asks and every node holds its token: the sender is cut from node x while
  its keeper's next extend goes out (decided by the two others, its copy
  to x left in the sender's send queue), the receiver from node y; the
  receiver adopts, extends to long_ms, and has the sender's link healed,
  so that the old extend reaches x; the receiver's link heals 3 TTLs later
  (y's copy has expired by then, so the receiver's queued extend finds
  nothing there). Once x and y let the key expire, any other worker can
  take the lock while the receiver counts on long_ms: the hole, unless an
  extend never shortens a lock.

The holds, fenced writes and counter are checked as checker.py does
(checker.Result): a chain of holds of one lock is one fencing number.
The table gives hand-offs, partitions (links taken down), violations and
the call furthest beyond its bound (timeout_ms; wait_ms more for an
acquire).

    /usr/bin/python3 sql-tests/checker_handoff.py [--seconds S] [--workers K] [--verbose]

checker_matrix.py runs it as handoff_partitions (`make checker`); its
short deterministic form is test_partitions.py (`make test`). Needs root
(netns.py): run() raises unittest.SkipTest otherwise (the command line
prints the reason and exits 0).
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

WORKER = os.path.join(HERE, "checker_handoff_worker.py")
TTL_MS = 400
LONG_MS = 3000            # the receiver's extend: its keeper comes back only after LONG_MS / 3
TIMEOUT_MS = 100
WAIT_MS = 30              # short: a worker looks at its mailbox between attempts
CONFIG = {"auto_extend": 1, "timeout_ms": TIMEOUT_MS, "retry_delay_ms": 20, "retry_jitter_ms": 10,
          "reconnect_min_ms": 20, "reconnect_max_ms": 100}
# a call may take this much beyond its bound before the run fails (a loaded
# 2-core host); what it catches is a call that waits without a deadline
CALL_SLACK_S = 0.5


class Controller:
    """The fault thread: random single-link flaps plus the workers' requests."""

    def __init__(self, net, sock, workers, key, sender_cut_s, receiver_cut_s, seed=None, flap=True,
                 every=(0.15, 0.4), down=(0.03, 0.3)):
        self.net, self.sock, self.workers, self.flap = net, sock, workers, flap
        self.key, self.sender_cut_s, self.receiver_cut_s = key, sender_cut_s, receiver_cut_s
        self.every, self.down = every, down
        self.rng = random.Random(seed)
        self.timed = {}          # (i, j) -> monotonic time to heal it
        self.held = set()        # pairs a worker asked for: no random flap touches them
        self.quiet = set()       # clients of a targeted hand-off under way: no random flaps

    def __call__(self, stop, until):
        net, rng = self.net, self.rng
        next_flap = time.monotonic() + rng.uniform(*self.every)
        while not stop.is_set():
            now = time.monotonic()
            for pair, t in list(self.timed.items()):
                if t <= now:
                    del self.timed[pair]
                    self.held.discard(pair)
                    net.heal(*pair)
            if self.flap and now >= next_flap and now < until:
                up = [(i, j) for i in range(self.workers) for j in range(len(net.nodes))
                      if not net.is_cut(i, j) and (i, j) not in self.held and i not in self.quiet]
                if up:
                    pair = rng.choice(up)
                    net.cut(*pair)
                    self.timed[pair] = now + rng.uniform(*self.down)
                next_flap = now + rng.uniform(*self.every)
            wake = min([next_flap] + list(self.timed.values())) if self.flap else \
                min(list(self.timed.values()) or [now + 0.05])
            r, _, _ = select.select([self.sock], [], [], max(0.0, min(wake - time.monotonic(), 0.05)))
            if r:
                self.serve(json.loads(self.sock.recv(65536)))
        for pair in list(self.timed):
            net.heal(*pair)
        self.timed.clear()
        net.heal()

    def serve(self, req):
        answer = {}
        if req["op"] == "target":
            answer = self.target(req["sender"], req["receiver"], req["token"])
        else:
            self.quiet = set()
            for pair in (tuple(p) for p in req["pairs"]):
                self.held.discard(pair)
                self.timed.pop(pair, None)
                self.net.heal(*pair)
        try:
            self.sock.sendto(json.dumps(answer).encode(), req["reply"])
        except OSError:
            pass                # the worker is gone

    def target(self, a, b, token):
        """A targeted hand-off from worker a to worker b: their flapped
        links heal; then, if every node holds a's token (so that a's keeper
        can still extend it without one of them), a is cut from a node x
        and b from another node y, each for a while (b asks for a's heal
        sooner, once it has extended the lock)."""
        net, now = self.net, time.monotonic()
        for pair in [p for p in self.timed if p[0] in (a, b)]:
            del self.timed[pair]
            self.held.discard(pair)
            net.heal(*pair)
        if any(n.get(self.key) != token for n in net.nodes):
            return {}
        x, y = self.rng.sample(range(len(net.nodes)), 2)
        self.quiet = {a, b}
        for pair, after in (((a, x), self.sender_cut_s), ((b, y), self.receiver_cut_s)):
            self.held.add(pair)
            net.cut(*pair)
            self.timed[pair] = now + after
        return {"sender": [a, x], "receiver": [b, y]}


class HandoffResult(checker.Result):
    def __init__(self, reports, counter, seconds, log, partitions):
        super().__init__(reports, counter, seconds, log)
        total = lambda k: sum(r.get(k, 0) for r in reports)     # noqa: E731
        for k in ("handoffs", "targeted", "targeted_extended", "adopted", "adopt_null",
                  "adopt_errors", "detach_null", "releases"):
            setattr(self, k, total(k))
        self.partitions = partitions
        # the call furthest beyond its bound: (kind, seconds, bound)
        worst = None
        for r in reports:
            for kind, (took, bound) in r.get("calls", {}).items():
                if worst is None or took - bound > worst[1] - worst[2]:
                    worst = (kind, took, bound)
        self.longest = worst or ("-", 0.0, 0.0)

    def longest_text(self):
        kind, took, bound = self.longest
        return "%s %.0f ms (bound %.0f ms)" % (kind, took * 1000, bound * 1000)

    def summary(self, label):
        return (super().summary(label) +
                " handoffs=%d targeted=%d targeted_extended=%d adopted=%d adopt_null=%d "
                "adopt_errors=%d detach_null=%d releases=%d partitions=%d longest_call=%s"
                % (self.handoffs, self.targeted, self.targeted_extended, self.adopted, self.adopt_null,
                   self.adopt_errors, self.detach_null, self.releases, self.partitions,
                   self.longest_text().replace(" ", "_")))

    def over_bound(self):
        kind, took, bound = self.longest
        return took - bound > CALL_SLACK_S

    def table_row(self, label):
        return "| %s | %d | %d (%d timed) | %d | %d | %s |" % (
            label, self.acquisitions, self.handoffs, self.targeted, self.partitions, self.violations,
            self.longest_text())


TABLE_HEAD = ("| scenario | acquisitions | hand-offs | partitions | violations | longest call (its bound) |\n"
              "|---|---|---|---|---|---|")


def run(seconds=10.0, workers=4, ttl_ms=TTL_MS, long_ms=LONG_MS, handoff_p=0.6, targeted_p=1.0,
        flap=True, seed=None):
    """One run; returns a HandoffResult. unittest.SkipTest without root."""
    netns.require()
    d, counter, marker, fence_db, ctl, ctl_path = checker.scratch("redlock-handoff-")
    procs, stop, threads = [], threading.Event(), []
    try:
        with netns.Net(nodes=3, clients=workers) as net:
            boxes = [os.path.join(d, "w%d" % i) for i in range(workers)]
            for i in range(workers):
                spec = {"name": "w%d" % i, "index": i, "nodes": net.nodes_env(i), "ext": checker.EXT,
                        "config": CONFIG, "resource": "handoff", "ttl_ms": ttl_ms, "long_ms": long_ms,
                        "wait_ms": WAIT_MS, "hold_ms": [5, ttl_ms * 0.8], "counter": counter,
                        "marker": marker, "fence_db": fence_db, "mailbox": boxes[i], "mailboxes": boxes,
                        "control": ctl_path, "peers": [k for k in range(workers) if k != i],
                        "n_nodes": len(net.nodes), "handoff_p": handoff_p, "targeted_p": targeted_p}
                procs.append(subprocess.Popen(net.client_argv(i, [checker.PYTHON, WORKER, json.dumps(spec)]),
                                              cwd=HERE, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                              stderr=subprocess.PIPE, text=True))
            start_at, until = checker.start_workers(procs, seconds, "hand-off worker")
            control = Controller(net, ctl, workers, "handoff", long_ms / 1000.0, ttl_ms * 3 / 1000.0,
                                 seed=seed, flap=flap)
            reports = checker.await_workers(procs, threads, control, stop, start_at, until,
                                            ttl_ms + long_ms, "hand-off worker")
            with open(counter) as f:
                final = int(f.read().strip())
            return HandoffResult(reports, final, seconds, fence_store.read_log(fence_db), net.cuts)
    finally:
        ctl.close()
        checker.end_run(stop, procs, d)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=float(os.environ.get("CHECKER_SECONDS", 10)))
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--targeted", type=float, default=1.0, help="share of hand-offs with timed cuts")
    ap.add_argument("--verbose", action="store_true", help="print every overlap found")
    a = ap.parse_args(argv)
    try:
        res = run(a.seconds, a.workers, targeted_p=a.targeted)
    except unittest.SkipTest as e:
        print("SKIP checker_handoff: %s" % e)
        return 0
    print(res.summary("handoff_partitions"))
    if a.verbose and res.holds:
        t0 = min(x["start"] for x in res.holds)
        for p, q in checker._interval_overlaps(res.holds):
            print("overlap: %s" % "  ".join("%s (chain %s) %.3f-%.3f s, %d yes"
                                           % (x["id"], x["chain"], x["start"] - t0, x["end"] - t0, x["yes"])
                                           for x in (p, q)))
    if res.error_samples:
        print("samples: %r" % res.error_samples)
    print()
    print(TABLE_HEAD)
    print(res.table_row("hand-offs under flapping partial partitions"))
    return 1 if res.violations or res.over_bound() else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
