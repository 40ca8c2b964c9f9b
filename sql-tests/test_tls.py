"""TLS nodes (rediss://): the lock contract and faults on real TLS-only
redis-server nodes, certificate verification and its error texts, client
certificates, the tls_* settings and URL options, files checked when they
are written, plain/TLS port mismatches, session resumption, and a forked
child that must not touch its parent's TLS connections. Certificates are
made by openssl when the module starts (harness.TlsCerts)."""
# SPDX-License-Identifier: BSD-3-Clause
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time

import harness as h
from faultproxy import FaultProxy
from harness import check, eq, holds, is_token, no_key, redlock_error, value

# not a timing test: a slow node on a loaded machine must not fail it
h.default_config(timeout_ms=h.RELAXED_TIMEOUT_MS)

CERTS = h.tls_certs()


def _node_row(con, i=0):
    return h.node_rows(con)[i]


def _try(con, sql):
    """The value of sql, or None when it fails (a node not reconnected yet)."""
    try:
        return value(con, sql)
    except h.sqlite3.Error:
        return None


def _resumed(con):
    return [r[0] for r in h.rows(con, "SELECT tls_resumed FROM redlock_nodes ORDER BY id")]


# ---- the contract on TLS nodes ----------------------------------------------

def _contract(n):
    c = h.shared_tls_cluster(n)
    con = h.connect(c)
    tok = is_token(value(con, "SELECT redlock_acquire('t-res', 10000)"))
    holds(c, "t-res", tok, 10000, "after acquire over TLS", settle_cons=(con,))
    other = h.SqlProc(c)
    eq(other.value("SELECT redlock_acquire('t-res', 10000)"), None, "acquire of a held name from another process")
    check(0 < value(con, "SELECT redlock_extend('t-res', 20000)") <= 20000, "extend over TLS")
    holds(c, "t-res", tok, 20000, "after extend", settle_cons=(con,))
    eq(value(con, "SELECT redlock_release('t-res')"), 1, "release over TLS")
    no_key(c, "t-res", "after release", settle_cons=(con, other))
    is_token(other.value("SELECT redlock_acquire('t-res', 10000)"), "acquire after release")
    rows = h.node_rows(con)
    eq([r["tls"] for r in rows], [1] * n, "tls column")
    eq([r["state"] for r in rows], ["up"] * n, "state")
    check(all(r["url"].startswith("rediss://127.0.0.1:") for r in rows), "url column shows rediss://: %r" % rows)


h.for_nodes(globals(), _contract)


def _wait_wakes_on_release(n):
    """A waiting acquire is woken by pub/sub, over TLS connections too."""
    c = h.shared_tls_cluster(n)
    holder = h.connect(c)
    is_token(value(holder, "SELECT redlock_acquire('t-wait', 30000)"))
    waiter = h.connect(c)
    result = {}
    t = threading.Thread(target=lambda: result.update(
        tok=value(waiter, "SELECT redlock_acquire('t-wait', 10000, 20000)")))
    t.start()
    # the waiter has subscribed on every node before the release
    h.wait_until(lambda: all(nd.cmd("PUBSUB", "NUMSUB", "t-wait:released")[1] >= 1 for nd in c), 10,
                 what="the waiter's subscriptions")
    eq(value(holder, "SELECT redlock_release('t-wait')"), 1, "release")
    t.join(20)
    check(not t.is_alive(), "the waiter is still waiting after the release")
    is_token(result.get("tok"), "the waiter's token")


h.for_nodes(globals(), _wait_wakes_on_release, (1, 3))


# ---- verification ------------------------------------------------------------

def _fails_with(url, *contains, **config):
    con = h.connect(url, **config)
    msg = redlock_error(con, "SELECT redlock_acquire('v', 1000)", contains=contains)
    eq(_node_row(con)["state"], "down", "state of the node that failed verification")
    return msg


def test_unknown_ca():
    n = h.TlsRedisNode()
    # no tls_ca_file: the system's CA store does not know the test CA
    _fails_with("rediss://127.0.0.1:%d" % n.port, "TLS certificate verification failed", "unknown CA")
    _fails_with("rediss://127.0.0.1:%d?tls_ca_file=%s" % (n.port, CERTS.other_ca),
                "TLS certificate verification failed", "tls_ca_file")


def _hashed_ca_dir(name, ca):
    """A CA directory as openssl rehash makes it, trusting ca (None: nothing)."""
    d = os.path.join(CERTS.dir, name)
    if not os.path.isdir(d):
        os.mkdir(d)
        if ca:
            hv = subprocess.run([h.OPENSSL, "x509", "-hash", "-noout", "-in", ca], capture_output=True,
                                text=True, check=True).stdout.strip()
            os.symlink(ca, os.path.join(d, hv + ".0"))
    return d


def test_ca_from_settings_and_dir():
    n = h.TlsRedisNode()
    con = h.connect("rediss://127.0.0.1:%d" % n.port, tls_ca_file=CERTS.ca)
    is_token(value(con, "SELECT redlock_acquire('ca-set', 1000)"), "with tls_ca_file set by redlock_config")
    # a hashed CA directory, as c_rehash / openssl rehash make it
    d = _hashed_ca_dir("cadir", CERTS.ca)
    con2 = h.connect("rediss://127.0.0.1:%d?tls_ca_dir=%s" % (n.port, d))
    is_token(value(con2, "SELECT redlock_acquire('ca-dir', 1000)"), "with tls_ca_dir in the URL")


