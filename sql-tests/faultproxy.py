#!/usr/bin/python3
"""faultproxy: a fault-injection TCP proxy for the redlock tests.

Standard library only, unprivileged, loopback only.  One background thread
runs a selectors event loop that serves every connection.

Library use::

    from faultproxy import FaultProxy
    with FaultProxy('127.0.0.1', 6379) as p:      # listens on 127.0.0.1:p.port
        url = p.url                               # 'redis://127.0.0.1:PORT'
        p.delay_replies(200)                      # server->client chunks +200 ms
        p.delay_requests(200)                     # client->server chunks +200 ms
        p.delay(100, 300)                         # both directions at once
        p.blackhole()                             # silent dead network
        p.reset()                                 # RST every connection, now and new
        p.refuse()                                # stop listening (connect refused)
        p.pass_()                                 # back to normal (same port)

``pass`` is a Python keyword, so the method is ``pass_()`` (aliases:
``passthrough()``, ``getattr(p, 'pass')()``, ``p.command('pass')``).

Modes (each call replaces the previous mode; it takes effect on existing
and new connections before the method returns):

pass
    Forward everything as is.  Chunks still held back by an earlier delay
    are released at once.
delay_requests(ms) / delay_replies(ms) / delay(req_ms, rep_ms)
    A chunk read from one side is written to the other side ``ms``
    milliseconds after it was read; order is kept, and an end-of-stream
    (half close) is delayed like data.  The delay is evaluated at delivery
    time, so shortening or clearing it releases pending chunks early.
blackhole
    Like a dead network.  Connections are still accepted and bytes are still
    read from both sides, but they are dropped; chunks still pending from a
    delay are dropped too.  New connections accepted while blackholed are
    NOT connected upstream until the blackhole ends (then they are, so after
    ``pass_()`` both old and new connections forward bytes received from
    then on).  An end-of-stream is not dropped: it is delivered after the
    blackhole ends.
reset
    Abort every current connection with RST (SO_LINGER 0) on both the client
    and the upstream socket, and abort each new connection right after
    accepting it.
refuse
    Close the listening socket so connects are refused.  Existing connections
    keep forwarding as in pass.  Any other mode re-opens the listener on the
    SAME port (raises OSError if that is impossible).

If the upstream connect fails or either side resets, the other side is
aborted with RST.  Counters: ``connections`` (accepted so far),
``bytes_to_server``, ``bytes_to_client`` (bytes actually forwarded),
``bytes_dropped``, ``active`` (open connections); ``stats()`` returns all.
``close()`` closes every socket and stops the thread (idempotent).

Standalone use::

    python3 faultproxy.py --listen PORT --target HOST:PORT [--control CPORT]
                          [--mode 'delay_replies 200'] [--ready-file FILE]
                          [--no-stdin] [--exit-on-stdin-eof]

PORT or CPORT 0 picks a free port.  When ready it prints one line
``READY port=PORT control=CPORT target=HOST:PORT`` (control=0 when there is
no control port) and, with --ready-file, writes ``PORT CPORT`` to FILE.
Commands, one per line, on stdin and on every connection to the control port
(127.0.0.1:CPORT): ``pass``, ``delay_requests MS``, ``delay_replies MS``,
``delay REQ_MS REP_MS``, ``blackhole``, ``reset``, ``refuse``, ``status``,
``quit``.  Each is answered with one line ``OK mode=... ...`` or
``ERR message``.  A helper client::

    python3 faultproxy.py --ctl CPORT delay_replies 200   # exit 0 on OK

SIGTERM/SIGINT or ``quit`` stop the proxy.  Stdin end-of-file only stops the
stdin reader unless --exit-on-stdin-eof is given.
"""
# SPDX-License-Identifier: BSD-3-Clause

import argparse
import collections
import errno
import os
import selectors
import signal
import socket
import socketserver
import struct
import sys
import threading
import time

__all__ = ['FaultProxy']

_LINGER_RST = struct.pack('ii', 1, 0)
_RECV_SIZE = 65536
_HIGH_WATER = 4 * 1024 * 1024   # stop reading a side while this much is queued
_CALL_TIMEOUT = 10.0
_LISTENER = object()
_WAKEUP = object()


