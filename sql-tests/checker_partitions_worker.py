#!/usr/bin/python3
"""One worker process of the partition checker (checker_partitions.py), run
in a client network namespace of its own (netns.py).

    ip netns exec NS /usr/bin/python3 checker_partitions_worker.py '<json spec>'

It holds the lock as checker_worker.py does (marker file, fenced writes,
counter, validity intervals on CLOCK_MONOTONIC) and loops until "until".
At one moment of a cycle, its spec's "phase", it asks the partition
controller (the checker's fault thread, over its control socket) to take
its own links to some nodes down, and goes on at once, the links down:

    acquire   just before redlock_acquire (with wait_ms)
    hold      just after the acquire returned; the hold lasts 0.5 to 1.5
              TTL, kept by auto-extension
    extend    just before redlock_extend (workers without auto-extension),
              or just before the keeper's next extension (with it: the
              worker waits for that extension to be made)
    release   just before redlock_release

The fault classes come in turn: a minority (1 of 3 nodes) or a majority
(2 of 3), cut briefly, for longer than the TTL, or flapping (down and up
every few tens of ms). The controller heals the links by itself.

Every call is timed against its bound: timeout_ms, plus wait_ms for an
acquire, plus one more timeout_ms on a connection with auto-extension
(the keeper's round may hold the connection that long first). Two checks
are this worker's own, both counted as violations by the checker:

- unbacked: right after redlock_acquire or redlock_extend said the lock is
  ours, the worker reads the key on every node over the node's unix
  socket (which no cut touches). Fewer than a majority holding our token
  while the validity the engine reports afterwards is still positive is
  an answer no node gave: a reply taken for another command's.
- loss unseen: a hold through a majority cut longer than the TTL must end
  with the lock lost (validity NULL); one still valid after the heal is
  counted as checker.py counts a paused holder that did not see its loss.

It prints one JSON line, as checker_worker.py does, with the faults made
and the longest call of each kind.
"""
# SPDX-License-Identifier: BSD-3-Clause

import json
import socket
import sqlite3
import sys
import time

import checker_worker as cw
from checker_handoff_worker import HandoffWorker

# What a node's answer can only be when it answers another command than
# the one it is taken for: Redis answers every command, in order, so on a
# connection that keeps count neither ever happens.
OUT_OF_STEP = ("a reply nobody asked for", "unexpected reply")

CLASSES = [(size, length) for length in ("brief", "long", "flap") for size in ("minority", "majority")]