def test_nodes_differing_only_in_ca_dir_or_client_key_get_contexts_of_their_own():
    """Nodes whose TLS settings are equal share one context. The text that
    told settings apart held NUL bytes between its parts and was compared
    with strcmp, so only tls_verify and tls_ca_file counted: a node whose
    own tls_ca_dir trusts nothing used an earlier node's context (and CA),
    connected to a server it must refuse and sent it its password; its own
    client certificate and key were never loaded."""
    n = h.TlsRedisNode(password="s3cret-pw")
    trusting, empty = _hashed_ca_dir("cadir-a", CERTS.ca), _hashed_ca_dir("cadir-empty", None)
    con = h.connect("", defaults=True)
    con.execute("INSERT INTO redlock_nodes(url) VALUES (?)", ("rediss://127.0.0.1:%d?tls_ca_dir=%s" % (n.port, trusting),))
    con.execute("INSERT INTO redlock_nodes(url) VALUES (?)", ("rediss://:s3cret-pw@localhost:%d?tls_ca_dir=%s"
                                                             % (n.port, empty),))
    value(con, "SELECT redlock_ping()")
    rows = h.node_rows(con)
    check("TLS certificate verification failed" in (rows[1]["last_error"] or ""),
          "the node trusting nothing must refuse the server: %r" % rows[1]["last_error"])
    # a client key that does not go with its certificate: refused on its own, and after another node too
    con.execute("DELETE FROM redlock_nodes WHERE id = 2")
    redlock_error(con, "INSERT INTO redlock_nodes(url) VALUES (?)", "rediss://localhost:%d?tls_ca_dir=%s&tls_cert_file=%s"
                  "&tls_key_file=%s" % (n.port, trusting, CERTS.client, CERTS.server_key),
                  contains=("not the key of the certificate",))


def test_an_insert_or_update_reads_the_files_as_they_are_now():
    """A row written (INSERT, or UPDATE, even SET url = url) reads its TLS
    files again, so a CA file renewed on disk takes effect and a file gone
    is reported. A context of equal settings was shared instead: an UPDATE
    after the CA file had been replaced kept trusting the old CA, and an
    INSERT naming a deleted file went through."""
    n = h.TlsRedisNode()
    d = tempfile.mkdtemp(prefix="redlock-reread-")
    try:
        ca = os.path.join(d, "ca.pem")
        shutil.copy(CERTS.ca, ca)
        con = h.connect("rediss://127.0.0.1:%d?tls_ca_file=%s" % (n.port, ca), defaults=True)
        is_token(value(con, "SELECT redlock_acquire('rr', 1000)"), "trusted by the CA in the file")
        value(con, "SELECT redlock_release_all()")
        shutil.copy(CERTS.other_ca, ca)   # the file now holds another CA
        con.execute("UPDATE redlock_nodes SET url = url WHERE id = 1")
        err = h.redlock_error(con, "SELECT redlock_acquire('rr2', 1000)", contains=("TLS certificate verification failed",))
        check("unknown CA" in err, "the renewed file's CA does not know the server: %r" % err)
        os.remove(ca)
        redlock_error(con, "INSERT INTO redlock_nodes(url) VALUES (?)", "rediss://localhost:%d?tls_ca_file=%s" % (n.port, ca),
                      contains=("No such file",))
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_verify_off_by_setting_needs_the_password_of_a_node_that_takes_it():
    """A password node's own checks cannot be turned off without giving the
    password again (the nodes table); redlock_config('tls_verify', 0) turned
    off the check of every node taking it from the setting, password or
    not, so the password went to whatever answered at the node's address.
    It is refused while such a node has a password."""
    n = h.TlsRedisNode(password="s3cret-pw")
    con = h.connect("rediss://:s3cret-pw@127.0.0.1:%d?tls_ca_file=%s" % (n.port, CERTS.ca), defaults=True)
    is_token(value(con, "SELECT redlock_acquire('vo', 1000)"), "verified, with the password")
    redlock_error(con, "SELECT redlock_config('tls_verify', 0)", contains=("node 1", "has a password"))
    eq(value(con, "SELECT redlock_config('tls_verify')"), 1, "the setting is left on")
    value(con, "SELECT redlock_release_all()")   # the nodes cannot change while locks are held
    con.execute("UPDATE redlock_nodes SET url = ? WHERE id = 1",
                ("rediss://:s3cret-pw@127.0.0.1:%d?tls_verify=1&tls_ca_file=%s" % (n.port, CERTS.ca),))
    eq(value(con, "SELECT redlock_config('tls_verify', 0)"), 0, "allowed once the node has its own tls_verify")
    is_token(value(con, "SELECT redlock_acquire('vo2', 1000)"), "the node still checks the certificate")
    plain = h.connect(n.url, defaults=True)
    eq(value(plain, "SELECT redlock_config('tls_verify', 0)"), 0, "a node without a password: allowed")


