#!/usr/bin/python3
"""make bench: measures redlock.so against a bare hiredis client of ours and
node-redlock, on redis-server nodes it starts itself, and prints one table.

Every figure in the table comes from this one run. See bench/README.md for
the method. Standard library only.
"""
# SPDX-License-Identifier: BSD-3-Clause

import argparse
import atexit
import ctypes
import json
import os
import platform
import re
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import many

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "sql-tests"))
import harness as h  # noqa: E402  (redis-server nodes and the RESP client, shared with the tests)

EXT = os.path.join(REPO, "redlock.so")
SQLITE3 = shutil.which("sqlite3", path="/usr/bin:/bin") or "sqlite3"

# --------------------------------------------------------------------------
# processes started here (the nodes are the harness's), always stopped here
# --------------------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)
_children = []  # every Popen we start, so cleanup can end it
TMP = tempfile.mkdtemp(prefix="redlock-bench-")


def _die_with_parent():
    # PR_SET_PDEATHSIG = 1: the child gets SIGKILL when this process dies,
    # even by SIGKILL, so no redis-server outlives the bench.
    _libc.prctl(1, signal.SIGKILL, 0, 0, 0)
    os.setpgrp()


def spawn(cmd, **kw):
    p = subprocess.Popen(cmd, preexec_fn=_die_with_parent, **kw)
    _children.append(p)
    return p


def cleanup():
    for p in _children:
        if p.poll() is None:
            try:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
                p.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
    _children.clear()
    h.terminate_all()
    shutil.rmtree(TMP, ignore_errors=True)


def _on_signal(signum, _frame):
    raise SystemExit(128 + signum)


atexit.register(cleanup)
for _s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(_s, _on_signal)


def resp(port, *args, timeout=2.0):
    """Sends one command to 127.0.0.1:port with the harness's RESP client;
    returns the decoded reply (an error reply raises harness.RedisError)."""
    c = h.Resp("127.0.0.1", port, timeout=timeout)
    try:
        return c.cmd(*args)
    finally:
        c.close()


def make_certs():
    """A CA and a server certificate for 127.0.0.1 (EC keys), made with the
    openssl command in TMP, for the TLS rows. Returns (ca, cert, key) or None."""
    ca, ca_key, crt, key, csr, ext = (os.path.join(TMP, f) for f in
                                      ("ca.pem", "ca.key", "server.pem", "server.key", "server.csr", "server.ext"))
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    steps = [["req", "-x509"] + ec + ["-keyout", ca_key, "-out", ca, "-days", "2", "-subj", "/CN=bench CA"],
             ["req"] + ec + ["-keyout", key, "-out", csr, "-subj", "/CN=127.0.0.1"],
             ["x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-out", crt, "-days", "2",
              "-extfile", ext]]
    for st in steps:
        if subprocess.run(["openssl"] + st, capture_output=True, cwd=TMP).returncode != 0:
            return None
    return ca, crt, key


class Node(h.RedisNode):
    """A harness redis-server node; with certs the same server also serves
    TLS on a second port, so the TLS rows and the plain ones measure the
    same processes."""

    def __init__(self, idx, certs=None):
        self.idx = idx
        self.certs = certs
        self.tls_port = h.free_port() if certs else None
        tls = ["--tls-port", str(self.tls_port), "--tls-cert-file", certs[1], "--tls-key-file", certs[2],
               "--tls-ca-cert-file", certs[0], "--tls-auth-clients", "no"] if certs else []
        super().__init__(extra_args=tls)

    def cont(self):
        super().cont()
        h.wait_until(self._answers, 10, what="redis %d to answer after SIGCONT" % self.port)

    def _answers(self):
        try:
            return resp(self.port, "PING", timeout=1) == "PONG"
        except OSError:
            return False

    @property
    def tls_url(self):
        return "rediss://127.0.0.1:%d?tls_ca_file=%s" % (self.tls_port, self.certs[0])

    @property
    def hostport(self):
        return self.addr


# --------------------------------------------------------------------------
# running the measuring programs
# --------------------------------------------------------------------------

_seq = [0]


def prefix(tag):
    _seq[0] += 1
    return "bench:%s:%d:" % (tag, _seq[0])


def run_json(cmd, timeout, cwd=REPO, env=None):
    """Runs cmd, returns its last stdout line as a dict, or {"error": ...}."""
    p = spawn(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd, env=env)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        return {"error": "timed out after %d s" % timeout}
    finally:
        if p in _children:
            _children.remove(p)
    lines = out.strip().splitlines()
    if p.returncode != 0 or not lines:
        return {"error": (err.strip().splitlines() or ["exit %d" % p.returncode])[-1][:160]}
    try:
        return json.loads(lines[-1])
    except ValueError:
        return {"error": "bad output: %s" % lines[-1][:120]}


class Bench:
    def __init__(self, args):
        self.a = args
        self.build = os.path.join(REPO, args.build)
        self.node_ok = None
        self.node_note = ""
        self.wrap = []  # put before every client command: ["taskset", "-c", "1"] for the pinned rows

    @staticmethod
    def with_server_cpu(nodes, warmup, run):
        """Runs run() and adds srv_us: the CPU the redis-server processes in
        nodes used (INFO cpu, user + sys, before and after) per cycle,
        warm-up cycles included. Only live nodes may be passed."""
        def total():
            t = 0.0
            for n in nodes:
                info = resp(n.port, "INFO", "cpu", timeout=5)
                if isinstance(info, bytes):
                    info = info.decode(errors="replace")
                for line in (info or "").splitlines():
                    k, _, v = line.partition(":")
                    if k in ("used_cpu_sys", "used_cpu_user"):
                        t += float(v)
            return t
        try:
            before = total()
        except Exception:  # noqa: BLE001 (no server figure is better than no run)
            before = None
        r = run()
        if before is not None and "cycles" in r:
            try:
                r["srv_us"] = (total() - before) * 1e6 / (r["cycles"] + warmup)
            except Exception:  # noqa: BLE001
                pass
        return r

    def timed_gaps(self, cmd, timeout):
        """run_json(cmd) with bench/gap.c preloaded: adds its gap_p50_us and
        gap_mean_us (the client's time from a reply to its next request)."""
        path = os.path.join(TMP, "gap-%d.json" % _seq[0])
        env = dict(os.environ, LD_PRELOAD=os.path.join(self.build, "gap.so"), GAP_FILE=path)
        r = run_json(cmd, timeout, env=env)
        try:
            with open(path) as f:
                r.update(json.loads(f.read()))
            os.unlink(path)
        except (OSError, ValueError):
            if "error" not in r:
                r = {"error": "the gap timer wrote no figures"}
        return r

    def ours_cmd(self, nodes, fencing, tls=False, shared=False, ext=EXT, settings=(), urls=None, split=False,
                 seconds=None):
        urls = urls or ",".join(n.tls_url if tls else n.url for n in nodes)
        seconds = seconds or self.a.seconds
        return self.wrap + ([os.path.join(self.build, "driver"), "cycles", ext, urls, str(fencing), prefix("sql"),
                             str(seconds)] + (["shared"] if shared else []) + (["split"] if split else []) +
                            list(settings))

    def bare_cmd(self, nodes, fencing, quorum=False, seconds=None):
        return self.wrap + [os.path.join(self.build, "bare"), ",".join(n.hostport for n in nodes), str(fencing),
                            prefix("bare"), str(seconds or self.a.seconds)] + (["quorum"] if quorum else [])

    def ours(self, nodes, fencing, tls=False, live=None, shared=False, ext=EXT, settings=(), gaps=False, urls=None,
             split=False, seconds=None):
        seconds = seconds or self.a.seconds
        cmd = self.ours_cmd(nodes, fencing, tls, shared, ext, settings, urls, split, seconds)
        timeout = seconds * 6 + 30
        if gaps:
            return self.timed_gaps(cmd, timeout)
        return self.with_server_cpu(live or nodes, 300, lambda: run_json(cmd, timeout=timeout))

    def bare(self, nodes, fencing, quorum=False, gaps=False):
        cmd = self.bare_cmd(nodes, fencing, quorum)
        timeout = self.a.seconds * 3 + 20
        if gaps:
            return self.timed_gaps(cmd, timeout)
        return self.with_server_cpu(nodes, 200, lambda: run_json(cmd, timeout=timeout))

    def peer(self, nodes, tls=False, ports=None, split=False, seconds=None):
        """node-redlock on nodes (over TLS: their TLS ports), or on ports
        (proxies in front of them: the latency rows, split timing)."""
        seconds = seconds or self.a.seconds
        ports = ports or [n.tls_port if tls else n.port for n in nodes]
        opts = (["split"] if split else []) + (["tls=" + nodes[0].certs[0]] if tls else [])
        cmd = self.wrap + ["node", os.path.join(HERE, "node_redlock.mjs"), ",".join(str(p) for p in ports),
                           prefix("nr"), str(seconds)] + opts
        return self.with_server_cpu(nodes, 20 if split else 200,
                                    lambda: run_json(cmd, timeout=seconds * 3 + 30, cwd=HERE))

    def setup_peer(self):
        node, npm = shutil.which("node"), shutil.which("npm")
        if self.a.no_peer:
            self.node_ok, self.node_note = False, "node-redlock: skipped (--no-peer)"
            return
        if not node:
            self.node_ok, self.node_note = False, "node-redlock: skipped, Node.js (node) is not installed"
            return
        if not os.path.isdir(os.path.join(HERE, "node_modules", "redlock")):
            if not npm:
                self.node_ok, self.node_note = False, "node-redlock: skipped, npm is not installed"
                return
            print("bench: installing node-redlock and ioredis into bench/node_modules (npm)", flush=True)
            try:
                r = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=HERE,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=150)
                ok = r.returncode == 0
                why = (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]
            except subprocess.TimeoutExpired:
                ok, why = False, "npm install took over 150 s"
            if not ok or not os.path.isdir(os.path.join(HERE, "node_modules", "redlock")):
                self.node_ok, self.node_note = False, "node-redlock: skipped, npm install failed: %s" % why
                return
        self.node_ok = True


