"""Hostile input: secrets echoed by servers, schemas that call redlock from
where they must not, and node-list changes while locks are held.

* Secrets in server replies: a real redis-server with AUTH or SET renamed
  echoes the arguments it was sent ("with args beginning with: 'app'
  'S3cret'"); neither the password nor a token, whole or cut short, may
  reach an error or redlock_nodes.last_error.
* Error text is valid UTF-8 without control characters: names cut inside
  a multi-byte character, terminal escapes echoed by a server.
* Statements on redlock_nodes are atomic (a failing statement changes
  nothing); writes inside BEGIN ... COMMIT or a savepoint follow the
  transaction (test_nodes_txn).
* redlock_nodes cannot change while this connection holds a lock (nor can
  unsafe_test_quorum), so no lock is ever counted on other nodes.
* Smaller: node id 2^63-1, NUL in settings, redlock_fence of an expired
  lock, ttl_ms below the drift allowance, type errors of settings, the
  default node named in errors when REDLOCK_NODES is unset."""
# SPDX-License-Identifier: BSD-3-Clause

import re
import socket
import sqlite3

import harness as h
from harness import check, eq, is_token, node_rows, redlock_error, value

# not a timing test: a slow node on a loaded machine must not fail it
h.default_config(timeout_ms=h.RELAXED_TIMEOUT_MS)

PW = "S3cret-Pa55w0rd"
LONG_PW = "L0ng" + "".join(chr(ord("a") + i % 26) for i in range(196))   # 200 bytes
ESC = "\x1b[2J\x1b]0;pwned\x07"


def error_of(con, sql, *params):
    """The error text of sql, which must fail with sqlite3.Error (never
    UnicodeDecodeError or anything else); returns the message."""
    try:
        con.execute(sql, params).fetchall()
    except sqlite3.Error as e:
        return str(e)
    except UnicodeDecodeError as e:
        raise AssertionError("%s: error text is not valid UTF-8 (%s)" % (sql, e))
    raise AssertionError("%s: should have failed" % sql)


def clean_text(text, what):
    check(text.startswith("redlock: ") or what.startswith("last_error"), "%s: %r" % (what, text))
    bad = [c for c in text if ord(c) < 32 or 0x7f <= ord(c) < 0xa0]
    check(not bad, "%s carries control characters %r: %r" % (what, bad, text))


def no_prefix_of(secret, text, what, shortest=6):
    """Neither secret nor any piece of it of `shortest` bytes or more (a
    server cuts long arguments) appears in text."""
    for i in range(0, len(secret) - shortest + 1):
        piece = secret[i:i + shortest]
        check(piece not in text, "%s shows part of a secret (%r): %r" % (what, piece, text))


def last_errors(con):
    return [r["last_error"] or "" for r in node_rows(con)]


def dead_url():
    return "redis://127.0.0.1:%d" % h.free_port()


# --------------------------------------------------------------------------
# item 2: secrets echoed by a server
# --------------------------------------------------------------------------

def check_auth_echo(password):
    node = h.RedisNode(extra_args=["--rename-command", "AUTH", ""])
    con = h.connect("redis://app:%s@127.0.0.1:%d" % (password, node.port))
    msg = error_of(con, "SELECT redlock_acquire('echo', 10000)")
    check("AUTH failed" in msg, "the error names the failed AUTH: %r" % msg)
    check("unknown command" in msg, "the server's own reason is still shown: %r" % msg)
    no_prefix_of(password, msg, "acquire error")
    errs = last_errors(con)
    check(any("AUTH failed" in e for e in errs), "last_error names the failed AUTH: %r" % errs)
    for e in errs:
        no_prefix_of(password, e, "last_error")
    return msg


def test_auth_echo_masks_password():
    check_auth_echo(PW)


def test_auth_echo_masks_long_password_cut_by_server():
    # Redis echoes at most 128 bytes of arguments: the password arrives cut.
    check_auth_echo(LONG_PW)