def test_trust_anchors_by_setting_need_the_password_of_a_node_that_takes_them():
    """A password node's CA cannot be changed without giving the password
    again (the nodes table); redlock_config('tls_ca_file') or ('tls_ca_dir')
    changed the CA of every node taking its CA from the settings, and SQL
    can write a file a CA is read from (ATTACH makes one), so the password
    went to whoever that CA vouched for. Refused while such a node has a
    password; the same value again (to read a renewed file) is allowed."""
    n = h.TlsRedisNode(password="s3cret-pw")
    con = h.connect("rediss://:s3cret-pw@127.0.0.1:%d" % n.port, defaults=True)
    for name, path in (("tls_ca_file", CERTS.other_ca), ("tls_ca_dir", _hashed_ca_dir("cadir-other", CERTS.other_ca))):
        redlock_error(con, "SELECT redlock_config(?, ?)", name, path, contains=(name, "node 1", "has a password"))
        eq(value(con, "SELECT redlock_config(?)", name), "", name + " is left as it was")
        eq(value(con, "SELECT redlock_config(?, '')", name), "", name + ": the same value again is allowed")
    con.execute("UPDATE redlock_nodes SET url = ? WHERE id = 1",
                ("rediss://:s3cret-pw@127.0.0.1:%d?tls_ca_file=%s" % (n.port, CERTS.ca),))
    eq(value(con, "SELECT redlock_config('tls_ca_dir', ?)", CERTS.dir), CERTS.dir,
       "allowed once the node has a CA of its own")
    is_token(value(con, "SELECT redlock_acquire('ta', 1000)"), "the node checks against its own CA")
    plain = h.connect("rediss://127.0.0.1:%d" % n.port, defaults=True)
    eq(value(plain, "SELECT redlock_config('tls_ca_file', ?)", CERTS.ca), CERTS.ca, "a node without a password: allowed")


def test_a_node_with_a_ca_of_its_own_takes_no_ca_from_the_settings():
    """A node's own tls_ca_file or tls_ca_dir is its whole trust: the
    settings' other one is not added to it. A node given its own CA file
    also trusted the CAs of the tls_ca_dir setting (and the other way
    round), so its own CA pinned nothing."""
    n = h.TlsRedisNode()
    trusting = _hashed_ca_dir("cadir-a", CERTS.ca)
    con = h.connect("rediss://127.0.0.1:%d?tls_ca_file=%s" % (n.port, CERTS.other_ca), defaults=True, tls_ca_dir=trusting)
    msg = redlock_error(con, "SELECT redlock_acquire('pin', 1000)", contains=("TLS certificate verification failed",))
    check("unknown CA" in msg or "local issuer" in msg, "refused for its CA: %r" % msg)
    con2 = h.connect("rediss://127.0.0.1:%d?tls_ca_dir=%s" % (n.port, _hashed_ca_dir("cadir-empty", None)),
                     defaults=True, tls_ca_file=CERTS.ca)
    redlock_error(con2, "SELECT redlock_acquire('pin', 1000)", contains=("TLS certificate verification failed",))


class _SilentTlsServer:
    """A TLS server (any certificate) that finishes the handshake of every
    connection and then never answers: a peer a client with tls_verify 0
    takes for its node. What the clients sent is read with take()."""

    def __init__(self):
        import ssl
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(CERTS.wrong, CERTS.wrong_key)
        self.conns = []
        self.server = h.LoopbackServer(self._handshake)
        self.port = self.server.port

    def _handshake(self, raw):
        try:
            self.conns.append(self.ctx.wrap_socket(raw, server_side=True))
        except OSError:
            pass  # the client gave up on it: a later connection is the one

    def take(self):
        """Everything received so far (sent to a loopback socket, it is here
        by the time the client's call returned)."""
        import ssl
        got = b""
        for c in list(self.conns):
            c.setblocking(False)
            while True:
                try:
                    chunk = c.recv(65536)
                except (ssl.SSLWantReadError, BlockingIOError):
                    break
                if not chunk:
                    break
                got += chunk
        return got

    def close(self):
        self.server.close()
        for c in self.conns:
            c.close()


def test_a_stalled_connection_made_before_a_tls_setting_changed_takes_nothing_new_3n():
    """Writing a tls_* setting closes the connections made under the old
    value, but a stalled one was kept to drain and went on taking releases
    and cleanups: with tls_verify turned on, the token of a lock taken
    after the change still went to the unverified peer. It now takes
    nothing new; what it is owed goes to the next connection."""
    c = h.shared_tls_cluster(2)
    peer = _SilentTlsServer()
    try:
        urls = [c[0].url + "&tls_verify=1", c[1].url + "&tls_verify=1", "rediss://127.0.0.1:%d" % peer.port]
        con = h.connect(urls, defaults=True, tls_verify=0, timeout_ms=2000)
        is_token(value(con, "SELECT redlock_acquire('before', 30000)"), "taken on the two verified nodes")
        h.wait_until(lambda: value(con, "SELECT redlock_ping()") is not None and _node_row(con, 2)["state"] == "down",
                     30, interval=0.05, what="the silent peer's connection to stall")
        check(b"before" in peer.take(), "the peer got the commands sent before the change")
        eq(value(con, "SELECT redlock_config('tls_verify', 1)"), 1, "verification turned on")
        tok = is_token(value(con, "SELECT redlock_acquire('after', 30000)"), "taken after the change")
        eq(value(con, "SELECT redlock_release('after')"), 1, "released")
        check(tok.encode() not in peer.take(), "the token of a lock taken after the change reached the unverified peer")
        value(con, "SELECT redlock_release('before')")
    finally:
        peer.close()


def _refused_with_the_system_store_from(con, variable, path):
    """With OpenSSL's environment variable pointing at path, node 1 of con
    (which has no CA of its own) must refuse its server's certificate."""
    old = os.environ.get(variable)
    os.environ[variable] = path
    try:
        con.execute("UPDATE redlock_nodes SET url = url WHERE id = 1")  # its context made now, not one made before
        redlock_error(con, "SELECT redlock_acquire('sysstore', 1000)", contains=("TLS certificate verification failed",))
    finally:
        if old is None:
            os.environ.pop(variable, None)
        else:
            os.environ[variable] = old


