#!/usr/bin/python3
"""Mutation testing: is the checker able to catch a broken engine?

For each mutant, copies src/ and ext/ to build/mutant-NAME/, applies its
textual changes (each must match exactly once, or this fails loudly: the
code moved and the mutant must be updated), builds redlock.so there with
the project's flags, and runs checker scenarios against it (REDLOCK_EXT).
A mutant is caught when a scenario misses its expectation, or, for the
mutants of TEST_MUTANTS, when the sql-tests named there fail against it.
The baseline (no change) is built and run the same way, those tests too,
and must pass: that is what makes a caught mutant mean something.

    /usr/bin/python3 sql-tests/mutants.py [NAME ...] [--seconds S] [--list]

`make mutants` runs it with the compiler and flags of the Makefile
(CC, MUTANT_FLAGS, MUTANT_LIBS in the environment).
"""
# SPDX-License-Identifier: BSD-3-Clause

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
BUILD = os.path.join(REPO, "build")

# The scenarios each build runs (checker_matrix.py names): contention with
# split votes, holders paused past their TTL that then check, release or
# extend (with the lock contended, and mostly free), and acquisitions
# slowed by their links while others are fast.
SCENARIOS = ["clean", "client_pauses", "client_pauses_idle", "slow_client_links"]

# The shared-lock scenarios (checker_shared.py names) the baseline and the
# shared-lock mutants run: holder limits k = 2 and 3 under faults.
SHARED_SCENARIOS = ["limit2_kill9", "limit3_sigstop"]
SHARED_MUTANTS = {"shared-quorum-majority"}
# A holder count above the limit needs faults to fall just so (k + 1
# holders on a majority each, no node with more than k): in 5 s runs the
# checker saw it in two runs of three, and one full make mutants with
# three times as long missed it too. The mutant's runs are six times as
# long; the baseline's are not shortened by it.
SHARED_MUTANT_SPAN = 6

# The acquire_many scenarios (checker_matrix.py names) the baseline and the
# fencing-floor mutant run: sets and single names taken in turn.
MANY_SCENARIOS = ["many_clean", "many_kills_and_pauses"]
MANY_MUTANTS = {"fence-ignores-floor"}

# The scenarios (checker_matrix.py) the baseline and the companion-key
# mutants run: workers on the name cx:holder while another user takes and
# releases cx; workers on cf while a hostile user names cf:fence as a lock.
# (An exclusive holder's details are the connection's now, under a name
# with a random id, and are only ever written or lengthened, never
# deleted: writing them over another program's lock takes it for good
# rather than letting a second holder in, which no checker scenario sees.
# test_companion_keys fails on both mutations of that rule.)
COMPANION_SCENARIOS = ["companion_names", "fence_counter_named"]
COMPANION_MUTANTS = {"counter-value-as-token"}

# The real-partition scenario (checker_matrix.py, needs root: skipped
# without, and its mutant with it) the baseline and the mutant that lets a
# late extend shorten a lock run: hand-offs under flapping partial
# partitions. Its mutant's runs are twice as long: in 5 s runs on the
# engine before the fix, 3 of 4 found the overlap.
HANDOFF_SCENARIOS = ["handoff_partitions"]
HANDOFF_MUTANTS = {"extend-shortens"}
HANDOFF_MUTANT_SPAN = 2

# The scenario (checker_matrix.py) the baseline and the transaction-lock
# mutants run, besides the sql-tests of TEST_MUTANTS: jobs paused past
# their TTL right before COMMIT.
XACT_SCENARIOS = ["xact_client_pauses"]

# Mutants caught by sql-tests too: name -> (module, [test name filters]);
# the baseline runs every one of them.
TEST_MUTANTS = {
    "xact-release-before-commit": ("test_xact", ["test_order_proof"]),
    "xact-guard-off": ("test_xact", ["test_late_commit"]),
}

# The fair-queue scenarios (checker_fair.py names) the baseline and the
# queue mutant run: fair waiters on a clean run and under SIGSTOP of a
# minority; the mutant is caught by the order inversions it causes.
FAIR_SCENARIOS = ["fair_clean", "fair_sigstop"]
FAIR_MUTANTS = {"queue-head-ignored"}