def test_set_echo_masks_token():
    """The plain SET goes to a server without SET, which echoes its
    arguments (the token) in its error. The connection's ACL probe finds
    SET missing first, so the reason shown is the refusal naming SET;
    neither it nor last_error shows the token."""
    node = h.RedisNode(extra_args=["--rename-command", "SET", ""])
    con = h.connect(node, fencing=0, holder_info=0)  # the plain SET, which echoes its arguments
    for key in ("short", "k" * 112):       # the second leaves room for 13 bytes of the token
        msg = error_of(con, "SELECT redlock_acquire(?, 10000)", key)
        check("may not run SET" in msg, "the refusal names SET: %r" % msg)
        check(not re.search(r"[0-9a-f]{8,}", msg), "a token (or part of one) is shown: %r" % msg)
        for e in last_errors(con):
            check(not re.search(r"[0-9a-f]{8,}", e), "a token is shown in last_error: %r" % e)


class EchoingNode:
    """A RESP-aware proxy in front of a real node that answers every
    command carrying all the words of `words` with an error echoing the
    whole command, as a server or proxy other than Redis may; every other
    command goes to the node and its one reply comes back."""

    def __init__(self, node):
        self.node, self.words = node, set()
        self.server = h.LoopbackServer(self._serve)
        self.url = "redis://127.0.0.1:%d" % self.server.port

    @staticmethod
    def _line(f):
        line = f.readline()
        if not line.endswith(b"\r\n"):
            raise EOFError
        return line

    def _reply(self, f):
        """One whole reply from the node, as its bytes."""
        line = self._line(f)
        if line[:1] == b"$" and int(line[1:]) >= 0:
            return line + f.read(int(line[1:]) + 2)
        if line[:1] == b"*" and int(line[1:]) > 0:
            return line + b"".join(self._reply(f) for _ in range(int(line[1:])))
        return line

    def _serve(self, client):
        up = self.server.track(socket.create_connection(("127.0.0.1", self.node.port)))
        fc, fu = client.makefile("rb"), up.makefile("rb")
        try:
            while True:
                head = self._line(fc)
                raw, args = head, []
                for _ in range(int(head[1:])):
                    size = self._line(fc)
                    data = fc.read(int(size[1:]) + 2)
                    raw += size + data
                    args.append(data[:-2].decode("latin-1"))
                if self.words and self.words <= set(args):
                    client.sendall(("-ERR refused: %s\r\n" % " ".join(a[:40] for a in args[2:])).encode("latin-1"))
                    continue
                up.sendall(raw)
                client.sendall(self._reply(fu))
        except (EOFError, OSError, ValueError):
            pass
        finally:
            client.close()
            up.close()

    def close(self):
        self.server.close()


def test_release_many_of_locks_with_their_own_tokens_shows_none_of_them():
    """redlock_release_many of names held one by one sends one token per
    name; a server that echoes the command in an error must not get any of
    them into last_error, although only one token can be masked."""
    nodes = [h.RedisNode(), h.RedisNode()]
    echo = EchoingNode(h.RedisNode())
    try:
        con = h.connect([nodes[0].url, nodes[1].url, echo.url])
        toks = [is_token(value(con, "SELECT redlock_acquire(?, 10000)", n), n) for n in ("ea", "eb")]
        echo.words = set(toks)
        eq(value(con, "SELECT redlock_release_many('[\"ea\",\"eb\"]')"), 2, "released on the two other nodes")
        errs = last_errors(con)
        check("ERR" in errs[2], "the echoing node's error is recorded: %r" % errs)
        for e in errs:
            for t in toks:
                no_prefix_of(t, e, "last_error", shortest=8)
    finally:
        echo.close()


# --------------------------------------------------------------------------
# item 3: error text is valid UTF-8 without control characters
# --------------------------------------------------------------------------

NAME = "a" + "\u00e9" * 40          # 81 bytes: a cut at 64 bytes falls inside a character


def test_long_multibyte_name_dead_node():
    con = h.connect(dead_url())
    clean_text(error_of(con, "SELECT redlock_acquire(?, 10000)", NAME), "dead-node error")