def test_the_system_store_is_its_bundle_file_not_a_directory_looked_up_later():
    """With no CA set, the system's CAs come from its bundle file, read when
    the context is made. Its hashed directory was searched at each
    handshake, so a file created there later (SQL makes one with ATTACH,
    wherever the process may write) was trusted at once. SSL_CERT_DIR
    stands in for that directory here."""
    n = h.TlsRedisNode()
    con = h.connect("rediss://127.0.0.1:%d" % n.port, defaults=True)
    _refused_with_the_system_store_from(con, "SSL_CERT_DIR", _hashed_ca_dir("cadir-system", CERTS.ca))


def _ca_in_a_database(path):
    """Writes at path, as SQL can with ATTACH, a SQLite database whose
    schema text holds the test CA, padded until OpenSSL reads the file as
    a CA bundle (its PEM reader stops at a line that starts with a NUL, so
    the record must fill the first page); returns path."""
    import ssl
    pem = open(CERTS.ca).read()
    for pad in range(0, 4096, 7):
        if os.path.exists(path):
            os.remove(path)
        db = h.sqlite3.connect(path)
        db.execute("CREATE TABLE t(v /*\n" + pem + "\n" + "A" * pad + " */)")
        db.commit()
        db.close()
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=path)
            return path
        except ssl.SSLError:
            pass
    raise AssertionError("no padding made OpenSSL read the database as a CA bundle")


def test_a_file_sql_could_have_made_is_never_read_as_certificates():
    """SQL creates files with ATTACH wherever the process may write, and
    OpenSSL reads a CA out of one whose schema holds it: a system bundle
    missing until SQL made one, or a tls_ca_file path SQL wrote first, made
    a node trust whatever that CA vouched for. A SQLite database is refused
    as a TLS file, and as the system's bundle (the store is then empty)."""
    n = h.TlsRedisNode()
    crafted = _ca_in_a_database(os.path.join(CERTS.dir, "crafted-bundle.db"))
    con = h.connect("rediss://127.0.0.1:%d" % n.port, defaults=True)
    redlock_error(con, "SELECT redlock_config('tls_ca_file', ?)", crafted, contains=("is a SQLite database",))
    redlock_error(con, "INSERT INTO redlock_nodes(url) VALUES (?)",
                  "rediss://localhost:%d?tls_ca_file=%s" % (n.port, crafted), contains=("is a SQLite database",))
    _refused_with_the_system_store_from(con, "SSL_CERT_FILE", crafted)


def test_host_name_mismatch():
    n = h.TlsRedisNode(cert="wrong")
    _fails_with(n.url, "TLS certificate verification failed", "IP address mismatch", "not for this host")
    _fails_with("rediss://localhost:%d?tls_ca_file=%s" % (n.port, CERTS.ca), "hostname mismatch")
    # the right certificate matches both its IP address and its name
    good = h.TlsRedisNode()
    for host in ("127.0.0.1", "localhost"):
        con = h.connect("rediss://%s:%d?tls_ca_file=%s" % (host, good.port, CERTS.ca))
        is_token(value(con, "SELECT redlock_acquire('host', 1000)"), "certificate for " + host)
        h.settle(con)
        con.close()


def test_expired_certificate():
    n = h.TlsRedisNode(cert="expired")
    _fails_with(n.url, "TLS certificate verification failed", "certificate has expired")


def test_verify_off_is_insecure_but_connects():
    n = h.TlsRedisNode(cert="expired")
    con = h.connect(n.url + "&tls_verify=0")
    is_token(value(con, "SELECT redlock_acquire('nv', 1000)"), "tls_verify=0 in the URL")
    eq(_node_row(con)["url"], "rediss://127.0.0.1:%d/0?tls_verify=0&tls_ca_file=%s" % (n.port, CERTS.ca),
       "the url shows the node's own options")
    w = h.TlsRedisNode(cert="wrong")
    con2 = h.connect(w.url, tls_verify=0)
    is_token(value(con2, "SELECT redlock_acquire('nv', 1000)"), "tls_verify=0 by redlock_config")
    # the node's own tls_verify=1 wins over the connection's 0
    con3 = h.connect(w.url + "&tls_verify=1", tls_verify=0)
    redlock_error(con3, "SELECT redlock_acquire('nv2', 1000)", contains=("IP address mismatch",))



def test_verify_turned_on_drops_unverified_connections():
    """A connection made with tls_verify 0 must not keep voting once
    tls_verify is turned on: every TLS connection made under the old
    setting is closed, and the next call connects anew and is refused."""
    w = h.TlsRedisNode(cert="wrong")
    con = h.connect(w.url, tls_verify=0)
    is_token(value(con, "SELECT redlock_acquire('vo', 1000)"), "acquire with tls_verify 0")
    eq(value(con, "SELECT redlock_release('vo')"), 1, "release")
    value(con, "SELECT redlock_config('tls_verify', 1)")
    redlock_error(con, "SELECT redlock_acquire('vo2', 1000)", contains=("IP address mismatch",))
    no_key([w], "vo2", "no lock taken over a connection made without verification")

# ---- client certificates ------------------------------------------------------

