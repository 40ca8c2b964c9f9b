"""A process that forks while its SQLite connection holds locks (Python's
multiprocessing does, by default on Linux): the child's copy of the
connection must neither act on the parent's locks (reentrancy must not hand
the child the parent's token; closing the copy must not release them) nor
touch the parent's sockets, and the parent goes on as if nothing happened.
"""
# SPDX-License-Identifier: BSD-3-Clause
import os
import subprocess

import harness as h
from harness import eq, holds, is_token, value


def _child(con):
    """Runs in the child; returns an exit code naming the first failed check."""
    try:
        if con.execute("SELECT redlock_acquire('fk', 1000)").fetchone()[0] is not None:
            return 10  # handed the parent's lock (or took it from the parent)
        if con.execute("SELECT count(*) FROM redlock_locks").fetchone()[0] != 0:
            return 11  # believes it holds the parent's locks
        if con.execute("SELECT redlock_acquire('fk-child', 1000)").fetchone()[0] is None:
            return 12  # cannot lock on its own connections
        if con.execute("SELECT redlock_release('fk-child')").fetchone()[0] != 1:
            return 13
        con.close()  # must not release the parent's lock
        return 0
    except BaseException:
        return 14


def _extensions(con, res):
    row = con.execute("SELECT extensions FROM redlock_locks WHERE resource = ?", (res,)).fetchone()
    return row[0] if row else -1


def test_forked_child_leaves_parent_locks_alone_3n():
    with h.Cluster(3) as c:
        con = h.connect(c, auto_extend=1)
        tok = is_token(value(con, "SELECT redlock_acquire('fk', 1500)"), "parent's acquire")
        # Fork once the keeper thread runs (its first extension is done): a
        # fork while a thread is still being born deadlocks the ASan runtime
        # of clang 14 used by the sanitizer run, whatever the thread does.
        h.wait_until(lambda: _extensions(con, "fk") >= 1, 10, what="the keeper's first extension")
        pid = os.fork()
        if pid == 0:
            os._exit(_child(con))
        _, status = os.waitpid(pid, 0)
        eq(os.waitstatus_to_exitcode(status), 0, "the child's checks (exit code names the failed one)")
        holds(c, "fk", tok, 1500, "the parent's lock after the child closed its copy")
        # The parent's connection and its keeper thread still work: the lock
        # outlives several TTLs and is released with its own token.
        e = _extensions(con, "fk")
        h.wait_until(lambda: _extensions(con, "fk") >= e + 4, 10, what="four more extensions in the parent")
        holds(c, "fk", tok, 1500, "the parent's lock, several TTLs later")
        eq(value(con, "SELECT redlock_release('fk')"), 1, "the parent's release")


def test_forked_child_draws_fresh_tokens_1n():
    """Tokens come from a pool of random bytes; a child made by fork() must
    not hand out the bytes its parent would use next (same tokens in two
    processes would let one release the other's lock)."""
    with h.Cluster(1) as c:
        con = h.connect(c)
        is_token(value(con, "SELECT redlock_acquire('ft-before', 10000)"), "a token drawn before the fork")
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.close(r)
                toks = [con.execute("SELECT redlock_acquire(?, 10000)", ("ft-child-%d" % i,)).fetchone()[0]
                        for i in range(4)]
                os.write(w, (",".join(t or "" for t in toks)).encode())
                code = 0
            finally:
                os._exit(code)
        os.close(w)
        theirs = b""
        while True:
            chunk = os.read(r, 4096)
            if not chunk:
                break
            theirs += chunk
        os.close(r)
        _, status = os.waitpid(pid, 0)
        eq(os.waitstatus_to_exitcode(status), 0, "the child's exit code")
        child = theirs.decode().split(",")
        ours = [is_token(value(con, "SELECT redlock_acquire(?, 10000)", "ft-parent-%d" % i), "parent's token")
                for i in range(4)]
        for t in child:
            is_token(t, "a token the child drew")
        eq(set(ours) & set(child), set(), "tokens both the parent and its child drew after the fork")


LOAD_CYCLES_SCRIPT = r"""
import sqlite3, sys
ext, cycles = sys.argv[1], int(sys.argv[2])

def wiped_kib():
    total, size = 0, 0
    for line in open("/proc/self/smaps"):
        if line.startswith("Size:"):
            size = int(line.split()[1])
        elif line.startswith("VmFlags:") and " wf" in " " + line.split(":", 1)[1]:
            total += size
    return total

def cycle():
    con = sqlite3.connect(":memory:")
    con.enable_load_extension(True)
    con.load_extension(ext)
    assert con.execute("SELECT redlock_acquire('cycle', 1000)").fetchone()[0] is not None
    assert con.execute("SELECT redlock_release('cycle')").fetchone()[0] == 1
    con.close()

cycle()
before = wiped_kib()
for _ in range(cycles):
    cycle()
print(before, wiped_kib())
"""


def test_loading_and_closing_again_and_again_keeps_no_memory_1n():
    """The pages a forked child sees wiped (the pid cache and the token
    pool) were mapped once per load of the library and never unmapped: a
    host that opens a connection, loads the extension and closes it for
    each request (SQLite unloads the library with its last connection)
    kept 8 KiB more each time, holding leftover random bytes. The library
    is now never unloaded (-z nodelete), so a new load finds them again."""
    c = h.shared_cluster(1)
    env = dict(os.environ, REDLOCK_NODES=h.nodes_env_of(c))
    out = subprocess.run(["/usr/bin/python3", "-c", LOAD_CYCLES_SCRIPT, h.EXT, "200"], env=env,
                         capture_output=True, text=True, timeout=120)
    eq(out.returncode, 0, "the cycles ran: %s" % out.stderr[-2000:])
    before, after = map(int, out.stdout.split())
    eq(after, before, "KiB of wipe-on-fork memory after 200 more loads and closes (before them: %d)" % before)
