#!/usr/bin/python3
"""Tests of sql-tests/faultproxy.py against a real redis-server.

Self-contained: every test starts its own redis-server on a free loopback
port and stops it at the end, even on failure.  No speed assertions: only
ordering and semantics, and every wait is bounded.

Run directly:  /usr/bin/python3 sql-tests/test_faultproxy.py [name-filter]
"""
# SPDX-License-Identifier: BSD-3-Clause

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from faultproxy import FaultProxy  # noqa: E402

PROXY_SCRIPT = os.path.join(HERE, 'faultproxy.py')
WAIT = 10.0          # upper bound for anything that should happen
SILENCE = 0.3        # how long we listen to check that nothing arrives


# ------------------------------------------------------------------ helpers
def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


class Redis:
    """A throw-away redis-server on a free loopback port."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix='fp-redis-')
        self.proc = None
        last = None
        for _ in range(5):
            self.port = free_port()
            self.proc = subprocess.Popen(
                ['redis-server', '--port', str(self.port),
                 '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no',
                 '--dir', self.dir],
                cwd=self.dir, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + WAIT
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    with Client(self.port, timeout=1) as c:
                        if c.cmd('PING') == 'PONG':
                            return
                except OSError as e:
                    last = e
                time.sleep(0.02)
            self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
        raise RuntimeError('redis-server did not start: %r' % (last,))

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def close(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class RedisError(Exception):
    pass


class Client:
    """Minimal RESP client on a raw socket (so we see resets and EOFs)."""

    def __init__(self, port, timeout=WAIT):
        self.sock = socket.create_connection(('127.0.0.1', port),
                                             timeout=timeout)
        self.buf = b''

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def settimeout(self, t):
        self.sock.settimeout(t)

    @staticmethod
    def encode(*args):
        out = [b'*%d\r\n' % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b'$%d\r\n%s\r\n' % (len(a), a))
        return b''.join(out)

    def send(self, *args):
        self.sock.sendall(self.encode(*args))

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise EOFError('connection closed by peer')
        self.buf += chunk

    def _line(self):
        while b'\r\n' not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b'\r\n', 1)
        return line

    def reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b'+':
            return rest.decode()
        if kind == b'-':
            return RedisError(rest.decode())
        if kind == b':':
            return int(rest)
        if kind == b'$':
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self._fill()
            data, self.buf = self.buf[:n], self.buf[n + 2:]
            return data
        if kind == b'*':
            n = int(rest)
            return None if n < 0 else [self.reply() for _ in range(n)]
        raise AssertionError('bad RESP line %r' % line)

    def cmd(self, *args):
        self.send(*args)
        return self.reply()


def expect_silence(client, seconds=SILENCE):
    """Assert that nothing at all arrives within `seconds`."""
    client.settimeout(seconds)
    try:
        client.reply()
    except socket.timeout:
        return
    finally:
        client.settimeout(WAIT)
    raise AssertionError('got data while expecting silence')


def expect_dead(client):
    """Assert the peer aborts the connection (RST or EOF) within WAIT."""
    client.settimeout(WAIT)
    try:
        client.sock.sendall(b'*1\r\n$4\r\nPING\r\n')
        got = client.reply()
    except (ConnectionResetError, BrokenPipeError, EOFError):
        return
    except ConnectionAbortedError:
        return
    raise AssertionError('connection still alive, got %r' % (got,))


def expect_dead_on_connect(port):
    """Connect; the proxy must abort the connection (maybe even before
    connect() returns, which is also a reset)."""
    try:
        c = Client(port)
    except (ConnectionResetError, ConnectionRefusedError,
            ConnectionAbortedError):
        return
    try:
        expect_dead(c)
    finally:
        c.close()


def wait_until(pred, what, timeout=WAIT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.01)
    raise AssertionError('timed out waiting for ' + what)


@contextlib.contextmanager
def setup():
    with Redis() as r, FaultProxy('127.0.0.1', r.port) as p:
        yield r, p


# -------------------------------------------------------------------- tests
def test_pass_forwards_ping_set_get():
    with setup() as (r, p):
        assert p.url == 'redis://127.0.0.1:%d' % p.port
        assert p.mode == 'pass'
        with Client(p.port) as c:
            assert c.cmd('PING') == 'PONG'
            assert c.cmd('SET', 'k', 'v1') == 'OK'
            assert c.cmd('GET', 'k') == b'v1'
            # pipelined commands keep their order
            c.sock.sendall(b''.join(Client.encode('INCR', 'n')
                                    for _ in range(50)))
            assert [c.reply() for _ in range(50)] == list(range(1, 51))
        with Client(r.port) as direct:
            assert direct.cmd('GET', 'k') == b'v1'
        assert p.connections == 1
        assert p.bytes_to_server > 0 and p.bytes_to_client > 0
        wait_until(lambda: p.active == 0, 'connection teardown')


def test_delay_replies_holds_reply_then_delivers_it():
    with setup() as (r, p):
        with Client(p.port) as c:
            assert c.cmd('SET', 'k', 'hello') == 'OK'
            p.delay_replies(2000)
            assert p.mode == 'delay'
            c.send('GET', 'k')
            c.send('PING')
            expect_silence(c, 0.2)        # the reply is held back...
            assert c.reply() == b'hello'  # ...then arrives, in order
            assert c.reply() == 'PONG'
            # requests are not delayed: the server already has this write
            c.send('SET', 'k2', 'x')
            with Client(r.port) as direct:
                wait_until(lambda: direct.cmd('GET', 'k2') == b'x',
                           'SET through delay_replies to reach the server')
            expect_silence(c, 0.1)        # ...while its reply is held back
            p.pass_()
            assert c.reply() == 'OK'


def test_delay_cleared_by_pass_releases_pending_replies():
    with setup() as (r, p):
        with Client(p.port) as c:
            p.delay_replies(60000)
            c.send('ECHO', 'a')
            c.send('ECHO', 'b')
            expect_silence(c, 0.3)
            p.pass_()
            assert c.reply() == b'a'
            assert c.reply() == b'b'
            assert c.cmd('PING') == 'PONG'


def test_delay_requests_holds_request_from_server():
    with setup() as (r, p):
        with Client(p.port) as c, Client(r.port) as direct:
            assert c.cmd('PING') == 'PONG'
            p.delay_requests(2000)
            c.send('SET', 'k', 'late')
            c.send('GET', 'k')
            expect_silence(c, 0.2)
            # the server has not seen the SET yet
            assert direct.cmd('GET', 'k') is None
            assert c.reply() == 'OK'
            assert c.reply() == b'late'
            assert direct.cmd('GET', 'k') == b'late'


def test_blackhole_silences_old_and_new_connections():
    with setup() as (r, p):
        old = Client(p.port)
        try:
            assert old.cmd('PING') == 'PONG'
            p.blackhole()
            old.send('SET', 'dropped', '1')
            expect_silence(old)
            # new connections are accepted but nothing comes back
            new = Client(p.port)
            try:
                new.send('SET', 'dropped2', '1')
                expect_silence(new)
                # the server is alive and never saw the dropped commands
                with Client(r.port) as direct:
                    assert direct.cmd('PING') == 'PONG'
                    assert direct.cmd('EXISTS', 'dropped', 'dropped2') == 0
                p.pass_()
                # fresh connections work
                with Client(p.port) as fresh:
                    assert fresh.cmd('PING') == 'PONG'
                # old connections resume: the dropped bytes are gone for good
                assert old.cmd('ECHO', 'again') == b'again'
                assert new.cmd('ECHO', 'healed') == b'healed'
                with Client(r.port) as direct:
                    assert direct.cmd('EXISTS', 'dropped', 'dropped2') == 0
            finally:
                new.close()
        finally:
            old.close()
        assert p.bytes_dropped > 0


def test_blackhole_drops_pending_delayed_replies():
    with setup() as (r, p):
        with Client(p.port) as c:
            p.delay_replies(60000)
            c.send('ECHO', 'lost')
            expect_silence(c, 0.2)
            p.blackhole()
            p.pass_()
            assert c.cmd('ECHO', 'kept') == b'kept'


def test_reset_aborts_current_and_new_connections():
    with setup() as (r, p):
        c1 = Client(p.port)
        c2 = Client(p.port)
        try:
            assert c1.cmd('PING') == 'PONG'
            assert c2.cmd('PING') == 'PONG'
            p.reset()
            assert p.active == 0
            expect_dead(c1)
            expect_dead(c2)
            # new connections are reset at once
            expect_dead_on_connect(p.port)
            expect_dead_on_connect(p.port)
            p.pass_()
            with Client(p.port) as c4:
                assert c4.cmd('PING') == 'PONG'
        finally:
            c1.close()
            c2.close()
        # the server itself is fine
        with Client(r.port) as direct:
            assert direct.cmd('PING') == 'PONG'


def test_reset_is_an_rst_not_a_fin():
    with setup() as (r, p):
        with Client(p.port) as c:
            assert c.cmd('PING') == 'PONG'
            p.reset()
            c.settimeout(WAIT)
            try:
                data = c.sock.recv(100)
            except ConnectionResetError:
                return
            raise AssertionError('expected ECONNRESET, got %r' % (data,))


def test_refuse_then_pass_listens_on_same_port():
    with setup() as (r, p):
        port = p.port
        with Client(p.port) as old:
            assert old.cmd('PING') == 'PONG'
            p.refuse()
            try:
                Client(port, timeout=2).close()
            except ConnectionRefusedError:
                pass
            else:
                raise AssertionError('connect was not refused')
            # existing connections keep working
            assert old.cmd('ECHO', 'still') == b'still'
            p.pass_()
            assert p.port == port
            with Client(port) as c:
                assert c.cmd('PING') == 'PONG'
            # refuse / pass cycles repeatedly
            for _ in range(3):
                p.refuse()
                p.pass_()
            with Client(port) as c:
                assert c.cmd('PING') == 'PONG'


def test_upstream_down_gives_reset_or_eof():
    with setup() as (r, p):
        r.stop()
        expect_dead_on_connect(p.port)
        expect_dead_on_connect(p.port)
        assert p.connections == 2
        wait_until(lambda: p.active == 0, 'dead connection cleanup')


def test_concurrent_clients():
    with setup() as (r, p):
        p.delay(20, 20)
        errors = []

        def worker(i):
            try:
                with Client(p.port) as c:
                    for j in range(20):
                        key = 'k%d' % i
                        assert c.cmd('SET', key, '%d-%d' % (i, j)) == 'OK'
                        assert c.cmd('GET', key) == b'%d-%d' % (i, j)
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(i,))
                   for i in range(8)]
        for t in threads:
            t.start()
        # change modes while traffic flows: delays are order-preserving
        time.sleep(0.05)
        p.delay_requests(10)
        p.delay_replies(10)
        p.pass_()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads)
        assert not errors, errors
        assert p.connections == 8


def test_large_values_round_trip():
    with setup() as (r, p):
        big = os.urandom(3 * 1024 * 1024)
        with Client(p.port) as c:
            assert c.cmd('SET', 'big', big) == 'OK'
            assert c.cmd('GET', 'big') == big
            p.delay_replies(50)
            assert c.cmd('GET', 'big') == big
        assert p.bytes_to_server > len(big)
        assert p.bytes_to_client > 2 * len(big)


def test_half_close_is_forwarded():
    with setup() as (r, p):
        with Client(p.port) as c:
            c.send('PING')
            c.sock.shutdown(socket.SHUT_WR)
            assert c.reply() == 'PONG'
            c.settimeout(WAIT)
            assert c.sock.recv(100) == b''   # server closed after our EOF
        wait_until(lambda: p.active == 0, 'connection teardown')


def test_close_releases_everything():
    with Redis() as r:
        p = FaultProxy('127.0.0.1', r.port)
        port = p.port
        c = Client(port)
        try:
            assert c.cmd('PING') == 'PONG'
            p.close()
            assert not p._thread.is_alive()
            c.settimeout(WAIT)
            try:
                assert c.sock.recv(100) == b''
            except ConnectionResetError:
                pass
        finally:
            c.close()
        try:
            Client(port, timeout=2).close()
        except ConnectionRefusedError:
            pass
        else:
            raise AssertionError('proxy still listening after close()')
        p.close()   # idempotent
        try:
            p.blackhole()
        except RuntimeError:
            pass
        else:
            raise AssertionError('mode change after close() did not fail')


def test_command_interface():
    with setup() as (r, p):
        assert p.command('delay_replies 150').startswith('OK mode=delay')
        assert p.delays_ms == (0.0, 150.0)
        assert 'delay_requests_ms=5' in p.command('delay 5 7')
        assert p.command('pass').startswith('OK mode=pass')
        getattr(p, 'pass')()
        assert 'connections=0' in p.command('status')
        for bad in ('', 'fly', 'delay_replies', 'delay_replies x',
                    'delay_replies -1'):
            try:
                p.command(bad)
            except ValueError:
                pass
            else:
                raise AssertionError('accepted bad command %r' % bad)
        assert p.mode == 'pass'


def _read_line(stream, timeout):
    """Read one line from a pipe with a bound on the wait."""
    box = []
    t = threading.Thread(target=lambda: box.append(stream.readline()),
                         daemon=True)
    t.start()
    t.join(timeout)
    if not box:
        raise AssertionError('no line within %.0fs' % timeout)
    return box[0].decode()


def _ctl(cport, *words):
    out = subprocess.run([sys.executable, PROXY_SCRIPT, '--ctl', str(cport)]
                         + list(words), capture_output=True, timeout=WAIT * 2)
    return out.returncode, out.stdout.decode().strip()


def test_standalone_cli_control_port_and_stdin():
    with Redis() as r:
        proc = subprocess.Popen(
            [sys.executable, PROXY_SCRIPT, '--listen', '0', '--target',
             '127.0.0.1:%d' % r.port, '--control', '0',
             '--exit-on-stdin-eof'],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE)
        try:
            ready = _read_line(proc.stdout, WAIT).split()
            assert ready[0] == 'READY', ready
            fields = dict(w.split('=', 1) for w in ready[1:])
            port, cport = int(fields['port']), int(fields['control'])
            assert port > 0 and cport > 0

            with Client(port) as c:
                assert c.cmd('PING') == 'PONG'

                rc, out = _ctl(cport, 'blackhole')
                assert rc == 0 and out.startswith('OK mode=blackhole'), out
                c.send('PING')
                expect_silence(c)

                rc, out = _ctl(cport, 'pass')
                assert rc == 0 and out.startswith('OK mode=pass'), out
                assert c.cmd('ECHO', 'x') == b'x'

                rc, out = _ctl(cport, 'nonsense')
                assert rc == 1 and out.startswith('ERR'), out

                # the same commands on stdin
                proc.stdin.write(b'delay_replies 60000\n')
                proc.stdin.flush()
                assert _read_line(proc.stdout, WAIT).startswith(
                    'OK mode=delay')
                c.send('ECHO', 'y')
                expect_silence(c, 0.2)
                proc.stdin.write(b'pass\n')
                proc.stdin.flush()
                assert _read_line(proc.stdout, WAIT).startswith(
                    'OK mode=pass')
                assert c.reply() == b'y'

                proc.stdin.write(b'reset\n')
                proc.stdin.flush()
                assert _read_line(proc.stdout, WAIT).startswith(
                    'OK mode=reset')
                expect_dead(c)

            rc, out = _ctl(cport, 'status')
            assert rc == 0 and 'connections=1' in out, out

            # stdin EOF stops it (with --exit-on-stdin-eof), cleanly
            proc.stdin.close()
            assert proc.wait(WAIT) == 0
            err = proc.stderr.read().decode()
            assert err == '', err
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)
            for f in (proc.stdin, proc.stdout, proc.stderr):
                try:
                    f.close()
                except OSError:
                    pass


def test_standalone_cli_sigterm_and_fixed_port():
    with Redis() as r:
        port = free_port()
        d = tempfile.mkdtemp(prefix='fp-cli-')
        ready_file = os.path.join(d, 'ready')
        proc = subprocess.Popen(
            [sys.executable, PROXY_SCRIPT, '--listen', str(port),
             '--target', '127.0.0.1:%d' % r.port, '--ready-file', ready_file,
             '--mode', 'delay_requests 1'],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE)
        try:
            wait_until(lambda: os.path.exists(ready_file), 'ready file')
            with open(ready_file) as f:
                assert f.read().split() == [str(port), '0']
            # stdin at EOF (/dev/null) does not stop it by default
            with Client(port) as c:
                assert c.cmd('PING') == 'PONG'
            proc.terminate()
            assert proc.wait(WAIT) == 0
            assert proc.stderr.read().decode() == ''
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)
            proc.stderr.close()
            shutil.rmtree(d, ignore_errors=True)


# ------------------------------------------------------------------- runner
def _main(argv):
    pattern = argv[1] if len(argv) > 1 else ''
    tests = [(n, f) for n, f in sorted(globals().items())
             if n.startswith('test_') and callable(f) and pattern in n]
    failed = 0
    for name, fn in tests:
        t0 = time.monotonic()
        try:
            fn()
        except BaseException as e:
            if isinstance(e, KeyboardInterrupt):
                raise
            failed += 1
            import traceback
            traceback.print_exc()
            print('FAIL %s (%.2fs)' % (name, time.monotonic() - t0))
        else:
            print('ok   %s (%.2fs)' % (name, time.monotonic() - t0))
    print('%d passed, %d failed' % (len(tests) - failed, failed))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(_main(sys.argv))