def test_client_certificate():
    n = h.TlsRedisNode(auth_clients=True)
    con = h.connect(n.url)
    msg = redlock_error(con, "SELECT redlock_acquire('cc', 1000)")
    check("client certificate" in msg or "closed" in msg, "error without a client certificate: %r" % msg)
    con2 = h.connect(n.url, tls_cert_file=CERTS.client, tls_key_file=CERTS.client_key)
    is_token(value(con2, "SELECT redlock_acquire('cc', 1000)"), "with tls_cert_file/tls_key_file set")
    url = "%s&tls_cert_file=%s&tls_key_file=%s" % (n.url, CERTS.client, CERTS.client_key)
    con3 = h.connect(url)
    is_token(value(con3, "SELECT redlock_acquire('cc2', 1000)"), "with the client certificate in the URL")
    # the key file's path may show; its bytes never do
    row = _node_row(con3)
    check("tls_key_file=" + CERTS.client_key in row["url"], "url shows the key file's path: %r" % row["url"])
    key = open(CERTS.client_key).read()
    body = "".join(key.splitlines()[1:-1])[:40]
    for r in h.rows(con3, "SELECT * FROM redlock_nodes"):
        check(all(body not in str(v) for v in r), "key bytes in redlock_nodes")


# ---- settings, URL options, columns, files checked when written --------------

def test_settings_round_trip():
    con = h.connect(None, defaults=True)
    eq(value(con, "SELECT redlock_config('tls_verify')"), 1, "tls_verify default")
    for name in ("tls_ca_file", "tls_ca_dir", "tls_cert_file", "tls_key_file"):
        eq(value(con, "SELECT redlock_config(?)", name), "", name + " default")
    eq(value(con, "SELECT redlock_config('tls_ca_file', ?)", CERTS.ca), CERTS.ca, "tls_ca_file set")
    eq(value(con, "SELECT redlock_config('tls_ca_dir', ?)", CERTS.dir), CERTS.dir, "tls_ca_dir set")
    eq(value(con, "SELECT redlock_config('tls_cert_file', ?)", CERTS.client), CERTS.client, "tls_cert_file set")
    eq(value(con, "SELECT redlock_config('tls_key_file', ?)", CERTS.client_key), CERTS.client_key, "tls_key_file")
    eq(value(con, "SELECT redlock_config('tls_verify', 0)"), 0, "tls_verify off")
    eq(value(con, "SELECT redlock_config('tls_ca_file', '')"), "", "tls_ca_file back to the system store")
    redlock_error(con, "SELECT redlock_config('tls_verify', 2)", contains=("tls_verify must be",))


def test_files_checked_when_written():
    con = h.connect(None, defaults=True)
    missing = os.path.join(CERTS.dir, "no-such.pem")
    redlock_error(con, "SELECT redlock_config('tls_ca_file', ?)", missing,
                  contains=("tls_ca_file", missing, "No such file"))
    redlock_error(con, "SELECT redlock_config('tls_ca_dir', ?)", missing, contains=("tls_ca_dir", "No such file"))
    redlock_error(con, "SELECT redlock_config('tls_key_file', ?)", CERTS.ca,
                  contains=("tls_key_file", "cannot be loaded", "private key"))
    redlock_error(con, "SELECT redlock_config('tls_cert_file', ?)", CERTS.client_key,
                  contains=("tls_cert_file", "cannot be loaded"))
    unreadable = os.path.join(CERTS.dir, "unreadable.pem")
    with open(unreadable, "w") as f:
        f.write("x")
    os.chmod(unreadable, 0)
    if os.geteuid() != 0:  # root reads any file
        redlock_error(con, "SELECT redlock_config('tls_ca_file', ?)", unreadable, contains=("Permission denied",))
    eq(value(con, "SELECT redlock_config('tls_ca_file')"), "", "a refused value leaves the setting alone")
    # rows: INSERT and UPDATE load the files of the node's URL at once
    con.execute("DELETE FROM redlock_nodes")
    ins = "INSERT INTO redlock_nodes(url) VALUES (?)"
    redlock_error(con, ins, "rediss://127.0.0.1:1?tls_ca_file=" + missing, contains=("tls_ca_file", "No such file"))
    redlock_error(con, ins, "rediss://127.0.0.1:1?tls_cert_file=%s&tls_key_file=%s" % (CERTS.client, CERTS.server_key),
                  contains=("not the key of the certificate",))
    redlock_error(con, ins, "rediss://127.0.0.1:1?tls_cert_file=" + CERTS.client,
                  contains=("tls_key_file is not", "needs both"))
    con.execute(ins, ("rediss://127.0.0.1:1?tls_ca_file=" + CERTS.ca,))
    redlock_error(con, "UPDATE redlock_nodes SET url = ? WHERE port = 1", "rediss://127.0.0.1:1?tls_ca_file=" + missing,
                  contains=("No such file",))
    eq(_node_row(con)["url"], "rediss://127.0.0.1:1/0?tls_ca_file=" + CERTS.ca, "a refused UPDATE leaves the node")
    eq(h.rows(con, "SELECT count(*) FROM redlock_nodes"), [(1,)], "refused INSERTs added no node")


