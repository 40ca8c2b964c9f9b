"""The contract from the real sqlite3 shell, as a batch job would use it."""
# SPDX-License-Identifier: BSD-3-Clause

import os
import tempfile

import harness as h
from harness import check, eq, holds, is_token, no_key, value

# not a timing test: a slow node on a loaded machine must not fail it
h.default_config(timeout_ms=h.RELAXED_TIMEOUT_MS)


def _lines(out):
    return [l for l in out.split("\n")]


def _acquire_release(n):
    c = h.shared_cluster(n)
    with tempfile.TemporaryDirectory() as d:
        tokfile, go = os.path.join(d, "token"), os.path.join(d, "go")
        # a holder shell: acquires, writes its token to a file, then waits
        # (inside the shell, lock held) until the test says go
        holder = h.ShellProc(".output %s\n"
                             "SELECT redlock_acquire('sh', 30000);\n"
                             ".output\n"
                             ".shell while [ ! -e %s ]; do sleep 0.01; done\n"
                             "SELECT coalesce(redlock_release('sh'), 'NULL');\n"
                             % (tokfile, go), c)

        def token_written():
            if not holder.running():
                raise AssertionError("holder shell ended early: %r" % (holder.wait(),))
            try:
                with open(tokfile) as f:
                    t = f.read()
            except OSError:
                return None
            return t.strip() if t.endswith("\n") else None
        tok = is_token(h.wait_until(token_written, 10, what="the shell's token"),
                       "token printed by the shell")
        holds(c, "sh", tok, 30000, "key of the shell holding the lock")
        # someone else: NULL
        rc, out, err = h.shell("SELECT coalesce(redlock_acquire('sh', 1000), 'NULL');", c)
        eq((rc, out.strip(), err), (0, "NULL", ""), "second shell acquiring the held name")
        rc, out, err = h.shell("SELECT redlock_release('sh', '%s');" % tok, c)
        eq((rc, out.strip(), err), (0, "1", ""), "release with the token from another shell")
        no_key(c, "sh", "after another shell released with the token")
        open(go, "w").close()
        rc, out, err = holder.wait(30)
        eq((rc, out.strip(), err), (0, "0", ""),
           "holder shell releasing after someone else released its lock")
    rc, out, err = h.shell("SELECT redlock_acquire('sh', 30000) IS NOT NULL;\n"
                           "SELECT redlock_extend('sh', 60000) > 0;\n"
                           "SELECT redlock_release('sh');\n"
                           "SELECT coalesce(redlock_release('sh'), 'NULL');", c)
    eq((rc, _lines(out.strip()), err), (0, ["1", "1", "1", "NULL"], ""),
       "acquire, extend, release, release again in one shell")
    no_key(c, "sh", "after acquire/release in one shell")


h.for_nodes(globals(), _acquire_release, (1, 3, 5))


def test_python_holder_shell_refused():
    c = h.shared_cluster(3)
    con = h.connect(c)
    tok = is_token(value(con, "SELECT redlock_acquire('mix', 30000)"))
    rc, out, err = h.shell("SELECT coalesce(redlock_acquire('mix', 1000), 'NULL');\n"
                           "SELECT redlock_release('mix', 'ffffffffffffffffffffffffffffffff');",
                           c)
    eq((rc, _lines(out.strip()), err), (0, ["NULL", "0"], ""),
       "shell against a lock held from python")
    holds(c, "mix", tok, 30000, "python's lock after the shell's attempts")


def test_dot_load_relative_path():
    c = h.shared_cluster(1)
    rc, out, err = h.shell("SELECT length(redlock_acquire('rel', 1000));", c,
                           cwd=h.REPO, load="./redlock")
    eq((rc, out.strip(), err), (0, "60", ""), ".load ./redlock from the repository root")


def test_misuse_error_on_stderr_exit_1():
    c = h.shared_cluster(1)
    for sql in ("SELECT redlock_acquire('', 1000);", "SELECT redlock_acquire('x', 0);",
                "SELECT redlock_acquire('x', 1000, -1);",
                "SELECT redlock_config('no_such_setting');",
                "INSERT INTO redlock_nodes(url) VALUES ('http://127.0.0.1:1');"):
        rc, out, err = h.shell(sql, c)
        eq(rc, 1, "exit status of the shell for %s" % sql)
        check("redlock: " in err, "stderr should carry the redlock: error for %s; got %r"
              % (sql, err))
        eq(out.strip(), "", "stdout for %s" % sql)
    for node in c:
        eq(node.dbsize(), 0, "keys after the refused calls")


def test_bail_stops_the_job():
    c = h.shared_cluster(1)
    rc, out, err = h.shell("SELECT redlock_acquire(NULL, 1000);\nSELECT 'after';", c,
                           args=("-bail",))
    eq(rc, 1, "exit status with -bail")
    check("redlock: " in err and "after" not in out,
          "-bail should stop at the error; out=%r err=%r" % (out, err))


def test_nodes_dead_error_in_shell():
    dead = [h.free_port() for _ in range(3)]
    env = ",".join("redis://127.0.0.1:%d" % p for p in dead)
    rc, out, err = h.shell("SELECT redlock_acquire('down', 1000);", env)
    eq(rc, 1, "exit status when every node is down")
    check("redlock: " in err, "stderr should carry a redlock: error; got %r" % err)
    for p in dead:
        check(str(p) in err, "the error should name node port %d: %r" % (p, err))


def test_password_not_shown_by_shell():
    c = h.shared_cluster(1)
    secret = "ShellS3cretPw"
    rc, out, err = h.shell(".mode line\n"
                           "INSERT INTO redlock_nodes(url) VALUES "
                           "('redis://u:%s@127.0.0.1:7001/1');\n"
                           "INSERT INTO redlock_nodes(host, port, password) VALUES "
                           "('127.0.0.1', 7002, '%s');\n"
                           "SELECT * FROM redlock_nodes;" % (secret, secret), c)
    eq((rc, err), (0, ""), "shell listing redlock_nodes")
    check("7001" in out and "7002" in out, "listing should show the new nodes: %r" % out)
    check(secret not in out, "password shown in clear by SELECT *: %r" % out)


def test_version_in_shell():
    c = h.shared_cluster(1)
    rc, out, err = h.shell("SELECT redlock_version();", c)
    eq((rc, err), (0, ""), "shell redlock_version()")
    check(out.strip() != "", "redlock_version() printed nothing")
    eq(out.strip(), value(h.connect(c), "SELECT redlock_version()"),
       "version from the shell and from python")
