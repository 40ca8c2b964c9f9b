"""The acquire_many rows of make bench: redlock_acquire_many of 1, 10, 100
and 1,000 names (one script per node), and, in the same run on the same
nodes, 1,000 names taken one by one with redlock_acquire in one statement.
The ratio "1,000 names via acquire_many / 1,000 single acquires" is the
figure the target is about (<= 0.05: one round trip instead of 1,000); it
comes from a run of the two interleaved (_pair), with fencing on and off.

Measured in this process through Python's sqlite3 module (the extension
loaded into it), fencing on, TTL 10 s: each timed call is one acquire;
the release of what it took (redlock_release_many, redlock_release_all)
runs untimed after it. Standard library only.
"""
# SPDX-License-Identifier: BSD-3-Clause

import json
import sqlite3
import statistics
import time

SIZES = (1, 10, 100, 1000)

SINGLE_1000 = ("WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 1000) "
               "SELECT count(redlock_acquire('bs:' || i, 10000)) FROM s")


def _connect(ext, urls):
    con = sqlite3.connect(":memory:", isolation_level=None)
    con.enable_load_extension(True)
    con.load_extension(ext)
    con.enable_load_extension(False)
    con.execute("DELETE FROM redlock_nodes")
    for u in urls:
        con.execute("INSERT INTO redlock_nodes(url) VALUES (?)", (u,))
    con.execute("SELECT redlock_config('timeout_ms', 200)")
    return con


def _pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def measure(ext, urls, seconds=1.0, reps=5):
    """{"many": {n: {...}}, "single": {...}, "ratio": r} for the nodes urls."""
    con = _connect(ext, urls)
    out = {"many": {}, "nodes": len(urls)}
    for n in SIZES:
        names = json.dumps(["bm:%d:%d" % (n, i) for i in range(n)])
        lat = []
        calls = 0
        t_end = time.monotonic() + seconds * reps
        while time.monotonic() < t_end or len(lat) < 3:
            t0 = time.perf_counter()
            tok = con.execute("SELECT redlock_acquire_many(?, 10000)", (names,)).fetchone()[0]
            t1 = time.perf_counter()
            if tok is None:
                raise SystemExit("bench: acquire_many of %d names was refused on idle nodes" % n)
            got = con.execute("SELECT redlock_release_many(?)", (names,)).fetchone()[0]
            if got != n:
                raise SystemExit("bench: release_many of %d names released %r" % (n, got))
            lat.append(t1 - t0)
            calls += 1
        out["many"][n] = {"calls": calls, "p50_us": statistics.median(lat) * 1e6, "p99_us": _pct(lat, 99) * 1e6,
                          "names_s": n / statistics.median(lat)}
        print("bench: acquire_many of %d names: done" % n, flush=True)
    many, single = _pair(con, "bm:on", seconds * reps)
    out["single"] = {"calls": len(single), "p50_us": statistics.median(single) * 1e6,
                     "p99_us": _pct(single, 99) * 1e6, "names_s": 1000 / statistics.median(single)}
    out["pair"] = {"many_us": statistics.median(many) * 1e6, "many_calls": len(many)}
    out["ratio"] = out["pair"]["many_us"] / out["single"]["p50_us"]
    print("bench: 1,000 single acquires: done", flush=True)
    # The same pair with fencing off: what fencing costs.
    con.execute("SELECT redlock_config('fencing', 0)")
    many_off, single_off = _pair(con, "bm:off", seconds * reps / 2)
    out["off"] = {"many_us": statistics.median(many_off) * 1e6, "single_us": statistics.median(single_off) * 1e6,
                  "many_calls": len(many_off), "single_calls": len(single_off)}
    out["off"]["ratio"] = out["off"]["many_us"] / out["off"]["single_us"]
    print("bench: fencing off: done", flush=True)
    out["held"] = _held_growth(con, seconds)
    print("bench: cycles beside held locks: done", flush=True)
    con.close()
    return out


def _pair(con, prefix, seconds):
    """The target's pair, interleaved so that both halves see the machine in
    the same state (runs of a VM drift): acquire_many of 1,000 names
    (prefix:i), timed, then released, and after every tenth, 1,000 single
    acquires in one statement, timed, then released. Returns both lists of
    times (s)."""
    names = json.dumps(["%s:%d" % (prefix, i) for i in range(1000)])
    many, single = [], []
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end or len(single) < 3:
        t0 = time.perf_counter()
        tok = con.execute("SELECT redlock_acquire_many(?, 10000)", (names,)).fetchone()[0]
        many.append(time.perf_counter() - t0)
        if tok is None or con.execute("SELECT redlock_release_many(?)", (names,)).fetchone()[0] != 1000:
            raise SystemExit("bench: acquire_many + release_many of 1,000 names failed on idle nodes")
        if len(many) % 10 == 0:
            t0 = time.perf_counter()
            got = con.execute(SINGLE_1000).fetchone()[0]
            single.append(time.perf_counter() - t0)
            if got != 1000 or con.execute("SELECT redlock_release_all()").fetchone()[0] != 1000:
                raise SystemExit("bench: 1,000 single acquires took %r" % got)
    return many, single