def _abort(sock):
    """Close with RST."""
    if sock is None:
        return
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


def _close(sock):
    if sock is None:
        return
    try:
        sock.close()
    except OSError:
        pass


class _Pipe:
    """One direction of a connection."""
    __slots__ = ('queue', 'queued', 'eof_in', 'eof_out', 'blocked')

    def __init__(self):
        self.queue = collections.deque()  # [arrival, memoryview | None(EOF)]
        self.queued = 0                   # data bytes in queue
        self.eof_in = False               # source reached end of stream
        self.eof_out = False              # end of stream passed on to dest
        self.blocked = False              # dest not writable, wait for it

    def purge_data(self):
        eofs = [e for e in self.queue if e[1] is None]
        dropped = self.queued
        self.queue.clear()
        self.queue.extend(eofs)
        self.queued = 0
        return dropped


class _Conn:
    __slots__ = ('client', 'upstream', 'state', 'c2s', 's2c', 'closed', 'ev')

    def __init__(self, client):
        self.client = client
        self.upstream = None
        self.state = 'idle'     # idle -> connecting -> connected
        self.c2s = _Pipe()
        self.s2c = _Pipe()
        self.closed = False
        self.ev = {}            # side -> registered event mask


class FaultProxy:
    """Fault-injection TCP proxy listening on 127.0.0.1 (see module doc)."""

    host = '127.0.0.1'

    def __init__(self, target_host, target_port, listen_port=0):
        self.target_host = target_host
        self.target_port = int(target_port)
        info = socket.getaddrinfo(target_host, self.target_port,
                                  type=socket.SOCK_STREAM)
        self._target_family, _, _, _, self._target_addr = info[0]

        self.connections = 0
        self.bytes_to_server = 0
        self.bytes_to_client = 0
        self.bytes_dropped = 0
        self._mode = 'pass'
        self._delay_req = 0.0
        self._delay_rep = 0.0
        self._conns = set()
        self._cmds = collections.deque()
        self._stopping = False
        self._closed = False
        self._error = None

        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, _WAKEUP)
        self._listener = None
        self.port = int(listen_port)
        try:
            self._listen()
        except BaseException:
            self._sel.close()
            _close(self._wake_r)
            _close(self._wake_w)
            raise
        self.port = self._listener.getsockname()[1]

        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name='faultproxy:%d' % self.port)
        self._thread.start()

    # ------------------------------------------------------------ public API
    @property
    def url(self):
        return 'redis://%s:%d' % (self.host, self.port)

    @property
    def address(self):
        return (self.host, self.port)

    @property
    def mode(self):
        return self._mode

    @property
    def active(self):
        return len(self._conns)

    @property
    def delays_ms(self):
        return (self._delay_req * 1000.0, self._delay_rep * 1000.0)

    def stats(self):
        return {
            'mode': self._mode,
            'delay_requests_ms': int(round(self._delay_req * 1000)),
            'delay_replies_ms': int(round(self._delay_rep * 1000)),
            'listening': self._listener is not None,
            'port': self.port,
            'connections': self.connections,
            'active': len(self._conns),
            'bytes_to_server': self.bytes_to_server,
            'bytes_to_client': self.bytes_to_client,
            'bytes_dropped': self.bytes_dropped,
        }

    def pass_(self):
        self._set_mode('pass')

    passthrough = pass_

    def delay_requests(self, ms):
        self._set_mode('delay', _ms(ms), 0.0)

    def delay_replies(self, ms):
        self._set_mode('delay', 0.0, _ms(ms))

    def delay(self, requests_ms=0, replies_ms=0):
        self._set_mode('delay', _ms(requests_ms), _ms(replies_ms))

    def blackhole(self):
        self._set_mode('blackhole')

    def reset(self):
        self._set_mode('reset')

    def refuse(self):
        self._set_mode('refuse')

    def command(self, line):
        """Run one text command; returns the 'OK ...' answer, raises
        ValueError on a bad command."""
        words = line.split()
        if not words:
            raise ValueError('empty command')
        name, args = words[0].lower(), words[1:]
        nargs = {'pass': 0, 'passthrough': 0, 'blackhole': 0, 'reset': 0,
                 'refuse': 0, 'status': 0, 'delay_requests': 1,
                 'delay_replies': 1, 'delay': 2}
        if name not in nargs:
            raise ValueError('unknown command %r' % name)
        if len(args) != nargs[name]:
            raise ValueError('%s takes %d argument(s)' % (name, nargs[name]))
        try:
            nums = [float(a) for a in args]
        except ValueError:
            raise ValueError('bad number in %r' % line) from None
        if name in ('pass', 'passthrough'):
            self.pass_()
        elif name in ('blackhole', 'reset', 'refuse'):
            getattr(self, name)()
        elif name != 'status':
            getattr(self, name)(*nums)
        return 'OK ' + ' '.join('%s=%s' % (k, (int(v) if isinstance(v, bool)
                                                 else v))
                                for k, v in self.stats().items())

    def close(self):
        if self._closed:
            return
        self._closed = True
        if self._thread.is_alive():
            self._cmds.append((self._do_stop, (), None, [None, None]))
            self._wake()
            self._thread.join(_CALL_TIMEOUT)
        if not self._thread.is_alive():
            self._cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    # ------------------------------------------------------- cross-thread calls
    def _set_mode(self, mode, req=0.0, rep=0.0):
        self._call(self._apply_mode, mode, req, rep)

    def _call(self, fn, *args):
        if self._closed:
            raise RuntimeError('FaultProxy is closed')
        if threading.current_thread() is self._thread:
            return fn(*args)
        if not self._thread.is_alive():
            raise RuntimeError('FaultProxy loop is not running: %r'
                               % (self._error,))
        done = threading.Event()
        box = [None, None]
        self._cmds.append((fn, args, done, box))
        self._wake()
        if not done.wait(_CALL_TIMEOUT):
            raise RuntimeError('FaultProxy loop did not answer')
        if box[1] is not None:
            raise box[1]
        return box[0]

    def _wake(self):
        try:
            self._wake_w.send(b'x')
        except OSError:
            pass

    # ------------------------------------------------------------ event loop
    def _run(self):
        try:
            while not self._stopping:
                events = self._sel.select(self._next_timeout())
                for key, mask in events:
                    tag = key.data
                    if tag is _WAKEUP:
                        try:
                            while self._wake_r.recv(4096):
                                pass
                        except OSError:
                            pass
                    elif tag is _LISTENER:
                        if self._listener is not None:
                            self._accept()
                    else:
                        conn, side = tag
                        if conn.closed:
                            continue
                        try:
                            self._on_event(conn, side, mask)
                        except Exception:
                            self._kill(conn, rst=True)
                self._run_commands()
                for conn in list(self._conns):
                    if conn.closed:
                        continue
                    try:
                        self._pump(conn)
                        if not conn.closed:
                            self._update_interest(conn)
                    except Exception:
                        self._kill(conn, rst=True)
        except BaseException as e:  # never print, remember
            self._error = e
        finally:
            # answer anything still waiting, then close everything
            self._stopping = True
            while self._cmds:
                _, _, done, box = self._cmds.popleft()
                box[1] = RuntimeError('FaultProxy stopped')
                if done is not None:
                    done.set()
            self._cleanup()

    def _run_commands(self):
        while self._cmds:
            fn, args, done, box = self._cmds.popleft()
            try:
                box[0] = fn(*args)
            except Exception as e:
                box[1] = e
            if done is not None:
                done.set()

    def _do_stop(self):
        self._stopping = True

    def _cleanup(self):
        for conn in list(self._conns):
            conn.closed = True
            _close(conn.client)
            _close(conn.upstream)
        self._conns.clear()
        if self._listener is not None:
            _close(self._listener)
            self._listener = None
        try:
            self._sel.close()
        except Exception:
            pass
        _close(self._wake_r)
        _close(self._wake_w)

    def _next_timeout(self):
        if self._mode == 'blackhole':
            return None
        now = time.monotonic()
        best = None
        for conn in self._conns:
            for pipe, delay, ready in ((conn.c2s, self._delay_req,
                                        conn.state == 'connected'),
                                       (conn.s2c, self._delay_rep, True)):
                if pipe.queue and ready and not pipe.blocked:
                    due = pipe.queue[0][0] + delay - now
                    if best is None or due < best:
                        best = due
        if best is None:
            return None
        return max(best, 0.0)

    # -------------------------------------------------------- listening side
    def _listen(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((self.host, self.port))
            s.listen(128)
            s.setblocking(False)
            self._sel.register(s, selectors.EVENT_READ, _LISTENER)
        except BaseException:
            _close(s)
            raise
        self._listener = s

    def _unlisten(self):
        if self._listener is not None:
            try:
                self._sel.unregister(self._listener)
            except (KeyError, ValueError):
                pass
            _close(self._listener)
            self._listener = None

    def _accept(self):
        for _ in range(64):
            try:
                cs, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            self.connections += 1
            if self._mode == 'reset':
                _abort(cs)
                continue
            try:
                cs.setblocking(False)
                cs.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                _abort(cs)
                continue
            conn = _Conn(cs)
            self._conns.add(conn)
            if self._mode != 'blackhole':
                self._connect_upstream(conn)
            if not conn.closed:
                self._update_interest(conn)

    def _connect_upstream(self, conn):
        try:
            s = socket.socket(self._target_family, socket.SOCK_STREAM)
        except OSError:
            self._kill(conn, rst=True)
            return
        conn.upstream = s
        try:
            s.setblocking(False)
            if self._target_family in (socket.AF_INET, socket.AF_INET6):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            err = s.connect_ex(self._target_addr)
        except OSError:
            self._kill(conn, rst=True)
            return
        if err == 0:
            conn.state = 'connected'
        elif err in (errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EAGAIN,
                     errno.EALREADY, errno.EINTR):
            conn.state = 'connecting'
        else:
            self._kill(conn, rst=True)

    # ------------------------------------------------------------- per conn
    def _kill(self, conn, rst):
        if conn.closed:
            return
        conn.closed = True
        self._conns.discard(conn)
        for sock in (conn.client, conn.upstream):
            if sock is None:
                continue
            try:
                self._sel.unregister(sock)
            except (KeyError, ValueError):
                pass
            if rst:
                _abort(sock)
            else:
                _close(sock)
        conn.ev.clear()

    def _on_event(self, conn, side, mask):
        if side == 'client':
            if mask & selectors.EVENT_WRITE:
                conn.s2c.blocked = False
            if mask & selectors.EVENT_READ:
                self._read(conn, conn.client, conn.c2s)
            return
        # upstream
        if conn.state == 'connecting':
            if not mask & selectors.EVENT_WRITE:
                return
            try:
                err = conn.upstream.getsockopt(socket.SOL_SOCKET,
                                               socket.SO_ERROR)
            except OSError:
                err = errno.ECONNREFUSED
            if err:
                self._kill(conn, rst=True)
                return
            conn.state = 'connected'
            return
        if mask & selectors.EVENT_WRITE:
            conn.c2s.blocked = False
        if mask & selectors.EVENT_READ:
            self._read(conn, conn.upstream, conn.s2c)

    def _read(self, conn, src, pipe):
        if pipe.eof_in:
            return
        try:
            data = src.recv(_RECV_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._kill(conn, rst=True)
            return
        now = time.monotonic()
        if not data:
            pipe.eof_in = True
            if pipe is conn.c2s and conn.state == 'idle':
                # never connected upstream: nothing to tell anybody
                self._kill(conn, rst=False)
                return
            pipe.queue.append([now, None])
            return
        if self._mode == 'blackhole':
            self.bytes_dropped += len(data)
            return
        pipe.queue.append([now, memoryview(data)])
        pipe.queued += len(data)

    def _pump(self, conn):
        if self._mode == 'blackhole':
            return
        now = time.monotonic()
        if conn.state == 'connected':
            if not self._pump_pipe(conn, conn.c2s, conn.upstream,
                                   self._delay_req, now, True):
                return
        if not self._pump_pipe(conn, conn.s2c, conn.client,
                               self._delay_rep, now, False):
            return
        if conn.c2s.eof_out and conn.s2c.eof_out:
            self._kill(conn, rst=False)

    def _pump_pipe(self, conn, pipe, dst, delay, now, to_server):
        """Deliver due chunks; returns False if the connection died."""
        if pipe.blocked:
            return True
        q = pipe.queue
        while q:
            entry = q[0]
            if entry[0] + delay > now:
                break
            data = entry[1]
            if data is None:
                q.popleft()
                pipe.eof_out = True
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                continue
            try:
                n = dst.send(data)
            except (BlockingIOError, InterruptedError):
                pipe.blocked = True
                break
            except OSError:
                self._kill(conn, rst=True)
                return False
            pipe.queued -= n
            if to_server:
                self.bytes_to_server += n
            else:
                self.bytes_to_client += n
            if n < len(data):
                entry[1] = data[n:]
                pipe.blocked = True
                break
            q.popleft()
        return True

    def _update_interest(self, conn):
        blackhole = self._mode == 'blackhole'
        ev = 0
        if not conn.c2s.eof_in and (blackhole or conn.c2s.queued < _HIGH_WATER):
            ev |= selectors.EVENT_READ
        if conn.s2c.blocked:
            ev |= selectors.EVENT_WRITE
        self._register(conn, conn.client, 'client', ev)
        if conn.upstream is not None:
            ev = 0
            if conn.state == 'connecting':
                ev = selectors.EVENT_WRITE
            elif conn.state == 'connected':
                if not conn.s2c.eof_in and (blackhole
                                            or conn.s2c.queued < _HIGH_WATER):
                    ev |= selectors.EVENT_READ
                if conn.c2s.blocked:
                    ev |= selectors.EVENT_WRITE
            self._register(conn, conn.upstream, 'upstream', ev)

    def _register(self, conn, sock, side, ev):
        old = conn.ev.get(side, 0)
        if ev == old:
            return
        if old == 0:
            self._sel.register(sock, ev, (conn, side))
        elif ev == 0:
            self._sel.unregister(sock)
        else:
            self._sel.modify(sock, ev, (conn, side))
        conn.ev[side] = ev

    # ------------------------------------------------------------ modes
    def _apply_mode(self, mode, req, rep):
        self._mode = mode
        self._delay_req = req
        self._delay_rep = rep
        if mode == 'blackhole':
            for conn in self._conns:
                self.bytes_dropped += conn.c2s.purge_data()
                self.bytes_dropped += conn.s2c.purge_data()
        elif mode == 'reset':
            for conn in list(self._conns):
                self._kill(conn, rst=True)
        if mode == 'refuse':
            self._unlisten()
        elif self._listener is None:
            self._listen()
        if mode not in ('blackhole', 'reset'):
            for conn in list(self._conns):
                if conn.state == 'idle' and not conn.closed:
                    self._connect_upstream(conn)
        for conn in list(self._conns):
            if not conn.closed:
                self._update_interest(conn)


def _ms(ms):
    v = float(ms)
    if v < 0:
        raise ValueError('delay must be >= 0 ms')
    return v / 1000.0


# Allow getattr(proxy, 'pass')() and proxy.command('pass').
setattr(FaultProxy, 'pass', FaultProxy.pass_)


# ================================================================ standalone
def _ctl_client(port, words):
    line = ' '.join(words).strip()
    if not line:
        print('ERR no command given', file=sys.stderr)
        return 2
    try:
        with socket.create_connection(('127.0.0.1', port), timeout=15) as s:
            s.sendall(line.encode() + b'\n')
            buf = b''
            while not buf.endswith(b'\n'):
                chunk = s.recv(4096)
                if not chunk:
                    break
                buf += chunk
    except OSError as e:
        print('ERR %s' % e, file=sys.stderr)
        return 1
    answer = buf.decode(errors='replace').strip()
    print(answer)
    return 0 if answer.startswith('OK') else 1


def _main(argv=None):
    ap = argparse.ArgumentParser(
        description='Fault-injection TCP proxy on 127.0.0.1.')
    ap.add_argument('--listen', type=int, default=0, metavar='PORT',
                    help='port to listen on (0: a free one)')
    ap.add_argument('--target', metavar='HOST:PORT',
                    help='where to forward connections')
    ap.add_argument('--control', type=int, default=None, metavar='CPORT',
                    help='also accept commands on 127.0.0.1:CPORT (0: free)')
    ap.add_argument('--mode', default=None,
                    help="initial mode command, e.g. 'delay_replies 200'")
    ap.add_argument('--ready-file', default=None,
                    help='write "PORT CPORT" here once listening')
    ap.add_argument('--no-stdin', action='store_true',
                    help='do not read commands from stdin')
    ap.add_argument('--exit-on-stdin-eof', action='store_true',
                    help='stop the proxy when stdin reaches end of file')
    ap.add_argument('--ctl', type=int, default=None, metavar='CPORT',
                    help='client mode: send COMMAND to a running proxy')
    ap.add_argument('command', nargs='*', help='command for --ctl')
    args = ap.parse_args(argv)

    if args.ctl is not None:
        return _ctl_client(args.ctl, args.command)
    if args.command:
        ap.error('unexpected arguments: %s' % ' '.join(args.command))
    if not args.target or ':' not in args.target:
        ap.error('--target HOST:PORT is required')
    thost, _, tport = args.target.rpartition(':')
    thost = thost.strip('[]')

    stop = threading.Event()
    proxy = FaultProxy(thost, int(tport), listen_port=args.listen)
    lock = threading.Lock()

    def handle(line):
        line = line.strip()
        if not line or line.startswith('#'):
            return None
        if line.lower() in ('quit', 'exit', 'stop'):
            stop.set()
            return 'OK quitting'
        try:
            with lock:
                return proxy.command(line)
        except Exception as e:
            return 'ERR %s' % (str(e).replace('\n', ' ') or type(e).__name__)

    server = None
    try:
        if args.mode:
            answer = handle(args.mode)
            if answer and answer.startswith('ERR'):
                print(answer, file=sys.stderr)
                return 2

        cport = 0
        if args.control is not None:
            class Handler(socketserver.StreamRequestHandler):
                def handle(self):
                    try:
                        for raw in self.rfile:
                            answer = handle(raw.decode(errors='replace'))
                            if answer is not None:
                                self.wfile.write(answer.encode() + b'\n')
                                self.wfile.flush()
                    except OSError:
                        pass

            class Server(socketserver.ThreadingTCPServer):
                daemon_threads = True
                allow_reuse_address = True

                def handle_error(self, request, client_address):
                    pass

            server = Server(('127.0.0.1', args.control), Handler)
            cport = server.server_address[1]
            threading.Thread(target=server.serve_forever, kwargs={
                'poll_interval': 0.2}, daemon=True).start()

        def on_signal(signum, frame):
            stop.set()
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)

        _say('READY port=%d control=%d target=%s:%d'
             % (proxy.port, cport, thost, int(tport)))
        if args.ready_file:
            tmp = args.ready_file + '.tmp'
            with open(tmp, 'w') as f:
                f.write('%d %d\n' % (proxy.port, cport))
            os.replace(tmp, args.ready_file)

        if not args.no_stdin and _stdin_usable():
            def stdin_reader():
                buf = b''
                while True:
                    try:
                        chunk = os.read(0, 4096)
                    except OSError:
                        chunk = b''
                    if not chunk:
                        break
                    buf += chunk
                    while b'\n' in buf:
                        raw, buf = buf.split(b'\n', 1)
                        answer = handle(raw.decode(errors='replace'))
                        if answer is not None:
                            _say(answer)
                if buf.strip():
                    answer = handle(buf.decode(errors='replace'))
                    if answer is not None:
                        _say(answer)
                if args.exit_on_stdin_eof:
                    stop.set()
            threading.Thread(target=stdin_reader, daemon=True).start()

        while not stop.wait(0.5):
            pass
    finally:
        if server is not None:
            try:
                server.shutdown()
                server.server_close()
            except Exception:
                pass
        proxy.close()
    return 0


def _stdin_usable():
    try:
        if os.isatty(0):
            # a background job reading the terminal would be stopped (SIGTTIN)
            return os.tcgetpgrp(0) == os.getpgrp()
        os.fstat(0)
        return True
    except OSError:
        return False


def _say(line):
    try:
        sys.stdout.write(line + '\n')
        sys.stdout.flush()
    except (OSError, ValueError):
        pass


if __name__ == '__main__':
    sys.exit(_main())