def test_a_file_that_is_not_a_regular_file_is_refused_without_blocking():
    """A FIFO with no writer blocked open(2), and a terminal or stdin
    blocked read(2), inside the setting's SQL call, for good: no timeout
    and no interrupt reach into OpenSSL's file reads. Paths that are not a
    regular file (a directory for tls_ca_dir) are now refused at once, and
    a file too large to be certificates is refused unread."""
    d = tempfile.mkdtemp(prefix="redlock-tlsfifo-")
    try:
        fifo = os.path.join(d, "ca.pem")
        os.mkfifo(fifo)
        big = os.path.join(d, "big.pem")
        with open(big, "wb") as f:
            f.truncate(64 << 20)   # sparse: 64 MiB that read as zeros
        sql = "".join("SELECT redlock_config('%s', '%s');\n" % (setting, path) for setting, path in (
            ("tls_ca_file", fifo), ("tls_cert_file", fifo), ("tls_key_file", fifo), ("tls_ca_file", "/dev/zero"),
            ("tls_ca_dir", fifo), ("tls_ca_file", d), ("tls_ca_file", big)))
        sql += "SELECT 'done';\n"
        rc, out, err = h.shell(sql, "", timeout=20)
        eq(out.strip(), "done", "every setting refused, the shell went on (stderr %r)" % err)
        lines = [l for l in err.splitlines() if "redlock:" in l]
        eq(len(lines), 7, "seven refusals: %r" % err)
        for l in lines[:4] + lines[5:6]:
            check("is not a regular file" in l, "the reason: %r" % l)
        check("is not a directory" in lines[4], "the reason: %r" % lines[4])
        check("larger than" in lines[6], "the reason: %r" % lines[6])
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_url_options_and_columns():
    con = h.connect(None, defaults=True)
    con.execute("DELETE FROM redlock_nodes")
    ins = "INSERT INTO redlock_nodes(url) VALUES (?)"
    redlock_error(con, ins, "redis://127.0.0.1:1?tls_ca_file=" + CERTS.ca, contains=("TLS option", "rediss://"))
    redlock_error(con, ins, "rediss://127.0.0.1:1?tls_verify=2", contains=("tls_verify must be 0 or 1",))
    redlock_error(con, ins, "rediss://127.0.0.1:1?tls_bogus=1", contains=("unknown option",))
    redlock_error(con, ins, "rediss://127.0.0.1:1?tls_verify=0&tls_verify=1", contains=("twice",))
    redlock_error(con, "INSERT INTO redlock_nodes(url, tls) VALUES (?, 0)", "rediss://127.0.0.1:1",
                  contains=("contradicts",))
    redlock_error(con, "INSERT INTO redlock_nodes(host, port, tls) VALUES ('127.0.0.1', 1, 2)",
                  contains=("tls must be 0",))
    redlock_error(con, "INSERT INTO redlock_nodes(host, port, tls_resumed) VALUES ('127.0.0.1', 1, 5)",
                  contains=("read-only",))
    # a path with characters that need escaping reads back as the same path
    odd = os.path.join(CERTS.dir, "ca & co?.pem")
    if not os.path.exists(odd):
        os.symlink(CERTS.ca, odd)
    con.execute(ins, ("rediss://:pw@127.0.0.1:2/3?timeout_ms=70&tls_ca_file=%s" % odd.replace("&", "%26").replace(
        "?", "%3F").replace(" ", "%20"),))
    con.execute("INSERT INTO redlock_nodes(host, port, tls) VALUES ('127.0.0.1', 3, 1)")
    con.execute("INSERT INTO redlock_nodes(host, port) VALUES ('127.0.0.1', 4)")
    rows = h.node_rows(con)
    eq([r["tls"] for r in rows], [1, 1, 0], "tls column")
    check(rows[0]["url"].startswith("rediss://:********@127.0.0.1:2/3?timeout_ms=70&tls_ca_file="),
          "masked url: %r" % rows[0]["url"])
    eq([r["url"] for r in rows[1:]], ["rediss://127.0.0.1:3/0", "redis://127.0.0.1:4/0"], "urls")
    # the url shown makes the same node again (password aside)
    con2 = h.connect(None, defaults=True)
    con2.execute("DELETE FROM redlock_nodes")
    con2.execute(ins, (rows[0]["url"],))
    eq(_node_row(con2)["url"], rows[0]["url"], "url read back")
    # the masked password is not kept for weaker TLS checks
    h.redlock_error(con, "UPDATE redlock_nodes SET url = ? WHERE port = 2", "rediss://:********@127.0.0.1:2/3?tls_verify=0",
                    contains=("give the password again",))
    # UPDATE switches TLS on and off; the node's own options go with tls=0,
    # and the password must come again (it would go in clear)
    h.redlock_error(con, "UPDATE redlock_nodes SET tls = 0 WHERE port = 2", contains=("give the password again",))
    con.execute("UPDATE redlock_nodes SET tls = 0, password = 'pw' WHERE port = 2")
    con.execute("UPDATE redlock_nodes SET tls = 1 WHERE port = 4")
    con.execute("UPDATE redlock_nodes SET timeout_ms = 90 WHERE port = 3")
    rows = h.node_rows(con)
    eq([r["url"] for r in rows], ["redis://:********@127.0.0.1:2/3?timeout_ms=70", "rediss://127.0.0.1:3/0?timeout_ms=90",
                                  "rediss://127.0.0.1:4/0"], "urls after UPDATE")
    eq([r["tls"] for r in rows], [0, 1, 1], "tls after UPDATE")


def test_redlock_nodes_env_carries_options():
    n = h.TlsRedisNode(auth_clients=True)
    env = "%s&tls_cert_file=%s&tls_key_file=%s" % (n.url, CERTS.client, CERTS.client_key)
    rc, out, err = h.shell("SELECT length(redlock_acquire('env', 1000));", env)
    eq((rc, out.strip(), err), (0, "60", ""), "the sqlite3 shell with REDLOCK_NODES carrying TLS options")
    try:
        h.connect("rediss://127.0.0.1:1?tls_ca_file=/nonexistent/ca.pem")
        raise AssertionError("loading with a missing CA file in REDLOCK_NODES succeeded")
    except h.sqlite3.Error as e:
        check("redlock: REDLOCK_NODES: tls_ca_file '/nonexistent/ca.pem': No such file" in str(e), str(e))