def med(runs, key):
    vals = [r[key] for r in runs if key in r]
    return statistics.median(vals) if vals else None


def per_run(a_runs, b_runs, key="rate"):
    """The ratios a / b of key for the runs of the same repetition (both
    without error), which ran next to each other: (median, lowest,
    highest, runs), or None."""
    vals = [x[key] / y[key] for x, y in zip(a_runs, b_runs)
            if "error" not in x and "error" not in y and x.get(key) and y.get(key)]
    if not vals:
        return None
    return statistics.median(vals), min(vals), max(vals), len(vals)


def summary(runs):
    """Medians over the repetitions; an error if any repetition failed."""
    errs = [r["error"] for r in runs if "error" in r]
    if len(errs) == len(runs):
        return {"error": errs[0]}
    if errs:
        # A run can fail on a machine so loaded that a node misses its
        # timeout; the row keeps the other runs' medians and says so.
        runs = [r for r in runs if "error" not in r]
    out = {k: med(runs, k) for k in ("rate", "p50_us", "p99_us", "cpu_us", "srv_us", "cycles", "mean_us",
                                     "gap_p50_us", "gap_mean_us", "acq_p50_us", "acq_p99_us", "rel_p50_us",
                                     "rel_p99_us")}
    rates = [r["rate"] for r in runs if "rate" in r]
    if rates:
        out["rate_min"], out["rate_max"], out["reps"] = min(rates), max(rates), len(rates)
    if runs and "version" in runs[0]:
        out["version"] = runs[0]["version"].lstrip("v")
    if errs:
        out["failed"] = "%d of %d runs failed: %s" % (len(errs), len(errs) + len(runs), errs[0][:110])
    return out


# --------------------------------------------------------------------------
# the scenarios
# --------------------------------------------------------------------------


def interleaved(todo, reps):
    """Runs each (name, run) of todo reps times, interleaved, each in a
    different place of the order every repetition, so that a burst of load
    elsewhere hits all alike: {name: summary, "_runs": {name: [run, ...]}},
    the runs of one repetition at the same index."""
    runs = {k: [] for k, _ in todo}
    for i in range(reps):
        for k, run in todo[i % len(todo):] + todo[:i % len(todo)]:
            runs[k].append(run())
    out = {k: summary(v) for k, v in runs.items() if v}
    out["_runs"] = runs
    return out


def cycles_healthy(b, nodes, reps, counts=(1, 3, 5), label="healthy"):
    """{(fencing, n): {"ours":..., "bare":..., "bareq":..., "peer":..., "noholder":...}}; with fencing off
    also ours with holder_info 0 (what the holder details cost) and node-redlock."""
    res = {}
    for fencing in (1, 0):
        for n in counts:
            todo = [("ours", lambda: b.ours(nodes[:n], fencing)), ("bare", lambda: b.bare(nodes[:n], fencing))]
            if fencing:  # the A/A control: ours against itself, how far noise alone moves a ratio
                todo.append(("again", lambda: b.ours(nodes[:n], fencing)))
            if n > 1:
                todo.append(("bareq", lambda: b.bare(nodes[:n], fencing, quorum=True)))
            if fencing == 0:
                todo.append(("noholder", lambda: b.ours(nodes[:n], fencing, settings=["holder_info=0"])))
            if fencing == 0 and b.node_ok:
                todo.append(("peer", lambda: b.peer(nodes[:n])))
            res[fencing, n] = interleaved(todo, reps)
            print("bench: %s, fencing %s, %d node(s): done" % (label, "on" if fencing else "off", n), flush=True)
    return res


def pinned(b, nodes, reps, counts=(1, 3)):
    """The fencing-off rows with the nodes on CPU 0 and each client on
    CPU 1 (taskset), where there are 2 CPUs or more: {n: as cycles_healthy}
    or None. Other processes of the machine still run on both."""
    if not shutil.which("taskset") or (os.cpu_count() or 1) < 2:
        return None
    every = "0-%d" % ((os.cpu_count() or 2) - 1)
    try:
        for x in nodes:
            subprocess.run(["taskset", "-a", "-p", "-c", "0", str(x.proc.pid)], capture_output=True, check=True)
        b.wrap = ["taskset", "-c", "1"]
        res = {}
        for n in counts:
            todo = [("ours", lambda: b.ours(nodes[:n], 0)),
                    ("bareq", lambda: b.bare(nodes[:n], 0, quorum=n > 1))]
            if b.node_ok:
                todo.append(("peer", lambda: b.peer(nodes[:n])))
            res[n] = interleaved(todo, reps)
            print("bench: pinned, %d node(s): done" % n, flush=True)
        return res
    except (OSError, subprocess.CalledProcessError):
        return None
    finally:
        b.wrap = []
        for x in nodes:
            subprocess.run(["taskset", "-a", "-p", "-c", every, str(x.proc.pid)], capture_output=True)


# The latency rows: round-trip times (ms) of 3 nodes behind delay proxies.
LATENCIES = (("1 ms", (1, 1, 1)), ("10 ms", (10, 10, 10)), ("mixed, one far", (1, 1, 20)))