# The real-partition scenario (needs root, as above) the baseline and the
# mutant that reuses a stalled connection run: links cut mid-acquire,
# where late answers to a failed attempt's SET and cleanup, or to a
# release, meet the next acquire on the same connection. On the mutant,
# 5 s runs found 1 to 14 violations (one run of five found a single one)
# and 10 s runs 6 to 26 (overlapping holds among them): its runs are
# twice as long.
PARTITION_SCENARIOS = ["partition_mid_acquire"]
PARTITION_MUTANTS = {"stalled-conn-reused"}
PARTITION_MUTANT_SPAN = 2

# name -> (what is broken, [(file, old, new), ...])
MUTANTS = {
    "baseline": ("nothing: the engine as it is (must pass)", []),
    "validity-not-reduced": (
        "validity = ttl: not reduced by the time the attempt took nor by the drift allowance",
        [("src/rl_lock.c",
          "return ttl_ms * 1000 - (end_us - start_us) - rl_client_drift_us(c, ttl_ms);",
          "(void)c, (void)start_us, (void)end_us; return ttl_ms * 1000;")]),
    "quorum-half": (
        "quorum N/2 instead of N/2 + 1",
        [("src/rl_client.c", "return c->n / 2 + 1;", "return c->n / 2;")]),
    "release-no-compare": (
        "release (and cleanup) deletes the key without comparing the token",
        [("src/rl_scripts.h",
          "\"  if redis.call('get',KEYS[1]) == ARGV[1] then\\n\"",
          "\"  if true then\\n\"")]),
    "extend-revives": (
        "extend re-creates an expired key (and the session no longer refuses an expired lock)",
        [("src/rl_scripts.h",
          "\"if ty ~= 'string' or redis.call('get',KEYS[1]) ~= ARGV[1] then return 0 end\\n\" \\\n"
          "    RL_LUA_LENGTHEN",
          "\"local v = redis.call('get',KEYS[1])\\n\" "
          "\"if v and v ~= ARGV[1] then return 0 end\\n\" "
          "\"if not v then redis.call('set',KEYS[1],ARGV[1],'PX',ARGV[2]) end\\n\" \\\n"
          "    RL_LUA_LENGTHEN"),
         ("src/rl_session.c",
          "if (ours && left_ms(&s->held[i]) == 0) {",
          "if (ours && left_ms(&s->held[i]) < 0) {")]),
    "extend-shortens": (
        "an extend sets the TTL it is given even when the key has more left: a late one cuts a lock back",
        [("src/rl_scripts.h",
          "\"  if p >= 0 and p < t then redis.call('pexpire', k, t) end\\n\"",
          "\"  if p >= 0 then redis.call('pexpire', k, t) end\\n\"")]),
    "fence-ignores-floor": (
        "a single fenced acquire ignores the fencing floor the sets of names write",
        [("src/rl_scripts.h", "\"if fl and tonumber(fl) >= f then\\n\"", "\"if false then\\n\"")]),
    "counter-value-as-token": (
        "a token that is a number (a fencing counter's value) is taken, so x:fence can be released as a lock",
        [("src/rl_lock.c", "if (is_integer_text(token, toklen))", "if (is_integer_text(token, 0))")]),
    "xact-release-before-commit": (
        "a transaction's locks are released before its COMMIT (as a commit hook would), not after it",
        [("ext/redlock_xact.c", "    if (!rl_session_xact_open(s)) return SQLITE_OK;\n    if (commit_may_wait",
          "    rl_session_xact_end(s);\n    if (!rl_session_xact_open(s)) return SQLITE_OK;\n    if (commit_may_wait")]),
    "xact-guard-off": (
        "the COMMIT guard lets every COMMIT through, its lock lost or not",
        [("ext/redlock_xact.c", "if (rl_session_xact_check(s, margin.i, why, sizeof why) == 0) return SQLITE_OK;",
          "if (1 || rl_session_xact_check(s, margin.i, why, sizeof why) == 0) return SQLITE_OK;")]),
    "queue-head-ignored": (
        "a fair waiter tries whenever its entry is on a majority, whether or not it is at the head",
        [("src/rl_queue.c", "q->head = r.yes >= quorum;", "q->head = r.yes + r.no >= quorum;")]),
    "stalled-conn-reused": (
        "a connection that missed its deadline stays in use, owing nothing: its late replies answer later commands",
        [("src/rl_round.c",
          "            rl_node_mark_down(c, node, why, !unwritten);\n",
          "            if (unwritten) rl_node_mark_down(c, node, why, 0);\n"
          "            else conn->head = conn->count = 0;\n")]),
    "shared-quorum-majority": (
        "a shared hold with max_holders k counts with a majority instead of the q of (k+1)q > kN",
        [("src/rl_shared.c", "if (k <= 1) return n / 2 + 1;", "if (k >= 0) return n / 2 + 1;")]),
}