class _Resp:
    """A minimal RESP client over a node's unix socket: GET only."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(5.0)
        self.sock.connect(path)
        self.buf = b""

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("node closed the socket")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def get(self, key):
        k = key.encode()
        self.sock.sendall(b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(k), k))
        head = self._line()
        if head.startswith(b"$-1"):
            return None
        if not head.startswith(b"$"):
            raise ConnectionError("unexpected reply %r" % head[:40])
        n = int(head[1:])
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("node closed the socket")
            self.buf += chunk
        v, self.buf = self.buf[:n], self.buf[n + 2:]
        return v.decode()


class PartitionWorker(HandoffWorker):
    def __init__(self, spec):
        super().__init__(spec)
        self.phase = spec["phase"]
        self.auto = bool(spec["config"].get("auto_extend"))
        self.nodes_direct = [_Resp(p) for p in spec["node_sockets"]]
        self.quorum = len(self.nodes_direct) // 2 + 1
        self.turn = spec["index"]
        self.out.update({"faults": {}, "unbacked": 0, "out_of_step": 0, "backed_checks": 0, "cut_holds": 0})
        t = self.timeout_s * (2 if self.auto else 1)
        self.bounds = {"acquire": t + spec["wait_ms"] / 1000.0, "release": t, "extend": t,
                       "validity": t, "locks": t}

    def call(self, kind, sql, *args, bound_s=None):
        try:
            return super().call(kind, sql, *args, bound_s=self.bounds.get(kind) if bound_s is None else bound_s)
        except sqlite3.Error as e:
            if any(x in str(e) for x in OUT_OF_STEP):
                self.out["out_of_step"] += 1
                self.sample("out of step: %s" % e)
            raise

    # -- faults --------------------------------------------------------------
    def fault(self):
        """Asks the controller to cut our links now (the next fault class
        in turn), with fault_p. Returns the controller's answer ({} when no
        cut was made: links of ours still down, or the run is ending)."""
        if not self.chance("fault_p"):
            return {}
        size, length = CLASSES[self.turn % len(CLASSES)]
        ans = self.control(op="cut", worker=self.spec["index"], size=size, length=length)
        if ans.get("nodes"):
            self.turn += 1
            key = "%s %s" % (size, length)
            self.out["faults"][key] = self.out["faults"].get(key, 0) + 1
            ans["size"], ans["length"] = size, length
        return ans if ans.get("nodes") else {}

    # -- the nodes, read directly --------------------------------------------
    def check_backed(self, tok):
        """Counts an unbacked answer: fewer than a majority of the nodes
        hold tok while the engine still reports validity afterwards."""
        holding = 0
        for n in self.nodes_direct:
            try:
                holding += n.get(self.res) == tok
            except (OSError, ConnectionError) as e:
                self.sample("reading a node directly: %s" % e)
                return
        left = self.con.execute("SELECT redlock_validity(?)", (self.res,)).fetchone()[0]
        self.out["backed_checks"] += 1
        if holding < self.quorum and left:
            self.out["unbacked"] += 1
            self.sample("the engine reports %s ms of validity, yet only %d node(s) hold our token"
                        % (left, holding))

    # -- one cycle -------------------------------------------------------------
    def wait_for_keeper(self, before):
        """Waits (at most a TTL) for the keeper's next extension round to be
        made after `before` extensions, or for the lock to be lost."""
        deadline = time.monotonic() + self.ttl / 1000.0
        while time.monotonic() < deadline:
            row = self.con.execute("SELECT extensions, state FROM redlock_locks WHERE resource = ?",
                                   (self.res,)).fetchone()
            if row is None or row[0] > before or row[1] != "held":
                return
            time.sleep(0.002)

    def hold(self, tok, t1, cut):
        spec, res = self.spec, self.res
        left, fence, yes = self.con.execute(
            "SELECT redlock_validity(?), redlock_fence(?), (SELECT nodes FROM redlock_locks WHERE resource = ?)",
            (res, res, res)).fetchone()
        hid = "%s#%d" % (self.me, self.out["acquisitions"])
        hold = {"id": hid, "start": t1, "lease_end": t1 + (left or 0) / 1000.0, "fence": fence or 0,
                "yes": yes or 0}
        self.out["acquisitions"] += 1
        if not left:
            self.out["zero_validity"] += 1
        marker_ok = self.take_marker(hid, hold["lease_end"])
        if fence:
            self.store.write(fence, hid, "begin")
        v = cw.read_counter(spec["counter"])
        if self.phase == "hold":
            cut = self.fault() or cut
            span = self.rng.uniform(0.5, 1.5) * self.ttl / 1000.0
        else:
            span = self.rng.uniform(*spec["hold_ms"]) / 1000.0
        target = t1 + span
        lost = not left
        while not lost and time.monotonic() < target:
            time.sleep(max(0.0, min(target, time.monotonic() + self.ttl / 4000.0) - time.monotonic()))
            x, end = self.lease("validity", "SELECT redlock_validity(?)", res)
            if not x:
                lost = True
            else:
                hold["lease_end"] = max(hold["lease_end"], end)
        if not lost and self.phase == "extend":
            cut = self.fault() or cut
            if self.auto:
                self.wait_for_keeper(self.call("locks", "SELECT coalesce(max(extensions), 0) FROM redlock_locks "
                                                        "WHERE resource = ?", res) or 0)
            else:
                try:
                    x, end = self.lease("extend", "SELECT redlock_extend(?, ?)", res, self.ttl)
                    self.out["extends"] += 1
                    if x:
                        hold["lease_end"] = max(hold["lease_end"], end)
                        self.check_backed(tok)
                    else:
                        lost = True
                        self.out["extends_lost"] += 1
                except sqlite3.Error as e:      # nodes failed: the lease runs on unchanged
                    self.out["errors"] += 1
                    self.sample("extend: %s" % e)
        if cut and cut["size"] == "majority" and cut["length"] == "long":
            # our majority was cut for longer than the TTL during this hold:
            # once the links are back, the lock must be found lost (if it
            # was not already)
            self.out["cut_holds"] += 1
            if not lost:
                now = time.monotonic()
                if cut["heal_at"] > now:
                    time.sleep(cut["heal_at"] - now)
                x, _ = self.lease("validity", "SELECT redlock_validity(?)", res)
                if x:
                    self.out["loss_unseen"] += 1
                    # first among the samples: the one that must be read
                    self.out["error_samples"].insert(0, "validity %s ms %.0f ms after a majority cut of %.0f ms "
                                                        "(TTL %d ms) was made, hold from %.0f ms before it"
                                                     % (x, (time.monotonic() - cut["made_at"]) * 1000,
                                                        cut["seconds"] * 1000, self.ttl,
                                                        (cut["made_at"] - t1) * 1000))
                lost = not x
            if lost:
                self.out["loss_seen"] += 1
        lost = self.write_and_end(hold, v, lost, fence, hid, marker_ok)
        if not lost:
            n = self.call("locks", "SELECT coalesce(max(extensions), 0) FROM redlock_locks WHERE resource = ?", res)
            self.out["extensions"] += n or 0
        hold["end"] = min(hold["lease_end"], time.monotonic())
        if self.phase == "release":
            self.fault()
        try:
            r = self.call("release", "SELECT redlock_release(?, ?)", res, tok)
            self.out["releases"] += 1
            if r != 1 and not lost:
                self.out["release_not_1"] += 1
        except sqlite3.Error as e:
            self.out["errors"] += 1
            self.sample("release: %s" % e)
        self.out["holds"].append(hold)

    def run(self):
        spec = self.spec
        cw.await_start(spec)
        while time.monotonic() < spec["until"]:
            cut = self.fault() if self.phase == "acquire" else {}
            try:
                tok = self.call("acquire", "SELECT redlock_acquire(?, ?, ?)", self.res, self.ttl, spec["wait_ms"])
            except sqlite3.Error as e:
                self.out["errors"] += 1
                self.sample(str(e))
                time.sleep(0.02)
                continue
            t1 = time.monotonic()
            if tok is None:
                self.out["nulls"] += 1
                continue
            self.check_backed(tok)
            self.hold(tok, t1, cut)
            if spec.get("think_ms"):
                time.sleep(self.rng.uniform(*spec["think_ms"]) / 1000.0)
        self.out["finished_late_ms"] = round((time.monotonic() - spec["until"]) * 1000)
        self.con.close()
        print(json.dumps(self.out), flush=True)


if __name__ == "__main__":
    PartitionWorker(json.loads(sys.argv[1])).run()