def latency(b, nodes, reps, seconds):
    """Ours and node-redlock with each node behind a delay proxy
    (bench/delay.c: half the RTT on requests, half on replies), every
    acquire and release timed: {label: {"rtt": [p50 ms of PING per node],
    "ours":..., "peer":...}}."""
    res = {}
    for label, rtts in LATENCIES:
        procs, ports = [], []
        try:
            for x, rtt in zip(nodes, rtts):
                ready = os.path.join(TMP, prefix("proxy").replace(":", "-") + "ready")
                half = str(int(rtt * 500))
                procs.append(spawn([os.path.join(b.build, "delay"), str(x.port), half, half, ready],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                h.wait_until(lambda: os.path.exists(ready) and os.path.getsize(ready) > 0, 10, what="a delay proxy")
                with open(ready) as f:
                    ports.append(int(f.read().split()[0]))
            rtt_ms = []
            for p in ports:
                c = h.Resp("127.0.0.1", p, timeout=5)
                try:
                    c.cmd("PING")
                    t = []
                    for _ in range(15):
                        t0 = time.monotonic()
                        c.cmd("PING")
                        t.append((time.monotonic() - t0) * 1000)
                    rtt_ms.append(statistics.median(t))
                finally:
                    c.close()
            urls = ",".join("redis://127.0.0.1:%d" % p for p in ports)
            # a far node's answers come after 20 ms: a timeout well above that, so none is marked down
            todo = [("ours", lambda: b.ours(nodes[:3], 0, urls=urls, split=True, seconds=seconds,
                                            settings=["timeout_ms=250"]))]
            if b.node_ok:
                todo.append(("peer", lambda: b.peer(nodes[:3], ports=ports, split=True, seconds=seconds)))
            r = interleaved(todo, reps)
            r["rtt"] = rtt_ms
            res[label] = r
        finally:
            for pr in procs:
                pr.kill()
                pr.wait()
                _children.remove(pr)
        print("bench: latency, %s: done" % label, flush=True)
    return res


def latency_lines(lat, targets):
    L = ["Round-trip time: 3 nodes, each behind a delay proxy (bench/delay.c, half the RTT each way; "
         "rtt = p50 of PING through it), fencing off; acquire and release each timed, p50/p99 in ms (median over "
         "the runs)"]
    for label, _ in LATENCIES:
        r = lat.get(label)
        if not r:
            continue
        rtt = r["rtt"]
        q = sorted(rtt)[len(rtt) // 2]  # the quorum's slowest member: the 2nd fastest of 3
        L.append("  %-16s node rtt %s ms; the quorum's slowest member %.2f ms" % (
            label, ", ".join("%.2f" % x for x in rtt), q))
        for k, name in (("ours", "ours"), ("peer", "node-redlock")):
            s2 = r.get(k)
            if not s2:
                continue
            if "error" in s2:
                L.append("    %-14s failed: %s" % (name, s2["error"]))
                continue
            L.append("    %-14s acquire p50 %6.2f p99 %6.2f   release p50 %6.2f p99 %6.2f   (%.0f cycles/s)" % (
                name, s2["acq_p50_us"] / 1000, s2["acq_p99_us"] / 1000, s2["rel_p50_us"] / 1000,
                s2["rel_p99_us"] / 1000, s2["rate"]))
        o = r.get("ours")
        if o and "error" not in o:
            far = max(rtt)
            if far > 2 * q:  # one node far: an acquire never waits for it
                tgt = verdict(o["acq_p99_us"] / 1000, round(far, 1), "<")
                targets.append(("%s: ours acquire p99 (ms), below the far node's rtt" % label,
                                "%.2f  %s" % (o["acq_p99_us"] / 1000, tgt)))
            tgt = verdict(o["acq_p50_us"] / 1000 / q, 1.5, "<=")
            targets.append(("%s: ours acquire p50 / rtt of the quorum's slowest" % label,
                            "%.2f  %s" % (o["acq_p50_us"] / 1000 / q, tgt)))
    return L


def cycles_gaps(b, nodes, reps):
    """{fencing: {"ours":..., "bare":..., "floor":...}}: one node, each run
    with the gap timer (bench/gap.c) preloaded, ours, bare and (fencing on
    only) the floor extension (bench/floor.c) in a rotating order."""
    res = {}
    for fencing in (1, 0):
        runs = {"ours": [], "bare": [], "floor": []}
        floor = os.path.join(b.build, "floor.so")
        todo = [("ours", lambda: b.ours(nodes[:1], fencing, gaps=True)),
                ("bare", lambda: b.bare(nodes[:1], fencing, gaps=True))]
        if fencing:  # the floor sends PING whatever the setting: one row is enough
            todo.append(("floor", lambda: b.ours(nodes[:1], fencing, ext=floor, gaps=True)))
        for i in range(reps):
            for k, run in todo[i % len(todo):] + todo[:i % len(todo)]:
                runs[k].append(run())
        res[fencing] = {k: summary(v) for k, v in runs.items() if v}
    print("bench: time from a reply to the next request: done", flush=True)
    return res


def instruction_counts(b, nodes, counts=(1, 3)):
    """User-space instructions per cycle of ours (SQLite included) and of
    the bare client at a quorum, fencing on, counted by valgrind
    (cachegrind, no cache simulation): the difference of a short and a
    longer run over the difference of their cycles, so set-up and warm-up
    cancel out. Unlike seconds, the count does not move with other load.
    {n: {"ours": instr, "bareq": instr}} or None without valgrind."""
    vg = shutil.which("valgrind")
    if not vg:
        return None
    res = {}
    for n in counts:
        res[n] = {}
        for name in ("ours", "bareq"):
            pts = []
            for secs in (0.5, 1.5):
                if name == "ours":
                    cmd = b.ours_cmd(nodes[:n], 1, seconds=secs)
                else:
                    cmd = b.bare_cmd(nodes[:n], 1, quorum=n > 1, seconds=secs)
                cmd = [vg, "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"] + cmd
                p = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=120)
                m = re.search(r"I\s+refs:\s+([\d,]+)", p.stderr)
                try:
                    pts.append((json.loads(p.stdout.strip().splitlines()[-1])["cycles"],
                                int(m.group(1).replace(",", ""))))
                except (ValueError, IndexError, KeyError, AttributeError):
                    pts = []
                    break
            if len(pts) == 2 and pts[1][0] > pts[0][0]:
                res[n][name] = (pts[1][1] - pts[0][1]) / (pts[1][0] - pts[0][0])
        print("bench: instruction counts, %d node(s): done" % n, flush=True)
    return res


def instruction_lines(ic, targets):
    L = ["User-space instructions per cycle, fencing on (valgrind --tool=cachegrind; a longer run less a shorter "
         "one, so set-up cancels out): ours includes SQLite's own work for the statement; other load does not "
         "move these counts"]
    for n, r in sorted(ic.items()):
        o, q = r.get("ours"), r.get("bareq")
        rat = o / q if o and q else None
        L.append("  %-38s %5d %9s   bare hiredis%s %s   ratio %s" % (
            "ours (redlock.so in SQLite)", n, fmt(o, "%9.0f"), " at a quorum" if n > 1 else "", fmt(q, "%.0f"),
            fmt(rat, "%.3f")))
        if rat is not None:
            targets.append(("fencing on, %d node(s): instructions/cycle ours/bare%s" % (n, "-q" if n > 1 else ""),
                            "%.3f  no target: what the client code costs, free of noise" % rat))
    return L


def gap_lines(gaps):
    """The table rows of cycles_gaps."""
    L = ["Client time from a reply to its next request (bench/gap.c preloaded; 1 node, 2 per cycle): the client's "
         "own part of a cycle; rest = mean cycle - 2 x mean span (network and server); floor = SQLite and one PING "
         "per call (bench/floor.c), what no extension can take off"]
    for fencing in (1, 0):
        for k, label in (("ours", "ours"), ("bare", "bare hiredis"), ("floor", "floor: SQLite + PING")):
            if k == "floor" and not fencing:
                continue
            s = gaps[fencing].get(k) or {"error": "not run"}
            name = label if k == "floor" else "%s, fencing %s" % (label, "on" if fencing else "off")
            if "error" in s:
                L.append("  %-38s %5s  failed: %s" % (name, 1, s["error"]))
                continue
            rest = (s["mean_us"] - 2 * s["gap_mean_us"]) if s.get("mean_us") and s.get("gap_mean_us") else None
            L.append("  %-38s %5s %9s   span p50 %s us, mean %s us; rest of a cycle %s us" % (
                name, 1, fmt(s["rate"], "%9.0f"), fmt(s.get("gap_p50_us"), "%.2f"), fmt(s.get("gap_mean_us"), "%.2f"),
                fmt(rest, "%.1f")))
    return L


def cycles_shared(b, nodes, reps):
    """redlock_acquire_shared + release cycles beside exclusive ones (fencing
    on for the exclusive ones, as by default) and beside shared ones without
    holder details (holder_info 0), alternating:
    {n: {"exclusive":..., "shared":..., "shared_off":...}}."""
    res = {}
    for n in (1, 3, 5):
        runs = {"exclusive": [], "shared": [], "shared_off": []}
        for _ in range(reps):
            runs["exclusive"].append(b.ours(nodes[:n], 1))
            runs["shared"].append(b.ours(nodes[:n], 1, shared=True))
            runs["shared_off"].append(b.ours(nodes[:n], 1, shared=True, settings=["holder_info=0"]))
        res[n] = {k: summary(v) for k, v in runs.items()}
        print("bench: shared and exclusive, %d node(s): done" % n, flush=True)
    return res


def shared_lines(sh):
    L = ["Shared locks: redlock_acquire_shared + release (EVAL add-holder, EVAL release) beside "
         "redlock_acquire + release (fencing on), ratio = shared / exclusive; and beside shared cycles with "
         "holder_info 0, ratio on/off = what the holders' details cost; runs alternating"]
    for n in (1, 3, 5):
        s = sh[n]
        L.append(row("ours, exclusive", n, s["exclusive"]))
        L.append(row("ours, shared", n, s["shared"], rtxt(ratio(s["shared"], s["exclusive"]), "shared/excl")))
        L.append(row("ours, shared, holder_info 0", n, s["shared_off"],
                     rtxt(ratio(s["shared"], s["shared_off"]), "on/off")))
    return L


def cycles_hung(b, nodes, reps):
    """One of 3 and two of 5 nodes SIGSTOPped; ours on all, bare on the live ones."""
    res = {}
    for n, hung in ((3, [2]), (5, [3, 4])):
        for i in hung:
            nodes[i].stop()
        try:
            live = [x for i, x in enumerate(nodes[:n]) if i not in hung]
            runs = {"ours": [], "bare": []}
            for i in range(reps):
                order = (("ours", lambda: b.ours(nodes[:n], 1, live=live)), ("bare", lambda: b.bare(live, 1)))
                for k, run in order[i % 2:] + order[:i % 2]:
                    runs[k].append(run())
            res[n] = {k: summary(v) for k, v in runs.items()}
        finally:
            for i in hung:
                nodes[i].cont()
        print("bench: %d of %d hung: done" % (len(hung), n), flush=True)
    return res


def cycles_tls(b, nodes, reps, counts=(3,)):
    """Ours over TLS and in plain TCP, and node-redlock (ioredis) over TLS,
    to the same servers, interleaved (fencing off, as node-redlock has no
    fencing): {n: {"plain":..., "tls":..., "peer":...}}."""
    res = {}
    for n in counts:
        todo = [("plain", lambda: b.ours(nodes[:n], 0)), ("tls", lambda: b.ours(nodes[:n], 0, tls=True))]
        if b.node_ok:
            todo.append(("peer", lambda: b.peer(nodes[:n], tls=True)))
        res[n] = interleaved(todo, reps)
        print("bench: TLS and plain, %d nodes: done" % n, flush=True)
    return res


def cycles_ops(b, nodes, reps):
    """What the operator features cost, 3 nodes, fencing on, runs alternating:
    holder details on (the default) and off (holder_info 0); statistics on
    and compiled out (redlock_nostats.so, built with -DRL_STATS_OFF, holder
    details on in both); scripts by digest (evalsha 1, the default) and always
    in full (evalsha 0)."""
    runs = {"holder": [], "noholder": [], "nostats": [], "noevalsha": []}
    nostats = os.path.join(b.build, "redlock_nostats.so")
    # timeout_ms 500 in all three: a node slow for a moment on a loaded
    # host must not fail a run that measures something else
    t = ["timeout_ms=500"]
    for _ in range(reps):
        runs["holder"].append(b.ours(nodes[:3], 1, settings=t))
        runs["noholder"].append(b.ours(nodes[:3], 1, settings=t + ["holder_info=0"]))
        runs["nostats"].append(b.ours(nodes[:3], 1, ext=nostats, settings=t))
        runs["noevalsha"].append(b.ours(nodes[:3], 1, settings=t + ["evalsha=0"]))
    print("bench: holder details, statistics and EVALSHA: done", flush=True)
    return {k: summary(v) for k, v in runs.items()}


def ops_lines(ops, targets):
    L = ["Operator features, 3 nodes, fencing on, runs alternating (same servers)"]
    r_h = ratio(ops["holder"], ops["noholder"])
    L.append(row("ours, holder_info 0 (no details)", 3, ops["noholder"]))
    L.append(row("ours, holder_info 1 (default)", 3, ops["holder"], rtxt(r_h, "on/off")))
    L.append(row("ours, statistics compiled out", 3, ops["nostats"]))
    L.append(row("ours, statistics on (default)", 3, ops["holder"], rtxt(ratio(ops["holder"], ops["nostats"]),
                                                                          "with/without")))
    L.append(row("ours, evalsha 0 (scripts in full)", 3, ops["noevalsha"]))
    L.append(row("ours, evalsha 1 (default)", 3, ops["holder"], rtxt(ratio(ops["holder"], ops["noevalsha"]),
                                                                      "sha/full")))
    return L


# The commands a client sends; the rest of INFO commandstats are the
# scripts' own calls (counted apart: "with scripts"). Both ours (with
# holder_info or fencing on, the defaults) and node-redlock send their SET
# inside a script.
CLIENT_COMMANDS = ("eval", "evalsha", "subscribe", "unsubscribe", "ping", "info", "role", "select", "auth", "hello",
                   "client")


def commandstats(node):
    """(commands clients sent, every call including the scripts' own) since
    the last CONFIG RESETSTAT."""
    sent = every = 0
    for line in (resp(node.port, "INFO", "commandstats") or "").splitlines():
        if not line.startswith("cmdstat_") or line.startswith("cmdstat_config"):
            continue
        n = int(line.split("calls=")[1].split(",")[0])
        every += n
        if line[len("cmdstat_"):].split(":")[0].split("|")[0] in CLIENT_COMMANDS:
            sent += n
    return sent, every


def handoff(b, nodes, seconds, procs=4, peer=False, fair=None):
    """procs processes (ours: bench/driver.c, with fair: as fair
    connections; peer: node-redlock) contend for one lock on nodes;
    hand-off times, and with fair given (0 or 1) the commands each node ran
    per hand-off (INFO commandstats over the run)."""
    res_name = prefix("handoff") + "lock"
    shm = os.path.join(TMP, "handoff-%d.shm" % _seq[0])
    with open(shm, "wb") as f:
        f.write(b"\0" * 4096)
    urls = ",".join(n.url for n in nodes)
    lead = (2_000_000_000 if peer else 1_000_000_000) + procs * 40_000_000  # every process connected by then
    start = time.clock_gettime_ns(time.CLOCK_MONOTONIC) + lead
    end = start + int(seconds * 1e9)
    if peer:
        cmd = lambda i: ["node", os.path.join(HERE, "node_redlock.mjs"), "handoff", ",".join(str(n.port) for n in nodes),
                         res_name, str(i), shm, str(start), str(end)]
    else:
        cmd = lambda i: [os.path.join(b.build, "driver"), "handoff", EXT, urls, res_name, str(i), shm, str(start),
                         str(end)] + ([str(fair)] if fair is not None else [])
    ps = [spawn(cmd(i), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=HERE if peer else REPO)
          for i in range(procs)]
    if fair is not None or peer:
        time.sleep(max(0.0, (start - time.clock_gettime_ns(time.CLOCK_MONOTONIC)) / 1e9 - 0.05))
        for n in nodes:
            resp(n.port, "CONFIG", "RESETSTAT")
    # Mid-run: do the waiters use pub/sub or keyspace notifications on the nodes?
    time.sleep((start - time.clock_gettime_ns(time.CLOCK_MONOTONIC)) / 1e9 + seconds / 2)
    wake = "polling"
    try:
        chans = resp(nodes[0].port, "PUBSUB", "CHANNELS", "*") or []
        numpat = resp(nodes[0].port, "PUBSUB", "NUMPAT")
        if chans or numpat:
            wake = "pub/sub (%d channel(s), %d pattern(s) subscribed on node 1 mid-run)" % (len(chans), numpat)
    except (OSError, h.RedisError):
        pass
    events, errors = [], []
    for i, p in enumerate(ps):
        try:
            out, err = p.communicate(timeout=seconds + 30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            errors.append("process %d timed out" % i)
        if p.returncode != 0:
            errors.append("process %d: %s" % (i, (err.strip().splitlines() or ["exit %d" % p.returncode])[-1]))
        holder = None
        for line in out.splitlines():
            f = line.split()
            if len(f) < 4:
                continue
            if f[0] == "A":
                holder = {"id": int(f[1]), "a0": int(f[2]), "a1": int(f[3])}
            elif f[0] == "R" and holder:
                holder.update(r0=int(f[2]), r1=int(f[3]), ok=int(f[4]))
                events.append(holder)
                holder = None
        _children.remove(p)
    events.sort(key=lambda e: e["a1"])
    hand, overlaps, self_handoffs = [], 0, 0
    for prev, nxt in zip(events, events[1:]):
        if nxt["a1"] < prev["r0"]:
            overlaps += 1  # acquired before the holder even began to release: exclusion broken
        if nxt["id"] == prev["id"]:
            self_handoffs += 1
            continue
        hand.append((nxt["a1"] - prev["r0"]) / 1e6)
    not_released = sum(1 for e in events if e["ok"] != 1)
    hand.sort()
    out = {"n": len(hand), "wake": wake, "overlaps": overlaps, "self": self_handoffs, "not_released": not_released,
           "errors": errors, "holds": len(events)}
    if (fair is not None or peer) and len(events) > 1:
        counts = [commandstats(n) for n in nodes]
        out["sent_per_handoff"] = max(c[0] for c in counts) / float(len(events))
        out["every_per_handoff"] = max(c[1] for c in counts) / float(len(events))
    if hand:
        out["p50_ms"] = hand[len(hand) // 2]
        out["p99_ms"] = hand[min(len(hand) - 1, int(len(hand) * 0.99))]
        out["max_ms"] = hand[-1]
        out["slow"] = [h for h in hand if h > 20]
    print("bench: hand-off (%s): done" % ("node-redlock" if peer else "ours"), flush=True)
    return out


def queue_handoffs(b, nodes, seconds, counts=(4, 24, 64)):
    """Hand-offs with 4, 24 and 64 processes on one lock (3 nodes), default
    and fair, and node-redlock's at 4 and 24 (64 Node.js processes need
    more memory than the rest of the bench): {(who, n): handoff()}."""
    out = {}
    for n in counts:
        for who, kw in (("default", {"fair": 0}), ("fair", {"fair": 1}), ("node-redlock", {"peer": True})):
            if who == "node-redlock" and (not b.node_ok or n > 24):
                continue
            out[who, n] = handoff(b, nodes, seconds, procs=n, **kw)
    return out


def queue_keepalive(nodes, waiters=24, seconds=3.0):
    """What waiting in the queue costs while nothing is handed over: a holder
    keeps the lock and waiters fair connections (threads) queue behind it;
    the commands each node runs per waiter per second over seconds."""
    import sqlite3
    import threading
    os.environ["REDLOCK_NODES"] = ",".join(n.url for n in nodes)

    def conn():
        con = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        con.enable_load_extension(True)
        con.load_extension(EXT[:-3])
        con.execute("SELECT redlock_config('fair', 1)")
        return con
    key = prefix("keepalive") + "lock"
    holder = conn()
    holder.execute("SELECT redlock_acquire(?, 60000)", (key,)).fetchone()
    cons = [conn() for _ in range(waiters)]
    ts = [threading.Thread(target=lambda c=c: c.execute("SELECT redlock_acquire(?, 60000, 30000)",
                                                        (key,)).fetchone()) for c in cons]
    for t in ts:
        t.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (resp(nodes[0].port, "ZCARD", key + ":queue") or 0) < waiters + 1:
        time.sleep(0.01)
    time.sleep(0.5)  # every waiter past its first turns and subscribed
    for n in nodes:
        resp(n.port, "CONFIG", "RESETSTAT")
    time.sleep(seconds)
    counts = [commandstats(n) for n in nodes]
    holder.execute("SELECT redlock_release(?)", (key,)).fetchone()
    for t in ts:
        t.join(60)
    for c in cons + [holder]:
        c.execute("SELECT redlock_release_all()").fetchone()
        c.close()
    print("bench: queue keep-alive: done", flush=True)
    return {"waiters": waiters, "seconds": seconds,
            "sent": max(c[0] for c in counts) / float(waiters) / seconds,
            "every": max(c[1] for c in counts) / float(waiters) / seconds}


def queue_lines(qh, ka):
    L = ["Fair queues (redlock_config('fair', 1)) against the default waiting: N processes on one lock, 3 nodes, "
         "each holding it 1 ms and waiting again once another took it; hand-off = release call -> next "
         "holder's acquire return; commands = what the busiest node ran per hand-off (INFO commandstats: "
         "sent by clients, and with the scripts' own calls)"]
    L.append("  %-14s %4s  %9s %9s %9s  %11s %13s  %s" % ("", "N", "p50 ms", "p99 ms", "max ms", "cmds sent",
                                                        "with scripts", "hand-offs"))
    for (who, n), r in sorted(qh.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        if "p50_ms" not in r:
            L.append("  %-14s %4d  none measured %s" % (who, n, "; ".join(r.get("errors", []))[:200]))
            continue
        L.append("  %-14s %4d  %9.2f %9.2f %9.2f  %11.1f %13.1f  %d%s" % (
            who, n, r["p50_ms"], r["p99_ms"], r["max_ms"], r.get("sent_per_handoff", float("nan")),
            r.get("every_per_handoff", float("nan")), r["n"],
            "  OVERLAPS %d" % r["overlaps"] if r.get("overlaps") else ""))
    if ka:
        L.append("  keep-alive: %d fair waiters queued behind a held lock cost each node %.2f commands per waiter "
                 "per second (%.1f with the scripts' own calls), over %.0f s" % (
                     ka["waiters"], ka["sent"], ka["every"], ka["seconds"]))
    return L


def check_commands(b, node):
    """MONITORs one node while ours (the sqlite3 shell) and bare each run a
    cycle with fencing on and off; the commands must be the same once the
    key, token and holder details are written as KEY, TOKEN and DETAILS."""
    import re
    mon = socket.create_connection(("127.0.0.1", node.port), timeout=5)
    mon.sendall(b"*1\r\n$7\r\nMONITOR\r\n")
    f = mon.makefile("rb")
    if f.readline().strip() != b"+OK":
        return "could not MONITOR"
    ko, kb = prefix("chk").replace(":", "_") + "ours", prefix("chk").replace(":", "_") + "bare"
    env = dict(os.environ, REDLOCK_NODES=node.url)
    subprocess.run([SQLITE3, ":memory:", ".load %s" % EXT[:-3],
                    # a first cycle runs each script in full, caching it on the node; compared are later ones
                    "SELECT redlock_release('%s0', redlock_acquire('%s0', 10000));" % (ko, ko),
                    "SELECT redlock_release('%s1', redlock_acquire('%s1', 10000));" % (ko, ko),
                    "SELECT redlock_config('fencing', 0);",
                    "SELECT redlock_release('%s2', redlock_acquire('%s2', 10000));" % (ko, ko)],
                   env=env, capture_output=True, timeout=20)
    bare = os.path.join(b.build, "bare")
    subprocess.run([bare, node.hostport, "1", kb + "f", "0"], capture_output=True, timeout=20)
    subprocess.run([bare, node.hostport, "0", kb + "s", "0"], capture_output=True, timeout=20)
    resp(node.port, "PING")  # a marker after everything above
    seen = {"ours": [], "bare": []}
    tok = re.compile(r'"[0-9a-f]{60}"')
    # holder details name the process (host, pid, program, time): each client its own
    details = re.compile(r'"redlock1\\x1f[^"]*"')
    mon.settimeout(5)
    try:
        while True:
            line = f.readline().decode(errors="replace").strip()
            if not line or line.endswith('"PING"') or line.endswith('"ping"'):
                break
            if "[0 lua]" in line or "]" not in line:
                continue
            cmd = line.split("] ", 1)[1]
            for who, k, keys in (("ours", ko, (ko + "1", ko + "2")), ("bare", kb, (kb + "f2", kb + "s2"))):
                for key in keys:
                    if '"%s"' % key in cmd:
                        seen[who].append(details.sub('"DETAILS"', tok.sub('"TOKEN"', cmd.replace(key, "KEY"))))
    except OSError:
        pass
    mon.close()
    if not seen["ours"] or seen["ours"] != seen["bare"]:
        return "DIFFERENT:\n      ours: %s\n      bare: %s" % (
            "\n            ".join(x[:140] for x in seen["ours"]), "\n            ".join(x[:140] for x in seen["bare"]))
    return "identical (%d commands per cycle pair compared on node 1 with MONITOR)" % len(seen["ours"])


def vmrss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return None


def memory(b, nodes, target_cycles, budget_s):
    """The sqlite3 shell: RSS after a 2,000-cycle warm-up and after many more cycles."""
    env = dict(os.environ, REDLOCK_NODES=",".join(n.url for n in nodes))
    p = spawn([SQLITE3, "-batch", "-bail", ":memory:"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
              stderr=subprocess.PIPE, env=env, bufsize=0)
    res = {}

    buf = [b""]

    def say(sql, mark, timeout):
        """Sends sql and a marker statement; returns the output lines before the marker."""
        p.stdin.write((sql + "\nSELECT '%s';\n" % mark).encode())
        p.stdin.flush()
        deadline = time.monotonic() + timeout
        lines = []
        while True:
            while b"\n" in buf[0]:
                line, buf[0] = buf[0].split(b"\n", 1)
                line = line.decode(errors="replace").strip()
                if line == mark:
                    return lines
                lines.append(line)
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError("sqlite3 shell: no answer within %d s" % timeout)
            if select.select([p.stdout], [], [], left)[0]:
                chunk = os.read(p.stdout.fileno(), 65536)
                if not chunk:
                    raise RuntimeError("sqlite3 shell ended: %s" % p.stderr.read().decode(errors="replace").strip()[:200])
                buf[0] += chunk

    stmt = "SELECT sum(redlock_release('%s', redlock_acquire('%s', 10000))) FROM generate_series(1, %d);"
    key = prefix("mem") + "lock"
    try:
        say(".load %s" % EXT[:-3], "loaded", 10)
        res["rss_loaded"] = vmrss_kib(p.pid)
        warm = 2000
        t = time.monotonic()
        got = say(stmt % (key, key, warm), "warm", 60)
        warm_s = time.monotonic() - t
        if got != [str(warm)]:
            raise RuntimeError("warm-up returned %r, not %d" % (got, warm))
        res["rss_before"] = vmrss_kib(p.pid)
        n = min(target_cycles, max(10000, int(warm / warm_s * budget_s)))
        half = n // 2
        res["cycles"] = 2 * half
        t = time.monotonic()
        for i, mark in ((1, "half"), (2, "done")):
            got = say(stmt % (key, key, half), mark, budget_s * 4 + 60)
            if got != [str(half)]:
                raise RuntimeError("the statement returned %r, not %d" % (got, half))
            res["rss_%s" % mark] = vmrss_kib(p.pid)
        res["seconds"] = time.monotonic() - t
        res["rss_after"] = res["rss_done"]
        res["rate"] = res["cycles"] / res["seconds"]
    except (RuntimeError, OSError) as e:
        res["error"] = str(e)
    finally:
        try:
            p.stdin.close()
            p.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            p.kill()
        _children.remove(p)
    print("bench: memory: done", flush=True)
    return res


# --------------------------------------------------------------------------
# the table
# --------------------------------------------------------------------------


def keep_alive(b, nodes, locks, seconds, ttl_ms=3000):
    """driver keep: LOCKS auto-extended locks kept alive for SECONDS; client
    CPU per lock per extension against one acquire+release cycle's CPU."""
    r = run_json([os.path.join(b.build, "driver"), "keep", EXT, ",".join(n.url for n in nodes), prefix("keep"),
                  str(locks), str(ttl_ms), str(seconds)], timeout=seconds + 240)
    print("bench: keep %d locks alive for %.0f s: done" % (locks, seconds), flush=True)
    return r


def keep_rows(k, targets):
    """The table lines of keep_alive's result k; adds its targets."""
    L = ["Keeping locks alive: auto_extend on, 3 nodes; the keeper extends every due lock in one script call per node"]
    if "error" in k:
        L.append("  keep-alive: failed: %s" % k["error"])
        return L
    tgt = verdict(k["ratio"], 0.1, "<=")
    lost_tgt = verdict(k["lost"], 0, "<=")
    targets.append(("keep %d locks: CPU per extension / cycle CPU" % k["locks"], tgt))
    targets.append(("keep %d locks for %.0f s: locks lost" % (k["locks"], k["seconds"]), lost_tgt))
    L.append("  keep %d auto-extended locks (TTL %.0f s) alive for %.0f s: %d extensions, client CPU %.3f s "
             "(all threads, getrusage)" % (k["locks"], k["ttl_ms"] / 1000.0, k["seconds"], k["extensions"], k["cpu_s"]))
    L.append("    CPU per lock per extension %.2f us; one acquire+release cycle %.1f us CPU (same process)   "
             "ratio %.3f   %s" % (k["cpu_per_ext_us"], k["cycle_cpu_us"], k["ratio"], tgt))
    L.append("    locks lost or not held at the end: %d of %d   %s   (taking them: %.1f s; VmRSS %.0f bytes per "
             "held lock)" % (k["lost"], k["locks"], lost_tgt, k["take_seconds"], k.get("rss_bytes_per_lock", -1)))
    return L


def keeper_conns(b, nodes, counts=(1, 10, 100, 200), seconds=5.0):
    """driver conns: N connections in one process, each with auto_extend and
    one lock kept alive (its own keeper thread); threads, RSS and CPU per
    connection."""
    res = {}
    for n in counts:
        res[n] = run_json([os.path.join(b.build, "driver"), "conns", EXT, ",".join(x.url for x in nodes),
                           prefix("conns"), str(n), str(seconds)], timeout=seconds + 120)
    print("bench: connections with auto-extension: done", flush=True)
    return res


def conns_rows(res):
    L = ["Connections with auto-extension, one process, 3 nodes: each connection holds one lock (TTL 3 s) and "
         "runs its own keeper thread"]
    L.append("  %-10s %12s %16s %18s %16s %6s" % ("conns", "threads/conn", "RSS KiB/conn", "+RSS KiB, idle run",
                                                "CPU us/conn/s", "lost"))
    for n, r in sorted(res.items()):
        if "error" in r:
            L.append("  %-10d failed: %s" % (n, r["error"]))
            continue
        L.append("  %-10d %12.2f %16.1f %18d %16.1f %6d" % (n, r["threads_per_conn"], r["rss_kib_per_conn"],
                                                          r["rss_growth_kib"], r["cpu_us_per_conn_s"], r["lost"]))
    L.append("  (RSS per connection at 1 includes loading the extension and its libraries; CPU: getrusage of all "
             "threads while idle, per second, divided by the connections)")
    return L


def run_many(cmds, timeout):
    """Runs every command at once; returns their JSON results (run_json's)."""
    procs = [spawn(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO) for c in cmds]
    out = []
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            o, e = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
            out.append({"error": "timed out"})
            continue
        finally:
            if p in _children:
                _children.remove(p)
        lines = o.strip().splitlines()
        try:
            out.append(json.loads(lines[-1]) if p.returncode == 0 and lines else
                       {"error": (e.strip().splitlines() or ["exit %d" % p.returncode])[-1][:160]})
        except ValueError:
            out.append({"error": "bad output"})
    return out


def aggregate(runs):
    errs = [r["error"] for r in runs if "error" in r]
    if errs:
        return {"error": errs[0]}
    return {"rate": sum(r["rate"] for r in runs), "p50_us": statistics.median(r["p50_us"] for r in runs)}


def growth(b, nodes, seconds):
    """Cycles/s and p50 for 1..9 nodes, and for 1..64 connections in threads
    of one process, in processes, and bare hiredis processes (3 nodes)."""
    extra = [Node(5 + i) for i in range(4)]
    allnodes = nodes[:5] + extra
    res = {"nodes": {}, "conc": {}}
    try:
        for n in (1, 3, 5, 7, 9):
            res["nodes"][n] = {"ours": b.ours(allnodes[:n], 1), "bare": b.bare(allnodes[:n], 1)}
        print("bench: growth with nodes: done", flush=True)
        three = nodes[:3]
        urls = ",".join(x.url for x in three)
        drv = os.path.join(b.build, "driver")
        for t in (1, 4, 16, 64):
            r = {}
            r["threads"] = run_json([drv, "threads", EXT, urls, prefix("thr"), str(t), str(seconds)],
                                    timeout=seconds * 4 + 60 + t)
            r["procs"] = aggregate(run_many([[drv, "cycles", EXT, urls, "1", prefix("pr"), str(seconds)]
                                              for _ in range(t)], seconds * 8 + 60 + t))
            r["bare"] = aggregate(run_many([[os.path.join(b.build, "bare"), ",".join(x.hostport for x in three), "1",
                                              prefix("bp"), str(seconds)] for _ in range(t)], seconds * 4 + 60 + t))
            res["conc"][t] = r
        print("bench: growth with connections: done", flush=True)
    finally:
        for x in extra:
            x.terminate()
    return res


def growth_rows(g):
    def cell(r):
        if not r or "error" in r:
            return "%9s %7s" % ("failed", "") if r else "%9s %7s" % ("-", "")
        return "%9.0f %7.0f" % (r["rate"], r["p50_us"])
    L = ["How cost grows, fencing on: cycles/s and p50 us (aggregate cycles/s for many connections)"]
    L.append("  %-6s %17s %17s" % ("nodes", "ours  cyc/s  p50", "bare  cyc/s  p50"))
    for n, r in sorted(g["nodes"].items()):
        L.append("  %-6d %17s %17s" % (n, cell(r["ours"]), cell(r["bare"])))
    L.append("  %-6s %17s %17s %17s   (3 nodes; bare: one hiredis process per connection)" % (
        "conns", "threads, 1 proc", "processes", "bare processes"))
    for t, r in sorted(g["conc"].items()):
        L.append("  %-6d %17s %17s %17s" % (t, cell(r["threads"]), cell(r["procs"]), cell(r["bare"])))
    # a failed run says why, so a node timeout under load is told from a fault
    for what, group in (("nodes", g["nodes"]), ("conns", g["conc"])):
        for k, r in sorted(group.items()):
            for who, x in sorted(r.items()):
                if x and "error" in x:
                    L.append("  failed (%s %d, %s): %s" % (what, k, who, x["error"][:150]))
    return L


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU model"


def machine():
    model = cpu_model()
    redis_v = subprocess.run([h.REDIS_SERVER, "--version"], capture_output=True, text=True).stdout.split()
    redis_v = next((w[2:] for w in redis_v if w.startswith("v=")), "?")
    sqlite_v = subprocess.run([SQLITE3, "--version"], capture_output=True, text=True).stdout.split()[:1]
    return "%d CPUs (nproc), %s; Linux %s; redis %s; sqlite3 %s" % (
        os.cpu_count(), model, platform.release(), redis_v, (sqlite_v or ["?"])[0])


def fmt(v, spec="%8.0f"):
    return spec % v if isinstance(v, (int, float)) else "%8s" % "-"


HEAD_FMT = "  %-38s %5s %9s %-13s %6s %6s %7s %7s   %-20s %s"


def row(label, nodes, s, ratio="", target=""):
    if s is None:
        return None
    if "error" in s:
        return "  %-38s %5s  failed: %s" % (label, nodes, s["error"])
    spread = "%.0f-%.0f" % (s["rate_min"], s["rate_max"]) if "rate_min" in s else "-"
    if "failed" in s:
        target = (target + " " if target else "") + "(" + s["failed"] + ")"
    return HEAD_FMT % (
        label, nodes, fmt(s["rate"], "%9.0f"), spread, fmt(s["p50_us"], "%6.0f"), fmt(s["p99_us"], "%6.0f"),
        fmt(s["cpu_us"], "%7.1f"), fmt(s.get("srv_us"), "%7.1f"), ratio, target)


def ratio(a, b, key="rate"):
    if not a or not b or "error" in a or "error" in b or not b.get(key) or a.get(key) is None:
        return None
    return a[key] / b[key]


def rtxt(r, what):
    return "" if r is None else "%.3f %s" % (r, what)


def verdict(r, need, cmp=">="):
    if r is None:
        return "not measured"
    ok = r >= need if cmp == ">=" else r <= need if cmp == "<=" else r < need
    return "%s %s: %s" % (cmp, need, "PASS" if ok else "MISS")


def run_target(targets, what, pr, need, cmp=">=", noise=None):
    """Adds target `what` judged on pr (per_run's median of per-run
    ratios), with the spread of those ratios beside it. noise: how far
    the row's A/A control moved from 1 (noise alone); a median closer to
    its bound than that is flagged."""
    if pr is None:
        targets.append((what, "not measured"))
        return "not measured"
    v = verdict(pr[0], need, cmp)
    flag = " (nearer its bound than the A/A control is to 1)" if noise is not None and abs(pr[0] - need) < noise else ""
    targets.append((what, "%.3f (%.3f-%.3f, %d runs)  %s%s" % (pr[0], pr[1], pr[2], pr[3], v, flag)))
    return v


def prtxt(pr, what):
    """A per-run ratio for the ratio column."""
    return "" if pr is None else "%.3f %s" % (pr[0], what)


def healthy_lines(healthy, counts, targets, b, peer_v, tag=""):
    """The rows and the targets of cycles_healthy (or of pinned, tag set)."""
    L = []
    if not healthy:
        return L
    for fencing in (1, 0) if healthy and not tag else (0,):
        onoff = "on" if fencing else "off"
        if tag:
            L.append("Pinned (taskset): the nodes on CPU 0, each client on CPU 1, fencing off; other processes of "
                     "the machine still run on both")
        elif fencing:
            L.append("Healthy, fencing on: acquire script (SET NX PX, INCR), then release script; EVALSHA after a "
                     "first EVAL")
        else:
            L.append("Healthy, fencing off (redlock_config('fencing', 0)): SET NX PX, then release script; "
                     "holder_info 0 beside it")
        for n in counts:
            hh = healthy.get(n) if tag else healthy.get((fencing, n))
            if not hh:
                continue
            runs = hh["_runs"]
            o, bare, bq, pe, nh = hh.get("ours"), hh.get("bare"), hh.get("bareq"), hh.get("peer"), hh.get("noholder")
            limit_k = "bareq" if (n > 1 or tag) else "bare"
            lim = runs.get(limit_k)
            pr_q = per_run(runs["ours"], lim) if lim else None
            pr_cpu = per_run(runs["ours"], lim, "cpu_us") if lim else None
            where = "%s, %d node(s)%s" % ("fencing " + onoff if not tag else "pinned", n, "")
            pr_aa = per_run(runs["ours"], runs["again"]) if runs.get("again") else None
            noise = abs(1 - pr_aa[0]) if pr_aa else None
            tgt_q = run_target(targets, "%s: ours/bare%s cycles/s" % (where, "-q" if n > 1 else ""), pr_q, 0.97,
                               noise=noise)
            run_target(targets, "%s: client CPU/cycle ours/bare%s" % (where, "-q" if n > 1 else ""), pr_cpu, 1.10,
                       "<=")
            L.append(row("ours: redlock.so in SQLite", n, o))
            if tag:
                L.append(row("bare hiredis, goes on at a quorum" if n > 1 else "bare hiredis", n, bq,
                             prtxt(pr_q, "ours/bare-q"), tgt_q))
            elif n > 1:
                L.append(row("bare hiredis, waits for all replies", n, bare,
                             prtxt(per_run(runs["ours"], runs["bare"]), "ours/bare")))
                L.append(row("bare hiredis, goes on at a quorum", n, bq, prtxt(pr_q, "ours/bare-q"), tgt_q))
            else:
                L.append(row("bare hiredis", n, bare, prtxt(pr_q, "ours/bare"), tgt_q))
            if hh.get("again"):
                L.append(row("ours again (A/A control: noise alone)", n, hh["again"], prtxt(pr_aa, "ours/ours")))
                if pr_aa:
                    targets.append(("%s: A/A control, ours/ours cycles/s" % where,
                                    "%.3f (%.3f-%.3f, %d runs)  no target: the noise of this row's ratios" % pr_aa))
            if nh:
                pr_h = per_run(runs["ours"], runs["noholder"])
                tgt_h = run_target(targets, "holder_info on/off, %d node(s): cycles/s" % n, pr_h, 0.95)
                L.append(row("ours, holder_info 0", n, nh, prtxt(pr_h, "on/off"), tgt_h))
            if pe:
                pr_p = per_run(runs["ours"], runs["peer"])
                tgt_p = run_target(targets, "%s: ours/node-redlock cycles/s" % where, pr_p, 1.1)
                run_target(targets, "%s: node-redlock's client CPU/cycle / ours" % where,
                           per_run(runs["peer"], runs["ours"], "cpu_us"), 1.5)
                if not tag:
                    run_target(targets, "%s: nodes' CPU/cycle ours/node-redlock" % where,
                               per_run(runs["ours"], runs["peer"], "srv_us"), 1.0, "<=")
                L.append(row("node-redlock %s (ioredis)" % (pe.get("version") or peer_v or ""), n, pe,
                             prtxt(pr_p, "ours/node"), tgt_p))
        if not fencing and not b.node_ok:
            L.append("  " + b.node_note)
    return L


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--build", default="build/bench", help="where bare and driver were built")
    ap.add_argument("--seconds", type=float, default=1.0, help="seconds per throughput measurement")
    ap.add_argument("--reps", type=int, default=7,
                    help="repetitions of the measurements with targets (healthy, pinned, tls, hung): medians shown")
    ap.add_argument("--info-reps", type=int, default=3,
                    help="repetitions of the rows without targets (gaps, shared, ops, latency)")
    ap.add_argument("--latency-seconds", type=float, default=2.0, help="seconds per run of the latency rows")
    ap.add_argument("--handoff-seconds", type=float, default=8.0)
    ap.add_argument("--queue-seconds", type=float, default=3.0, help="seconds per row of the fair-queue table")
    ap.add_argument("--no-peer", action="store_true", help="skip node-redlock")
    ap.add_argument("--mem-cycles", type=int, default=1_000_000)
    ap.add_argument("--mem-seconds", type=float, default=20.0, help="scale the memory test down to about this long")
    ap.add_argument("--keep-locks", type=int, default=10000, help="locks the keep-alive row keeps alive")
    ap.add_argument("--keep-seconds", type=float, default=20.0, help="how long the keep-alive row keeps them (quick: 10)")
    ap.add_argument("--growth-only", action="store_true", help="run only the growth tables (nodes, connections)")
    ap.add_argument("--keep-only", action="store_true", help="run only the keep-alive rows (locks kept alive, connections with auto-extension)")
    ap.add_argument("--only", default="healthy,pinned,latency,gaps,instr,shared,tls,hung,ops,handoff,queue,memory,keep,growth,many",
                    help="comma-separated parts to run: healthy, pinned, latency, gaps, instr, shared, tls, hung, ops, "
                         "handoff, queue (fair queues against the default waiting at 4, 24 and 64 waiters), "
                         "memory, keep, growth, many (default: all; pinned: the fencing-off rows with the "
                         "nodes and the client on different CPUs; latency: nodes behind delay proxies; "
                         "gaps: the client's time from a reply to its next request, "
                         "ours and bare; instr: their instructions per cycle (valgrind); ops: holder details and statistics; keep: locks kept alive "
                         "and connections with auto-extension; growth: cost with nodes and connections; many "
                         "alone runs the acquire_many rows on 3 nodes)")
    ap.add_argument("--nodes", default="1,3,5", help="node counts of the healthy rows (default 1,3,5)")
    a = ap.parse_args()
    parts = set(x.strip() for x in a.only.split(",") if x.strip())
    if a.growth_only:
        parts = {"growth"}
    if a.keep_only:
        parts = {"keep"}
    bad = parts - {"healthy", "pinned", "latency", "gaps", "instr", "shared", "tls", "hung", "ops", "handoff",
                   "queue", "memory", "keep", "growth", "many"}
    if bad:
        raise SystemExit("bench: unknown part(s) in --only: %s" % ", ".join(sorted(bad)))
    if parts == {"many"}:
        return main_many(a)
    try:
        counts = tuple(int(x) for x in a.nodes.split(",") if x.strip())
    except ValueError:
        counts = ()
    if not counts or any(c not in (1, 3, 5) for c in counts):
        raise SystemExit("bench: --nodes takes 1, 3 and/or 5, comma-separated")
    for f in (EXT, os.path.join(REPO, a.build, "driver"), os.path.join(REPO, a.build, "bare")):
        if not os.path.exists(f):
            raise SystemExit("bench: %s is missing; run make bench" % f)
    t_start = time.monotonic()
    load0 = open("/proc/loadavg").read().split()[0]
    b = Bench(a)
    b.setup_peer()
    head = machine()
    print("bench: starting 5 redis-server nodes on loopback", flush=True)
    if parts == {"ops"}:
        nodes = [Node(i) for i in range(3)]
        targets = []
        L = ["redlock bench (ops rows only): %s" % head,
             "One cycle = acquire + release of a fresh lock (TTL 10 s) from SQL; medians of %d runs of %.1f s." % (
                 a.info_reps, a.seconds), ""] + ops_lines(cycles_ops(b, nodes, a.info_reps), targets)
        cleanup()
        L += ["  %-52s %s" % t for t in targets]
        print()
        print("\n".join(L))
        return
    certs = make_certs()
    nodes = [Node(i, certs) for i in range(5)]
    if parts == {"growth"}:
        lines = growth_rows(growth(b, nodes, a.seconds))
        cleanup()
        print("\n".join(["", "redlock bench: %s" % head] + lines))
        return
    if parts == {"keep"}:
        targets = []
        lines = keep_rows(keep_alive(b, nodes[:3], a.keep_locks, a.keep_seconds), targets)
        lines += conns_rows(keeper_conns(b, nodes[:3]))
        cleanup()
        print("\n".join(["", "redlock bench: %s" % head] + lines))
        return
    if parts == {"queue"}:
        lines = queue_lines(queue_handoffs(b, nodes[:3], a.queue_seconds), queue_keepalive(nodes[:3]))
        cleanup()
        print("\n".join(["", "redlock bench: %s" % head] + lines))
        return 0
    if parts == {"shared"}:
        sh = cycles_shared(b, nodes, a.info_reps)
        cleanup()
        print("\n".join(["redlock bench: %s" % head, "medians of %d runs of %.1f s" % (a.info_reps, a.seconds)] +
                        shared_lines(sh)))
        return 0
    same = check_commands(b, nodes[0])
    healthy = cycles_healthy(b, nodes, a.reps, counts) if "healthy" in parts else {}
    pin = pinned(b, nodes, a.reps, tuple(x for x in counts if x < 5)) if "pinned" in parts else {}
    lat = latency(b, nodes, min(a.info_reps, 3), a.latency_seconds) if "latency" in parts else None
    gaps = cycles_gaps(b, nodes, a.info_reps) if "gaps" in parts else None
    instr = instruction_counts(b, nodes, tuple(x for x in counts if x < 5)) if "instr" in parts else None
    sh = cycles_shared(b, nodes, a.info_reps) if "shared" in parts else None
    tls = (cycles_tls(b, nodes, a.reps) if certs else None) if "tls" in parts else {}
    hung = cycles_hung(b, nodes, a.reps) if "hung" in parts else {}
    ops = cycles_ops(b, nodes, a.info_reps) if "ops" in parts else None
    ho = handoff(b, nodes[:3], a.handoff_seconds) if "handoff" in parts else None
    ho_peer = handoff(b, nodes[:3], a.handoff_seconds, peer=True) if b.node_ok and ho is not None else None
    qh = queue_handoffs(b, nodes[:3], a.queue_seconds) if "queue" in parts else None
    ka = queue_keepalive(nodes[:3]) if "queue" in parts else None
    mem = memory(b, nodes[:3], a.mem_cycles, a.mem_seconds) if "memory" in parts else None
    keep = keep_alive(b, nodes[:3], a.keep_locks, a.keep_seconds) if "keep" in parts else None
    kconns = keeper_conns(b, nodes[:3]) if "keep" in parts else None
    growth_res = growth(b, nodes, a.seconds) if "growth" in parts else None
    mny = None
    if "many" in parts:
        try:
            mny = many.measure(EXT, [n.url for n in nodes[:3]], a.seconds, a.info_reps)
        except Exception as e:  # noqa: BLE001 (one failed part must not cost the whole table)
            mny = {"error": str(e)[:300]}
    peer_v = next((s.get("version") for s in [healthy.get((0, n), {}).get("peer") for n in counts] if s), None)
    cleanup()

    L = []
    L.append("redlock bench: %s" % head)
    L.append("One cycle = acquire + release of a fresh lock (TTL 10 s) from SQL; every figure from this run; "
             "medians of %d runs of %.1f s (rows without a target: %d), ours, bare and node-redlock interleaved "
             "in a rotating order; spread = min-max cycles/s of the runs; ratio = the median of the ratios of "
             "runs of the same repetition; cpu us = the client's CPU per cycle (getrusage), redis us = all its "
             "nodes' CPU per cycle (INFO cpu deltas, warm-up included)." % (a.reps, a.seconds, a.info_reps))
    L.append("Commands of ours and of the bare client: %s" % same)
    L.append("")
    L.append(HEAD_FMT % ("", "nodes", "cycles/s", "spread", "p50 us", "p99 us", "cpu us", "redis us", "ratio",
                         "target"))
    targets = []
    L += healthy_lines(healthy, counts, targets, b, peer_v)
    if pin:
        L += healthy_lines(pin, sorted(pin), targets, b, peer_v, tag="pinned")
    elif pin is None and "pinned" in parts:
        L.append("Pinned rows skipped: taskset is missing, or fewer than 2 CPUs")
    if lat is not None:
        L += latency_lines(lat, targets)
    if gaps is not None:
        L += gap_lines(gaps)
    if instr:
        L += instruction_lines(instr, targets)
    if tls != {}:
        L.append("TLS (rediss://, TLS 1.3, EC P-256 certificate, verified), fencing off; the same servers serve "
                 "both; node-redlock on ioredis over TLS to them; runs interleaved")
    if tls is None:
        L.append("  TLS rows skipped: the openssl command could not make certificates")
    for n in sorted(tls) if tls else ():
        t, runs = tls[n], tls[n]["_runs"]
        pr_cpu = per_run(runs["tls"], runs["plain"], "cpu_us")
        tgt_cpu = run_target(targets, "TLS %d nodes: client CPU/cycle TLS/plain" % n, pr_cpu, 1.5, "<=")
        L.append(row("ours, plain TCP", n, t["plain"]))
        L.append(row("ours, TLS", n, t["tls"], prtxt(per_run(runs["tls"], runs["plain"]), "TLS/plain"),
                     "cpu " + prtxt(pr_cpu, "TLS/plain") + " " + tgt_cpu))
        if t.get("peer"):
            pr_p = per_run(runs["tls"], runs["peer"])
            tgt_p = run_target(targets, "TLS %d nodes: ours/node-redlock cycles/s, both TLS" % n, pr_p, 1.1)
            L.append(row("node-redlock (ioredis), TLS", n, t["peer"], prtxt(pr_p, "ours/node"), tgt_p))
    if sh is not None:
        L += shared_lines(sh)
    if hung:
        L.append("Hung minority (kill -STOP), fencing on; ratio = ours hung / bare client on the live nodes "
                 "(the limit for any client), ours hung / ours healthy beside it")
    for n, label in ((3, "1 of 3"), (5, "2 of 5")) if hung else ():
        h = hung[n]
        r = ratio(h["ours"], h["bare"])
        tgt = verdict(r, 0.95)
        targets.append(("%s hung, ours/bare on the live nodes" % label, tgt))
        of_healthy = ratio(h["ours"], healthy.get((1, n), {}).get("ours")) if healthy else None
        L.append(row("ours, %s nodes hung" % label, n, h["ours"], rtxt(r, "ours/bare-live"),
                     tgt + ("" if of_healthy is None else " (%.3f of ours healthy)" % of_healthy)))
        L.append(row("bare hiredis on the %d live nodes only" % (n - (1 if n == 3 else 2)), n, h["bare"]))
    if ops is not None:
        L += ops_lines(ops, targets)
    if ho is not None:
        L.append("Hand-off under contention: 4 processes on one lock, 3 nodes; release call -> next holder's acquire "
                 "return")
    if ho is None:
        pass
    elif "p50_ms" in ho:
        tgt = verdict(ho["p50_ms"], 2, "<")
        targets.append(("hand-off median, 4 waiters, 3 nodes (ms)", tgt))
        L.append("  %-40s %5s  p50 %.2f ms  p99 %.2f ms  max %.2f ms  (%d hand-offs)   %s" % (
            "ours, wake-up: " + ho["wake"].split(" (")[0], 3, ho["p50_ms"], ho["p99_ms"], ho["max_ms"], ho["n"], tgt))
        if ho["wake"] != "polling":
            slow = ho.get("slow", [])
            L.append("    %s; %d hand-off(s) over 20 ms%s" % (
                ho["wake"], len(slow), (" (%s ms; 100-300 ms is one retry delay: no wake-up came)" % ", ".join(
                    "%.0f" % x for x in slow[:8])) if slow else ""))
        else:
            L.append("    waiters poll: retry_delay_ms 200 +- retry_jitter_ms 100 (no pub/sub seen on the nodes)")
    else:
        L.append("  hand-off: no hand-off measured")
    problems = []
    ho = ho or {}
    if ho.get("overlaps"):
        problems.append("%d OVERLAPPING holders (mutual exclusion broken!)" % ho["overlaps"])
    if ho.get("not_released"):
        problems.append("%d releases did not return 1" % ho["not_released"])
    if ho.get("self"):
        problems.append("%d self hand-offs skipped" % ho["self"])
    problems += ho.get("errors", [])
    if problems:
        L.append("    " + "; ".join(problems))
    if ho_peer and "p50_ms" in ho_peer:
        L.append("  %-40s %5s  p50 %.2f ms  p99 %.2f ms  max %.2f ms  (%d hand-offs)   ours/node p50 %.3f" % (
            "node-redlock, polling 200+-100 ms", 3, ho_peer["p50_ms"], ho_peer["p99_ms"], ho_peer["max_ms"],
            ho_peer["n"], ho["p50_ms"] / ho_peer["p50_ms"] if "p50_ms" in ho else float("nan")))
        if ho_peer.get("overlaps") or ho_peer.get("errors"):
            L.append("    node-redlock: %d overlapping holders; %s" % (ho_peer.get("overlaps", 0),
                                                                     "; ".join(ho_peer.get("errors", []))))
    elif ho_peer:
        L.append("  node-redlock hand-off: none measured %s" % "; ".join(ho_peer.get("errors", [])))
    if qh is not None:
        L += queue_lines(qh, ka)
    if mem is not None:
        L.append("Memory: sqlite3 shell, 3 nodes, SELECT sum(redlock_release(k, redlock_acquire(k, 10000))) "
                 "FROM generate_series(1, N)")
    if mem is None:
        pass
    elif "error" in mem:
        L.append("  memory: failed: %s" % mem["error"])
    else:
        grow = mem["rss_after"] - mem["rss_before"]
        second = mem["rss_after"] - mem["rss_half"]
        scaled = mem["cycles"] < 1_000_000
        # Below 1,000,000 cycles: what was measured, plus the second half's
        # (steady) slope over the cycles not run.
        per_m = grow + (second * (1_000_000 - mem["cycles"]) / (mem["cycles"] // 2) if scaled else 0)
        tgt = verdict(per_m, 1024, "<")
        targets.append(("RSS growth over 1,000,000 cycles (KiB)", tgt + (" (projected)" if scaled else "")))
        L.append("  VmRSS: %d KiB after .load, %d KiB after 2,000 warm-up cycles, %d KiB after %d more, "
                 "%d KiB after %d more" % (mem["rss_loaded"], mem["rss_before"], mem["rss_half"], mem["cycles"] // 2,
                                           mem["rss_after"], mem["cycles"] // 2))
        if scaled:
            L.append("  growth %+d KiB over %d cycles (%+d KiB in the second half); over 1,000,000 cycles, with the "
                     "second half's slope: %+.0f KiB   %s" % (grow, mem["cycles"], second, per_m, tgt))
            L.append("  (scaled down from 1,000,000 cycles to keep the bench near %.0f s: %d cycles took %.0f s)" % (
                a.mem_seconds, mem["cycles"], mem["seconds"]))
        else:
            L.append("  growth %+d KiB over 1,000,000 cycles (%+d KiB in the second half)   %s" % (grow, second, tgt))
        L.append("  the sqlite3 shell itself ran %.0f cycles/s here (generate_series, one statement per half)" % mem["rate"])
    if keep is not None:
        L += keep_rows(keep, targets)
        L += conns_rows(kconns)
    if growth_res is not None:
        L += growth_rows(growth_res)
    if mny is not None and "error" in mny:
        L.append("acquire_many rows: failed: %s" % mny["error"])
        targets.append(("1,000 names, acquire_many / single acquires", "not measured"))
    elif mny is not None:
        mlines, mtgt = many.lines(mny)
        L += mlines
        targets.append(("1,000 names, acquire_many / single, defaults", mtgt[0]))
        targets.append(("1,000 names, acquire_many / single, fencing off", mtgt[1]))
    L.append("Targets, from the medians above (CPU: %s):" % cpu_model())
    for what, v in targets:
        L.append("  %-64s %s" % (what, v))
    load1 = open("/proc/loadavg").read().split()[0]
    L.append("(bench took %.0f s; 1-minute load average %s at the start, %s at the end, on %d CPUs%s)" % (
        time.monotonic() - t_start, load0, load1, os.cpu_count(),
        ": other processes were competing, figures are noisy" if max(float(load0), float(load1)) > 1.5 * os.cpu_count()
        else ""))
    print()
    print("\n".join(x for x in L if x is not None))


def main_many(a):
    """make bench BENCH_ARGS='--only many': the acquire_many rows alone, on 3 nodes."""
    t_start = time.monotonic()
    load0 = open("/proc/loadavg").read().split()[0]
    head = machine()
    print("bench: starting 3 redis-server nodes on loopback", flush=True)
    nodes = [Node(i) for i in range(3)]
    m = many.measure(EXT, [n.url for n in nodes], a.seconds, a.reps)
    cleanup()
    L = ["redlock bench: %s" % head, ""] + many.lines(m)[0]
    load1 = open("/proc/loadavg").read().split()[0]
    L.append("(took %.0f s; 1-minute load average %s at the start, %s at the end, on %d CPUs)"
             % (time.monotonic() - t_start, load0, load1, os.cpu_count()))
    print()
    print("\n".join(L))


if __name__ == "__main__":
    try:
        main()
    finally:
        cleanup()