def patch(root, changes):
    for rel, old, new in changes:
        path = os.path.join(root, rel)
        with open(path) as f:
            text = f.read()
        n = text.count(old)
        if n != 1:
            raise SystemExit("mutants: %s: the text to change occurs %d times (must be once); "
                             "the code moved, update the mutant:\n%s" % (rel, n, old))
        with open(path, "w") as f:
            f.write(text.replace(old, new))


def build(name):
    root = os.path.join(BUILD, "mutant-" + name)
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    for d in ("src", "ext"):
        shutil.copytree(os.path.join(REPO, d), os.path.join(root, d))
    patch(root, MUTANTS[name][1])
    cc = shlex.split(os.environ.get("CC") or "cc")
    flags = shlex.split(os.environ.get("MUTANT_FLAGS") or
                        "-std=c11 -D_GNU_SOURCE -fPIC -fvisibility=hidden -Wall -Wextra -Werror -Isrc -O2 -g")
    libs = shlex.split(os.environ.get("MUTANT_LIBS") or "-lhiredis -lssl -lcrypto -lpthread")
    srcs = sorted("src/" + f for f in os.listdir(os.path.join(root, "src")) if f.endswith(".c"))
    srcs += sorted("ext/" + f for f in os.listdir(os.path.join(root, "ext")) if f.endswith(".c"))
    r = subprocess.run(cc + flags + ["-shared", "-o", "redlock.so"] + srcs + libs, cwd=root,
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("mutants: %s does not build:\n%s" % (name, r.stderr[-3000:]))
    return os.path.join(root, "redlock")


def run_scenarios(ext, seconds, shared=False, many=False, companion=False, handoff=False, xact=False, fair=False,
                  partition=False):
    """Runs the scenarios against ext (shared: the shared-lock ones; many:
    the acquire_many ones; companion: the companion-key one; handoff and
    partition: the real-partition ones; xact: the transaction-lock one;
    fair: the fair-queue ones); returns (exit status, MISSED lines, table
    rows, SKIP lines)."""
    env = dict(os.environ, REDLOCK_EXT=ext)
    if fair:
        cmd = [sys.executable, os.path.join(HERE, "checker_fair.py"), str(seconds), ",".join(FAIR_SCENARIOS)]
    elif shared:
        cmd = [sys.executable, os.path.join(HERE, "checker_shared.py"), str(seconds), ",".join(SHARED_SCENARIOS)]
    else:
        names = (MANY_SCENARIOS if many else COMPANION_SCENARIOS if companion else
                 HANDOFF_SCENARIOS if handoff else XACT_SCENARIOS if xact else
                 PARTITION_SCENARIOS if partition else SCENARIOS)
        cmd = [sys.executable, os.path.join(HERE, "checker_matrix.py"), "--seconds", str(seconds),
               "--only", ",".join(names)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    lines = r.stdout.splitlines()
    missed = [x for x in lines if x.startswith("MISSED")]
    rows = [x for x in lines if x.startswith("| ") and not x.startswith("| fault") and not x.startswith("| scenario")]
    skips = [x for x in lines if x.startswith("SKIP ")]
    if r.returncode != 0 and not missed:
        missed = ["the run failed: " + (r.stderr.strip().splitlines() or ["?"])[-1]]
    return r.returncode, missed, rows, skips


def run_tests(ext, module, filters):
    """Runs those tests of module (python3 test_x.py FILTER...) against ext;
    returns (exit status, FAIL lines, [the closing count line])."""
    env = dict(os.environ, REDLOCK_EXT=ext)
    r = subprocess.run([sys.executable, os.path.join(HERE, module + ".py")] + filters, cwd=HERE, env=env,
                       capture_output=True, text=True, timeout=600)
    lines = r.stdout.splitlines()
    failed = [x for x in lines if x.startswith("FAIL")]
    if r.returncode != 0 and not failed:
        failed = ["the run failed: " + (r.stderr.strip().splitlines() or ["?"])[-1]]
    return r.returncode, [x[:300] for x in failed], [x for x in lines if x.endswith(" failed")][-1:]


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*")
    ap.add_argument("--seconds", type=float, default=float(os.environ.get("MUTANT_SECONDS", 5)))
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args(argv)
    if a.list:
        for k, (what, _) in MUTANTS.items():
            print("%-22s %s" % (k, what))
        return 0
    names = a.names or list(MUTANTS)
    for n in names:
        if n not in MUTANTS:
            raise SystemExit("mutants: no mutant %r (see --list)" % n)
    results, bad = [], []
    t0 = time.monotonic()
    for name in names:
        ext = build(name)
        rc, missed, rows, skips = 0, [], [], []
        if name not in SHARED_MUTANTS | MANY_MUTANTS | COMPANION_MUTANTS | HANDOFF_MUTANTS | set(TEST_MUTANTS) | \
                FAIR_MUTANTS | PARTITION_MUTANTS:
            rc, missed, rows, skips = run_scenarios(ext, a.seconds)
        for tname, (module, filters) in TEST_MUTANTS.items():
            if name in (tname, "baseline"):
                rc2, failed, counts = run_tests(ext, module, filters)
                rc, missed, rows = rc or rc2, missed + ["MISSED " + f for f in failed], rows + counts
        for kind, group in (("shared", SHARED_MUTANTS), ("many", MANY_MUTANTS), ("companion", COMPANION_MUTANTS),
                            ("handoff", HANDOFF_MUTANTS), ("xact", set(TEST_MUTANTS)), ("fair", FAIR_MUTANTS),
                            ("partition", PARTITION_MUTANTS)):
            if name in group or name == "baseline":
                span = (SHARED_MUTANT_SPAN if name in SHARED_MUTANTS else
                        HANDOFF_MUTANT_SPAN if name in HANDOFF_MUTANTS else
                        PARTITION_MUTANT_SPAN if name in PARTITION_MUTANTS else 1)
                rc2, missed2, rows2, skips2 = run_scenarios(ext, a.seconds * span, **{kind: True})
                rc, missed, rows, skips = rc or rc2, missed + missed2, rows + rows2, skips + skips2
        caught = rc != 0
        want_caught = name != "baseline"
        # a mutant only a real-partition scenario can catch, which cannot run here (no root)
        skipped = want_caught and name in HANDOFF_MUTANTS | PARTITION_MUTANTS and skips and not caught
        verdict = ("skipped" if skipped else "caught" if caught else "NOT CAUGHT") if want_caught else \
            ("passes" if not caught else "FAILS")
        print("== %s (%s): %s" % (name, MUTANTS[name][0], verdict), flush=True)
        for x in rows + missed + skips:
            print("   " + x, flush=True)
        results.append((name, verdict, "; ".join([m[len("MISSED "):] for m in missed] + skips) or "-"))
        if caught != want_caught and not skipped:
            bad.append(name)
    print()
    print("| build | verdict | what the checker found |")
    print("|---|---|---|")
    for name, verdict, why in results:
        print("| %s | %s | %s |" % (name, verdict, why))
    print("\n%d builds in %.0f s; %s" % (len(results), time.monotonic() - t0,
                                        "all as required" if not bad else "WRONG: " + ", ".join(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
