#!/usr/bin/python3
"""One worker process of the hand-off checker (checker_handoff.py), run in
a client network namespace of its own (netns.py).

    ip netns exec NS /usr/bin/python3 checker_handoff_worker.py '<json spec>'

It holds the lock as checker_worker.py does (marker file, fenced writes,
counter, validity intervals on CLOCK_MONOTONIC), with auto-extension on,
and loops until "until":

- a hand-off in its mailbox (a unix datagram socket): redlock_adopt the
  token, then redlock_extend it longer (long_ms after a targeted hand-off,
  else twice ttl_ms), and hold it (a hold of the sender's chain: the same
  lock and fencing number);
- else redlock_acquire(resource, ttl_ms, wait_ms) and hold it.

Each hold ends with redlock_release, or with redlock_detach and the token
sent to another worker's mailbox. Before a hand-off marked "targeted" the
worker asks the partition controller (the checker's fault thread, over
its control socket) to cut it from node x and the receiver from node y,
then waits for its keeper's next extend (which goes out while node x is
cut off), and only then detaches; the receiver asks for the heal of the
sender's link once it has made its long extend. That is the moment
issue 36 found: a late extend of the sender cutting back the receiver's
TTL on node x.

Every call's duration is kept against its bound (timeout_ms, plus
wait_ms for an acquire). It prints one JSON line, as checker_worker.py
does, with the hand-off counts and the longest calls.
"""
# SPDX-License-Identifier: BSD-3-Clause

import json
import os
import random
import select
import socket
import sqlite3
import sys
import time

import checker_worker as cw