def test_long_multibyte_name_lock_held():
    c = h.shared_cluster(1)
    a, b = h.connect(c), h.connect(c)
    check(is_token(value(a, "SELECT redlock_acquire(?, 10000)", NAME)), "first holder")
    clean_text(error_of(b, "SELECT redlock_lock(?, 10000)", NAME), "redlock_lock error")


def test_long_multibyte_setting_name():
    con = h.connect(dead_url())
    clean_text(error_of(con, "SELECT redlock_config(?)", NAME), "unknown setting error")


def test_auth_error_escape_sequences_cleaned():
    # The user name is no secret and the server echoes it with its escapes.
    node = h.RedisNode(extra_args=["--rename-command", "AUTH", ""])
    con = h.connect(dead_url())
    con.execute("DELETE FROM redlock_nodes")
    con.execute("INSERT INTO redlock_nodes(host, port, username, password) VALUES ('127.0.0.1', ?, ?, ?)",
                (node.port, "u" + ESC, PW))
    msg = error_of(con, "SELECT redlock_acquire('esc', 10000)")
    check("AUTH failed" in msg, "the error names the failed AUTH: %r" % msg)
    clean_text(msg, "acquire error")
    for e in last_errors(con):
        clean_text(e, "last_error")


def test_select_error_cleaned():
    node = h.RedisNode(extra_args=["--databases", "2"])
    con = h.connect("redis://127.0.0.1:%d/5" % node.port)
    msg = error_of(con, "SELECT redlock_acquire('sel', 10000)")
    check("SELECT 5 failed" in msg, "the error names the failed SELECT: %r" % msg)
    clean_text(msg, "acquire error")


# --------------------------------------------------------------------------
# item 5: statements on redlock_nodes are atomic
# --------------------------------------------------------------------------

def ports(con):
    return [(r["id"], r["port"]) for r in node_rows(con)]


def test_failing_insert_changes_nothing():
    con = h.connect("redis://127.0.0.1:7001")
    before = ports(con)
    redlock_error(con, "INSERT INTO redlock_nodes(host, port) VALUES ('127.0.0.1', 7002), ('127.0.0.1', 0)",
                  contains=("port",))
    eq(ports(con), before, "nodes after a two-row INSERT whose second row is bad")


def test_failing_update_changes_nothing():
    con = h.connect("redis://127.0.0.1:7001,redis://127.0.0.1:7002")
    before = ports(con)
    redlock_error(con, "UPDATE redlock_nodes SET port = CASE id WHEN 1 THEN 7777 ELSE 0 END", contains=("port",))
    eq(ports(con), before, "nodes after an UPDATE that failed on its second row")


def test_failing_delete_then_insert_changes_nothing():
    con = h.connect("redis://127.0.0.1:7001,redis://127.0.0.1:7002")
    before = ports(con)
    # INSERT ... SELECT reading the table it writes: the bad row comes last
    redlock_error(con, "INSERT INTO redlock_nodes(host, port) SELECT '127.0.0.1', CASE id WHEN 1 THEN 7003 "
                       "ELSE 70000 END FROM redlock_nodes ORDER BY id", contains=("port",))
    eq(ports(con), before, "nodes after an INSERT ... SELECT that failed")
    con.execute("INSERT INTO redlock_nodes(host, port) VALUES ('127.0.0.1', 7003), ('127.0.0.1', 7004)")
    eq(len(ports(con)), 4, "a good two-row INSERT adds both")


# --------------------------------------------------------------------------
# no node-list change while locks are held (a lock counts only on the nodes it was taken on)
# --------------------------------------------------------------------------

WRITES = ("DELETE FROM redlock_nodes WHERE id > 1",
          "INSERT INTO redlock_nodes(host, port) VALUES ('127.0.0.1', 7009)",
          "UPDATE redlock_nodes SET timeout_ms = 1000 WHERE id = 2")