# ---- plain and TLS ports mixed up --------------------------------------------

def test_plain_url_on_tls_port():
    n = h.TlsRedisNode()
    con = h.connect("redis://127.0.0.1:%d" % n.port)
    redlock_error(con, "SELECT redlock_acquire('pm', 1000)", contains=("use rediss://",))


def test_tls_url_on_plain_port():
    n = h.RedisNode()
    con = h.connect("rediss://127.0.0.1:%d" % n.port, timeout_ms=200)
    redlock_error(con, "SELECT redlock_acquire('pm', 1000)",
                  contains=("TLS handshake not finished", "use redis://"))
    # a redis-server that answers the TLS hello in plain text
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)

    def answer():
        try:
            s, _ = srv.accept()
            s.recv(4096)
            s.sendall(b"-ERR unknown command\r\n")
            s.close()
        except OSError:
            pass
    t = threading.Thread(target=answer, daemon=True)
    t.start()
    con2 = h.connect("rediss://127.0.0.1:%d" % srv.getsockname()[1], timeout_ms=2000)
    redlock_error(con2, "SELECT redlock_acquire('pm', 1000)", contains=("answered in plain text", "use redis://"))
    srv.close()


# ---- faults on TLS nodes ----------------------------------------------------

def _hung_listener():
    """A socket that accepts TCP (the kernel's backlog) and never answers."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    return s


def test_hung_handshake_costs_one_timeout():
    with h.TlsCluster(2) as c:
        hung = _hung_listener()
        urls = [c[0].url, c[1].url, "rediss://127.0.0.1:%d?tls_ca_file=%s" % (hung.getsockname()[1], CERTS.ca)]
        con = h.connect(urls, timeout_ms=300)
        t0 = time.monotonic()
        tok = is_token(value(con, "SELECT redlock_acquire('hs', 10000)"), "2 of 3 with one hung handshake")
        took = time.monotonic() - t0
        holds(c, "hs", tok, 10000, "the two answering nodes")
        h.settle(con)
        row = _node_row(con, 2)
        eq(row["state"], "down", "the hung node")
        check("TLS handshake not finished" in (row["last_error"] or ""), "last_error: %r" % row["last_error"])
        # alone, the hung node costs its timeout and no more
        one = h.connect(urls[2:], timeout_ms=300)
        t1 = time.monotonic()
        redlock_error(one, "SELECT redlock_acquire('hs1', 10000)", contains=("TLS handshake not finished",))
        alone = time.monotonic() - t1
        h.report("tls: acquire on 3 nodes with one hung TLS handshake took %.0f ms; a single hung node %.0f ms "
                 "(timeout_ms 300)" % (took * 1000, alone * 1000))
        hung.close()


def _sigstop_during_handshake(n):
    with h.TlsCluster(n) as c:
        c[0].stop()  # accepts TCP (backlog), never answers the hello
        con = h.connect(c, timeout_ms=300)
        if n == 1:
            redlock_error(con, "SELECT redlock_acquire('st', 10000)", contains=("TLS handshake not finished",))
        else:
            tok = is_token(value(con, "SELECT redlock_acquire('st', 10000)"), "acquire with one node stopped")
            holds(c.nodes[1:], "st", tok, 10000, "the running nodes", settle_cons=(con,))
        c[0].cont()
        # the node comes back: a later call reaches it again
        h.wait_until(lambda: _try(con, "SELECT redlock_acquire('st2-' || hex(randomblob(4)), 10000)") and
                     _node_row(con)["state"] == "up", 15, what="the stopped node back up")


h.for_nodes(globals(), _sigstop_during_handshake, (1, 3))


def test_sigstop_during_commands_3n():
    with h.TlsCluster(3) as c:
        con = h.connect(c, timeout_ms=300)
        is_token(value(con, "SELECT redlock_acquire('sc0', 10000)"), "warm up")
        h.settle(con)
        c[2].stop()
        tok = is_token(value(con, "SELECT redlock_acquire('sc', 10000)"), "acquire with one TLS node stopped")
        holds(c.nodes[:2], "sc", tok, 10000, "the running nodes", settle_cons=(con,))
        check("no answer within" in _node_row(con, 2)["last_error"], "last_error of the stopped node")
        c[2].cont()
        eq(value(con, "SELECT redlock_release('sc')"), 1, "release")
        no_key(c, "sc", "after release and SIGCONT", settle_cons=(con,), timeout=10)


def test_kill_and_restart_3n():
    with h.TlsCluster(3) as c:
        con = h.connect(c)
        is_token(value(con, "SELECT redlock_acquire('kr0', 10000)"))
        h.settle(con)
        c[1].kill9()
        tok = is_token(value(con, "SELECT redlock_acquire('kr', 10000)"), "acquire with one TLS node killed")
        holds([c[0], c[2]], "kr", tok, 10000, "the living nodes", settle_cons=(con,))
        eq(_node_row(con, 1)["state"], "down", "the killed node")
        c[1].restart()
        h.wait_until(lambda: _try(con, "SELECT redlock_acquire('kr-' || hex(randomblob(4)), 10000)")
                     and _node_row(con, 1)["state"] == "up", 15, what="the restarted TLS node up again")


def test_fault_proxy_in_front_of_tls_node():
    with h.TlsCluster(3) as c:
        with FaultProxy("127.0.0.1", c[0].port) as p:
            proxied = "rediss://127.0.0.1:%d?tls_ca_file=%s" % (p.port, CERTS.ca)
            con = h.connect([proxied, c[1].url, c[2].url], timeout_ms=300)
            is_token(value(con, "SELECT redlock_acquire('fp0', 10000)"), "through the proxy")
            h.settle(con)
            p.blackhole()
            tok = is_token(value(con, "SELECT redlock_acquire('fp1', 10000)"), "proxied node blackholed")
            holds(c.nodes[1:], "fp1", tok, 10000, "the direct nodes", settle_cons=(con,))
            p.reset()
            tok2 = is_token(value(con, "SELECT redlock_acquire('fp2', 10000)"), "proxied node reset")
            holds(c.nodes[1:], "fp2", tok2, 10000, "the direct nodes", settle_cons=(con,))
            p.pass_()
            h.wait_until(lambda: _try(con, "SELECT redlock_acquire('fp-' || hex(randomblob(4)), 10000)") and
                         _node_row(con)["state"] == "up", 15, what="the proxied TLS node up again")



def test_tls_setting_change_drains_a_connection_that_owes_replies():
    """The acquire is decided by nodes 2 and 3 while node 1's reply (its SET
    ran) is held back; then a tls_* setting is written. Node 1's connection
    still owes that reply: it is kept only to drain it, the node connects
    anew once it is in, and the release reaches node 1 after the SET, so
    the key does not stay there."""
    with h.TlsCluster(3) as c:
        with FaultProxy("127.0.0.1", c[0].port) as p:
            proxied = "rediss://127.0.0.1:%d?tls_ca_file=%s" % (p.port, CERTS.ca)
            con = h.connect([proxied, c[1].url, c[2].url], timeout_ms=5000)
            is_token(value(con, "SELECT redlock_acquire('dr0', 10000)"), "warm-up")
            eq(value(con, "SELECT redlock_release('dr0')"), 1, "warm-up release")
            h.settle(con)
            p.delay_replies(500)
            tok = is_token(value(con, "SELECT redlock_acquire('dr', 60000)"), "decided by nodes 2 and 3")
            h.wait_until(lambda: c.nodes[0].get("dr") == tok, 5, interval=0.01, what="our SET to run on node 1")
            value(con, "SELECT redlock_config('tls_ca_file', ?)", CERTS.ca)
            p.pass_()
            eq(value(con, "SELECT redlock_release('dr')"), 1, "release")
            h.wait_until(lambda: value(con, "SELECT redlock_ping()") is not None and c.nodes[0].get("dr") is None,
                         10, interval=0.05, what="our key on node 1 released")
            h.wait_until(lambda: value(con, "SELECT redlock_ping()") == 3, 10, interval=0.05,
                         what="node 1 connected anew")

# ---- session resumption -------------------------------------------------------

def test_reconnect_resumes_session():
    n = h.TlsRedisNode()
    con = h.connect(n, reconnect_min_ms=1, reconnect_max_ms=1)
    is_token(value(con, "SELECT redlock_acquire('rs', 10000)"))
    eq(_resumed(con), [0], "first connection: a full handshake")
    # drop our connection on the server side, a few times: each reconnection resumes
    for i in range(3):
        n.cmd("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        h.wait_until(lambda: _try(con, "SELECT redlock_extend('rs', 10000)") and _resumed(con)[0] > i, 10,
                     what="reconnection %d" % (i + 1))
    eq(_resumed(con), [3], "three reconnections, each resumed")
    # new settings: the old session is not resumed (it was verified under other ones)
    value(con, "SELECT redlock_config('tls_verify', 1)")
    n.cmd("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
    h.wait_until(lambda: _try(con, "SELECT redlock_extend('rs', 10000)"), 10, what="reconnection after new settings")
    eq(_resumed(con), [3], "a full handshake after the settings changed")


# ---- fork ---------------------------------------------------------------------

def _child(con):
    try:
        if con.execute("SELECT redlock_acquire('tf', 1000)").fetchone()[0] is not None:
            return 10
        if con.execute("SELECT redlock_acquire('tf-child', 1000)").fetchone()[0] is None:
            return 12
        if con.execute("SELECT redlock_release('tf-child')").fetchone()[0] != 1:
            return 13
        con.close()
        return 0
    except BaseException:
        return 14


def test_forked_child_leaves_parent_tls_connections_alone():
    c = h.shared_tls_cluster(3)
    con = h.connect(c)
    tok = is_token(value(con, "SELECT redlock_acquire('tf', 10000)"), "parent's acquire")
    h.settle(con)
    pid = os.fork()
    if pid == 0:
        os._exit(_child(con))
    _, status = os.waitpid(pid, 0)
    eq(os.waitstatus_to_exitcode(status), 0, "the child's checks (exit code names the failed one)")
    # Had the child written a TLS record (or a close_notify) on the parent's
    # connections, their streams would be out of step and fail here.
    check(0 < value(con, "SELECT redlock_extend('tf', 10000)") <= 10000, "the parent's extend after the fork")
    eq([r["state"] for r in h.node_rows(con)], ["up"] * 3, "the parent's nodes")
    holds(c, "tf", tok, 10000, "the parent's lock after the fork", settle_cons=(con,))
    eq(value(con, "SELECT redlock_release('tf')"), 1, "the parent's release")
    no_key(c, "tf", "after the parent's release", settle_cons=(con,))