HELD = (0, 1000, 10000)
CYCLES = ("WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?) "
          "SELECT sum(redlock_release('bh:' || i, redlock_acquire('bh:' || i, 10000))) FROM s")


def _held_growth(con, seconds):
    """{held: us per acquire+release cycle} with 0, 1,000 and 10,000 other
    locks held by the connection (taken 1,000 to an acquire_many, no
    auto-extension): what finding a name among the held ones costs."""
    con.execute("SELECT redlock_config('fencing', 1)")
    con.execute("SELECT redlock_config('auto_extend', 0)")
    out = {}
    for held in HELD:
        for a in range(0, held, 1000):
            names = json.dumps(["bg:%d" % i for i in range(a, a + 1000)])
            if con.execute("SELECT redlock_acquire_many(?, 600000)", (names,)).fetchone()[0] is None:
                raise SystemExit("bench: 1,000 names to hold were refused on idle nodes")
        con.execute(CYCLES, (300,)).fetchone()
        laps = []
        t_end = time.monotonic() + seconds
        while time.monotonic() < t_end or len(laps) < 3:
            t0 = time.perf_counter()
            if con.execute(CYCLES, (500,)).fetchone()[0] != 500:
                raise SystemExit("bench: cycles beside %d held locks did not release every lock" % held)
            laps.append((time.perf_counter() - t0) / 500)
        out[held] = statistics.median(laps) * 1e6
        con.execute("SELECT redlock_release_all()").fetchone()
    return out


def lines(m):
    """The table rows and the target's verdicts, with the defaults and with
    fencing off: (lines, ("<= 0.05: PASS", "<= 0.05: MISS"))."""
    L = ["acquire_many (one EVAL per node sets every name or none), fencing on, TTL 10 s, %d nodes; "
         "time of the acquire call, median of all calls in %s" % (m["nodes"], "the run"),
         "  %-40s %5s %9s %9s %9s %12s" % ("", "names", "calls", "p50 us", "p99 us", "names/s")]
    for n in SIZES:
        s = m["many"][n]
        L.append("  %-40s %5d %9d %9.0f %9.0f %12.0f" % ("redlock_acquire_many", n, s["calls"], s["p50_us"],
                                                         s["p99_us"], s["names_s"]))
    s = m["single"]
    L.append("  %-40s %5d %9d %9.0f %9.0f %12.0f" % ("1,000 x redlock_acquire, one statement", 1000, s["calls"],
                                                     s["p50_us"], s["p99_us"], s["names_s"]))
    p = m.get("pair")
    if p:
        L.append("  fencing on, the pair interleaved: acquire_many of 1,000 names p50 %.0f us (%d calls), 1,000 single "
                 "acquires p50 %.0f us (%d statements): ratio %.4f" % (p["many_us"], p["many_calls"], s["p50_us"],
                                                                     s["calls"], m["ratio"]))
    o = m["off"]
    L.append("  fencing off, the pair interleaved: acquire_many of 1,000 names p50 %.0f us (%d calls), 1,000 single acquires p50 %.0f us "
             "(%d statements): ratio %.4f" % (o["many_us"], o["many_calls"], o["single_us"], o["single_calls"],
                                              o["ratio"]))
    g = m.get("held")
    if g:
        L.append("  acquire + release cycles (fencing on) beside locks the connection holds: "
                 + ", ".join("%s held %.0f us" % ("{:,}".format(k), v) for k, v in sorted(g.items()))
                 + "; %s / none: %.2f" % ("{:,}".format(HELD[-1]), g[HELD[-1]] / g[0]))
    # Judged with the default settings (fencing on, holder details on) and
    # with fencing off: with fencing each node also reads every name's
    # counter, work that one round trip cannot save.
    def verdict(r):
        return "<= 0.05: %s" % ("PASS" if r <= 0.05 else "MISS")
    tgt = (verdict(m["ratio"]), verdict(o["ratio"]))
    L.append("  1,000 names: acquire_many / 1,000 single acquires = %.4f with the defaults (fencing on)   %s; "
             "%.4f with fencing off   %s" % (m["ratio"], tgt[0], o["ratio"], tgt[1]))
    return L, tgt