def test_node_edit_refused_while_holding_auto_extended():
    c = h.Cluster(3)
    with c:
        con = h.connect(c, auto_extend=1)
        tok = value(con, "SELECT redlock_acquire('held', 900)")
        check(is_token(tok), "acquired")
        before = ports(con)
        for sql in WRITES:
            redlock_error(con, sql, contains=("redlock_release_all()",))
        eq(ports(con), before, "nodes unchanged")
        other = h.SqlProc(c)
        # the lock stays exclusive on the original three nodes, extension after extension
        h.wait_until(lambda: value(con, "SELECT extensions FROM redlock_locks") >= 2, what="two extensions")
        eq(other.value("SELECT redlock_acquire('held', 5000)"), None, "a second client while it is held")
        eq(value(con, "SELECT state FROM redlock_locks"), "held", "our state")
        eq(value(con, "SELECT redlock_release_all()"), 1, "released")
        con.execute(WRITES[0])
        eq(len(ports(con)), 1, "after releasing, the DELETE works")
        other.kill()


def test_node_edit_refused_while_holding_expired_lock():
    c = h.shared_cluster(1)
    con = h.connect(c)
    check(is_token(value(con, "SELECT redlock_acquire('short', 30)")), "acquired")
    h.wait_until(lambda: value(con, "SELECT validity_ms FROM redlock_locks") == 0, what="the lock to expire")
    redlock_error(con, WRITES[1], contains=("redlock_release_all()",))
    value(con, "SELECT redlock_release_all()")
    con.execute(WRITES[1])
    eq(len(ports(con)), 2, "after releasing, the INSERT works")


def test_quorum_not_lowered_while_holding():
    c = h.shared_cluster(3)
    con = h.connect(c)
    check(is_token(value(con, "SELECT redlock_acquire('q', 10000)")), "acquired with 2 of 3")
    redlock_error(con, "SELECT redlock_config('unsafe_test_quorum', 1)", contains=("redlock_release_all()",))
    eq(value(con, "SELECT redlock_config('unsafe_test_quorum', 3)"), 3, "raising the votes needed is allowed")
    redlock_error(con, "SELECT redlock_config('unsafe_test_quorum', 0)", contains=("redlock_release_all()",))
    check(value(con, "SELECT redlock_extend('q', 10000)") > 0, "extended with 3 of 3")
    value(con, "SELECT redlock_release_all()")
    eq(value(con, "SELECT redlock_config('unsafe_test_quorum', 1)"), 1, "lowering after release")


def test_reacquire_after_node_switch_asks_new_nodes():
    a, b = h.RedisNode(), h.RedisNode()
    con = h.connect(a)
    other = h.connect(b)
    check(is_token(value(other, "SELECT redlock_acquire('sw', 10000)")), "other holds sw on b")
    check(is_token(value(con, "SELECT redlock_acquire('sw', 10000)")), "we hold sw on a")
    redlock_error(con, "UPDATE redlock_nodes SET port = ?", b.port, contains=("redlock_release_all()",))
    eq([p for _, p in ports(con)], [a.port], "still on a")


# --------------------------------------------------------------------------
# item 6: smaller holes
# --------------------------------------------------------------------------

def test_id_after_max():
    con = h.connect("redis://127.0.0.1:7001")
    con.execute("INSERT INTO redlock_nodes(id, host, port) VALUES (9223372036854775807, '127.0.0.1', 7002)")
    msg = redlock_error(con, "INSERT INTO redlock_nodes(host, port) VALUES ('127.0.0.1', 7003)", contains=("id",))
    check(len(msg) > len("redlock: ") + 10, "the error says something: %r" % msg)
    eq(sorted(i for i, _ in ports(con)), [1, 9223372036854775807], "ids")
    con.execute("INSERT INTO redlock_nodes(id, host, port) VALUES (5, '127.0.0.1', 7003)")
    eq(len(ports(con)), 3, "an explicit id still works")


def test_nul_in_settings():
    con = h.connect(dead_url())
    redlock_error(con, "SELECT redlock_config('key_prefix', ?)", "pre\x00fix", contains=("NUL",))
    eq(value(con, "SELECT redlock_config('key_prefix')"), "", "prefix unchanged")
    redlock_error(con, "SELECT redlock_config(?)", "timeout_ms\x00junk", contains=("NUL",))
    redlock_error(con, "SELECT redlock_config(?, 100)", "timeout_ms\x00junk", contains=("NUL",))
    eq(value(con, "SELECT redlock_config('timeout_ms')"), h.RELAXED_TIMEOUT_MS, "timeout unchanged")