class HandoffWorker(cw.Worker):
    def __init__(self, spec):
        super().__init__(spec)
        self.rng = random.Random(os.getpid() ^ int(time.time() * 1e6))
        self.out.update({"handoffs": 0, "targeted": 0, "targeted_extended": 0, "adopted": 0,
                         "adopt_null": 0, "adopt_errors": 0, "detach_null": 0, "releases": 0,
                         "calls": {}})
        self.timeout_s = spec["config"]["timeout_ms"] / 1000.0
        self.mail = self._bind(spec["mailbox"])
        self.ctl = self._bind(spec["mailbox"] + ".ctl")

    @staticmethod
    def _bind(path):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.bind(path)
        return s

    # -- calls, timed against their bounds ---------------------------------
    def call(self, kind, sql, *args, bound_s=None):
        bound = self.timeout_s if bound_s is None else bound_s
        t0 = time.monotonic()
        try:
            return self.con.execute(sql, args).fetchone()[0]
        finally:
            took = time.monotonic() - t0
            top = self.out["calls"].get(kind)
            if top is None or took - bound > top[0] - top[1]:
                self.out["calls"][kind] = [took, bound]

    def lease(self, kind, sql, *args):
        t0 = time.monotonic()
        v = self.call(kind, sql, *args)
        return v, (t0 + v / 1000.0 if v else None)

    # -- the partition controller ------------------------------------------
    def control(self, **req):
        """Asks the checker's partition controller for cuts or heals and
        waits for it to have made them."""
        req["reply"] = self.spec["mailbox"] + ".ctl"
        self.ctl.sendto(json.dumps(req).encode(), self.spec["control"])
        r, _, _ = select.select([self.ctl], [], [], 10.0)
        if not r:
            raise RuntimeError("the partition controller did not answer")
        return json.loads(self.ctl.recv(65536))

    def extensions(self):
        return self.call("locks", "SELECT coalesce(max(extensions), 0) FROM redlock_locks WHERE resource = ?",
                         self.res) or 0

    # -- a hold --------------------------------------------------------------
    def write_and_end(self, hold, v, lost, fence, writer, marker_ok):
        """The protected work at the end of a hold: the counter's next value
        (v + 1), written only while the lock has validity left (at least
        MIN_WRITE_LEFT_MS); then the fenced store's end mark under writer
        and the marker's removal. Returns whether the lock was found lost."""
        if not lost:
            left_now, end = self.lease("validity", "SELECT redlock_validity(?)", self.res)
            if not left_now:
                lost = True
            else:
                hold["lease_end"] = max(hold["lease_end"], end)
                if left_now < cw.MIN_WRITE_LEFT_MS:
                    self.out["abandoned"] += 1
                else:
                    cw.write_counter(self.spec["counter"], v + 1, self.me)
                    self.out["completed"] += 1
                    if time.monotonic() > hold["lease_end"]:
                        self.out["late_writes"] += 1
        if fence:
            self.store.write(fence, writer, "end")
        if marker_ok:
            self.drop_marker(hold["id"], lost, hold["lease_end"])
        return lost

    def run_segment(self, tok, t1, left, chain, fence, hold_s):
        """Holds the lock from t1 (left ms of validity then) for about
        hold_s, does the protected work, and ends with a release or a
        hand-off. One hold of the chain `chain`."""
        spec, res = self.spec, self.res
        hid = "%s#%d" % (self.me, self.out["acquisitions"])
        chain = chain or hid
        yes = self.call("locks", "SELECT nodes FROM redlock_locks WHERE resource = ?", res)
        hold = {"id": hid, "chain": chain, "start": t1, "lease_end": t1 + (left or 0) / 1000.0,
                "fence": fence or 0, "yes": yes or 0}
        self.out["acquisitions"] += 1
        marker_ok = self.take_marker(hid, hold["lease_end"])
        if fence:
            self.store.write(fence, chain, "begin")
        v = cw.read_counter(spec["counter"])
        lost = False
        target = t1 + hold_s
        while not lost and time.monotonic() < target:
            time.sleep(max(0.0, min(target, time.monotonic() + self.ttl / 4000.0) - time.monotonic()))
            x, end = self.lease("validity", "SELECT redlock_validity(?)", res)
            if not x:
                lost = True
                self.out["extends_lost"] += 1
            else:
                hold["lease_end"] = max(hold["lease_end"], end)
        peers = spec["peers"]
        late = time.monotonic() > spec["until"] - self.ttl / 1000.0      # the receiver may be done
        hand_to = None
        if peers and not lost and not late and self.chance("handoff_p"):
            hand_to = self.rng.choice(peers)
        # targeted: only a lock taken here with ttl_ms (an adopted one has
        # long_ms, which a late extend of it would not shorten)
        cut = None
        if hand_to is not None and chain == hid and self.chance("targeted_p"):
            # the controller picks x and y when every node holds our token
            # (else our keeper could not extend it with node x cut off)
            cut = self.control(op="target", sender=spec["index"], receiver=hand_to, token=tok)
            if cut.get("sender") is None:
                cut = None
        if cut:
            self.out["targeted"] += 1
            # the keeper's next extend goes out while node x is cut off
            before, deadline = self.extensions(), time.monotonic() + self.ttl / 1000.0
            while time.monotonic() < deadline and self.extensions() <= before:
                time.sleep(0.002)
            after = self.extensions()
            if after > before:
                self.out["targeted_extended"] += 1
        lost = self.write_and_end(hold, v, lost, fence, chain, marker_ok)
        t_end = time.monotonic()
        hold["end"] = min(hold["lease_end"], t_end)
        try:
            if hand_to is not None and not lost:
                given = self.call("detach", "SELECT redlock_detach(?)", res)
                if given is None:
                    self.out["detach_null"] += 1
                else:
                    msg = {"token": given, "chain": chain, "fence": fence or 0, "from": spec["index"],
                           "sender_cut": cut and cut["sender"]}
                    try:
                        self.mail.sendto(json.dumps(msg).encode(), spec["mailboxes"][hand_to])
                        self.out["handoffs"] += 1
                    except OSError:     # the receiver has finished its run: given back
                        self.call("release", "SELECT redlock_release(?, ?)", res, given)
                        self.out["releases"] += 1
            else:
                r = self.call("release", "SELECT redlock_release(?, ?)", res, tok)
                self.out["releases"] += 1
                if r != 1 and not lost:
                    self.out["release_not_1"] += 1
        except sqlite3.Error as e:
            self.out["errors"] += 1
            self.sample("end of a hold: %s" % e)
        self.out["holds"].append(hold)

    def adopt(self, msg):
        spec, res = self.spec, self.res
        t0 = time.monotonic()
        try:
            v = self.call("adopt", "SELECT redlock_adopt(?, ?)", res, msg["token"])
            if not v:
                self.out["adopt_null"] += 1
        except sqlite3.Error as e:
            v = None
            self.out["adopt_errors"] += 1
            self.sample("adopt: %s" % e)
        t1 = time.monotonic()
        if not v:
            if msg.get("sender_cut"):
                self.control(op="heal", pairs=[msg["sender_cut"]])
            try:    # what is left of it goes now, not after its TTL
                self.call("release", "SELECT redlock_release(?, ?)", res, msg["token"])
            except sqlite3.Error:
                pass
            return
        self.out["adopted"] += 1
        left = v - (t1 - t0) * 1000.0
        try:
            longer = spec["long_ms"] if msg.get("sender_cut") else 2 * self.ttl
            x, end = self.lease("extend", "SELECT redlock_extend(?, ?)", res, longer)
        except sqlite3.Error as e:
            x = None
            self.out["errors"] += 1
            self.sample("extend after adopt: %s" % e)
        if x:
            left = max(left, (end - t1) * 1000.0)
        if msg.get("sender_cut"):
            self.control(op="heal", pairs=[msg["sender_cut"]])
            hold_s = self.rng.uniform(0.3, 0.5) * spec["long_ms"] / 1000.0
        else:
            hold_s = self.rng.uniform(*spec["hold_ms"]) / 1000.0
        self.run_segment(msg["token"], t1, left, msg["chain"], msg["fence"], hold_s)

    def run(self):
        spec = self.spec
        cw.await_start(spec)
        while time.monotonic() < spec["until"]:
            r, _, _ = select.select([self.mail], [], [], 0)
            if r:
                self.adopt(json.loads(self.mail.recv(65536)))
                continue
            try:
                tok = self.call("acquire", "SELECT redlock_acquire(?, ?, ?)", self.res, self.ttl,
                                spec["wait_ms"], bound_s=self.timeout_s + spec["wait_ms"] / 1000.0)
            except sqlite3.Error as e:
                self.out["errors"] += 1
                self.sample(str(e))
                select.select([self.mail], [], [], 0.02)
                continue
            t1 = time.monotonic()
            if tok is None:
                self.out["nulls"] += 1
                continue
            left, fence = self.con.execute("SELECT redlock_validity(?), redlock_fence(?)",
                                           (self.res, self.res)).fetchone()
            if not left:
                self.out["zero_validity"] += 1
            self.run_segment(tok, t1, left or 0, None, fence, self.rng.uniform(*spec["hold_ms"]) / 1000.0)
        # a hand-off that arrived at the end: given back, not left to expire
        while select.select([self.mail], [], [], 0)[0]:
            msg = json.loads(self.mail.recv(65536))
            try:
                self.con.execute("SELECT redlock_release(?, ?)", (self.res, msg["token"]))
            except sqlite3.Error:
                pass
        self.out["finished_late_ms"] = round((time.monotonic() - spec["until"]) * 1000)
        self.con.close()
        print(json.dumps(self.out), flush=True)


if __name__ == "__main__":
    HandoffWorker(json.loads(sys.argv[1])).run()