def test_fence_of_expired_lock():
    c = h.shared_cluster(1)
    con = h.connect(c)
    check(is_token(value(con, "SELECT redlock_acquire('fx', 30)")), "acquired")
    fence = value(con, "SELECT fence FROM redlock_locks")
    check(isinstance(fence, int) and fence > 0, "fence listed: %r" % fence)
    h.wait_until(lambda: value(con, "SELECT validity_ms FROM redlock_locks") == 0, what="the lock to expire")
    eq(value(con, "SELECT state FROM redlock_locks"), "expired", "state")
    eq(value(con, "SELECT redlock_fence('fx')"), fence, "redlock_fence of the expired lock")


def test_ttl_below_drift():
    c = h.shared_cluster(1)
    con = h.connect(c)
    for ttl in (1, 2):
        for sql in ("SELECT redlock_acquire('d', ?)", "SELECT redlock_lock('d', ?)"):
            msg = redlock_error(con, sql, ttl, contains=("ttl_ms", "drift"))
            check("timeout_ms" not in msg, "blames timeout_ms: %r" % msg)
    tok = value(con, "SELECT redlock_acquire('d', 10000)")
    redlock_error(con, "SELECT redlock_extend('d', 2)", contains=("ttl_ms", "drift"))
    check(value(con, "SELECT redlock_validity('d')") > 0, "still held after the refused extend")
    eq(value(con, "SELECT redlock_release('d', ?)", tok), 1, "released")


def test_setting_type_named():
    con = h.connect(dead_url())
    msg = redlock_error(con, "SELECT redlock_config('timeout_ms', 'abc')", contains=("whole number", "text"))
    msg = redlock_error(con, "SELECT redlock_config('timeout_ms', 1.5)", contains=("whole number",))
    msg = redlock_error(con, "SELECT redlock_config('key_prefix', 5)", contains=("text",))
    msg = redlock_error(con, "SELECT redlock_config('drift_factor', 'x')", contains=("number", "text"))
    del msg


def test_default_node_named_in_errors():
    # nothing may listen on 127.0.0.1:6379 for this test to mean anything
    import socket
    s = socket.socket()
    try:
        busy = s.connect_ex(("127.0.0.1", 6379)) == 0
    finally:
        s.close()
    check(not busy, "something listens on 127.0.0.1:6379; this test needs it free")
    con = h.connect(None)
    redlock_error(con, "SELECT redlock_acquire('dflt', 10000)", contains=("REDLOCK_NODES", "default"))
    con.execute("INSERT INTO redlock_nodes(host, port) VALUES ('127.0.0.1', ?)", (h.free_port(),))
    msg = redlock_error(con, "SELECT redlock_acquire('dflt', 10000)")
    check("REDLOCK_NODES" not in msg, "once the list was changed, the hint goes: %r" % msg)


def test_second_load_keeps_the_locks_and_nodes():
    """Loading the extension again on the same connection (a pooled
    connection, a script that loads it twice) changes nothing: the locks it
    holds stay held, and the nodes it was given stay."""
    c = h.shared_cluster(1)
    con = h.connect([])
    con.execute("INSERT INTO redlock_nodes(host, port) VALUES (?, ?)", (c.nodes[0].host, c.nodes[0].port))
    tok = is_token(value(con, "SELECT redlock_acquire('twice', 60000)"))
    con.enable_load_extension(True)
    con.load_extension(h.EXT)
    con.enable_load_extension(False)
    eq(value(con, "SELECT count(*) FROM redlock_locks WHERE resource = 'twice'"), 1, "the lock after a second load")
    eq(c.nodes[0].get("twice"), tok, "the key on the node after a second load")
    eq([r["port"] for r in node_rows(con)], [c.nodes[0].port], "the nodes after a second load")
    eq(value(con, "SELECT redlock_release('twice')"), 1, "release")
