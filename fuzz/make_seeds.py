#!/usr/bin/python3
"""Writes the seed corpus of the fuzz targets into fuzz/corpus/<target>/seed-*.

    /usr/bin/python3 fuzz/make_seeds.py

Seeds are plain files; crash inputs that were fixed are kept beside them as
regress-* and are never rewritten here. The input formats are those read by
fuzz_url.c, fuzz_reply.c, fuzz_conn.c, fuzz_nodes.c and fuzz_schema.c."""
# SPDX-License-Identifier: BSD-3-Clause

import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

URLS = [
    b"redis://127.0.0.1:6379",
    b"redis://127.0.0.1",
    b"redis://localhost:6380/2",
    b"redis://:s3cret@127.0.0.1:6379/0",
    b"redis://alice:secret@127.0.0.1:6379/15",
    b"redis://alice@127.0.0.1:6379",
    b"redis://al%40ice:p%3Ass%25w%2Fd@10.0.0.1:7000/1?timeout_ms=75",
    b"redis://[::1]:6379/3",
    b"redis://[fe80::1%25lo]:6379",
    b"redis://u:p@[::1]",
    b"redis://host:0",
    b"redis://host:70000",
    b"redis://host:x",
    b"redis://:6379",
    b"redis://[::1",
    b"rediss://127.0.0.1:6379",
    b"http://127.0.0.1:6379",
    b"redis://127.0.0.1:6379/1000001",
    b"redis://127.0.0.1:6379/?timeout_ms=0",
    b"redis://127.0.0.1:6379?timeout_ms=600000",
    b"redis://127.0.0.1:6379?other=1",
    b"redis://u:%zz@h",
    b"redis://u:%00@h",
    b"redis://a@b@c:1/2",
    b"redis://" + b"h" * 300,
]

# TLS URLs: last in each corpus, so the older seeds keep their numbers.
TLS_URLS = [
    b"rediss://:pw@127.0.0.1:6380?tls_ca_file=/etc/ssl/ca.pem&tls_verify=0",
    b"rediss://h?timeout_ms=9&tls_cert_file=/a%20b/c.pem&tls_key_file=/k&tls_ca_dir=/d",
    b"redis://h?tls_verify=1",
    b"rediss://h?tls_verify=1&tls_verify=0",
]

REPLIES = [
    b"+OK\r\n",
    b"$-1\r\n",
    b"*-1\r\n",
    b":1\r\n",
    b":0\r\n",
    b":-1\r\n",
    b":42\r\n",
    b":9223372036854775807\r\n",
    b"+QUEUED\r\n",
    b"$2\r\nOK\r\n",
    b"-ERR invalid expire time in 'set' command\r\n",
    b"-WRONGPASS invalid username-password pair or user is disabled.\r\n",
    b"-NOAUTH Authentication required.\r\n",
    b"-READONLY You can't write against a read only replica.\r\n",
    b"-NOSCRIPT No matching script. Please use EVAL.\r\n",
    b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
    b"-LOADING Redis is loading the dataset in memory\r\n",
    b"-BUSY Redis is busy running a script.\r\n",
    b"-OOM command not allowed when used memory > 'maxmemory'.\r\n",
    b"-MOVED 3999 127.0.0.1:6381\r\n",
    b"-ERR \x01\x02\x1b[31mcontrol\r\n",
    b"*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n",
    b"*5\r\n$5\r\nslave\r\n$9\r\n127.0.0.1\r\n:6379\r\n$9\r\nconnected\r\n:10\r\n",
    b"*1\r\n*1\r\n*1\r\n:1\r\n",
    b"*2\r\n$-1\r\n:1\r\n",
    b"+OK\r\n$-1\r\n:1\r\n:0\r\n",
]


def info(run_id, uptime):
    body = (b"# Server\r\nredis_version:7.0.15\r\nrun_id:%s\r\ntcp_port:6379\r\n"
            b"uptime_in_seconds:%s\r\n" % (run_id, uptime))
    return b"$%d\r\n%s\r\n" % (len(body), body)


REPLIES += [
    info(b"d2c4f1b9a0e35c7e8f1a2b3c4d5e6f708192a3b4", b"12345"),
    info(b"d2c4f1b9a0e35c7e8f1a2b3c4d5e6f708192a3b4", b"0"),
    info(b"", b"-5"),
]


def val_null():
    return b"\x00"


def val_int(v):
    return b"\x01" + struct.pack(">q", v)


def val_real(v):
    return b"\x02" + struct.pack(">d", v)


def val_text(s):
    assert len(s) < 255
    return b"\x03" + bytes([len(s)]) + s


def val_blob(s):
    return b"\x04" + bytes([len(s)]) + s


# fuzz_nodes column order: id host port db username password timeout_ms url state
def row(mode, cols, upd=None):
    present = 0
    out = b""
    for i in range(9):
        if i in cols:
            present |= 1 << i
    for i in range(9):
        if i in cols or i == 1:
            out += cols.get(i, val_null())
    data = bytes([mode]) + struct.pack("<H", present) + out
    if upd is not None:
        up = 0
        for i in upd:
            up |= 1 << i
        data += struct.pack("<H", up) + b"".join(upd[i] for i in range(9) if i in upd)
    return data


NODES = [b"\x00" + u for u in URLS] + [b"\x04redis://127.0.0.1:6380"] + [
    row(1, {1: val_text(b"127.0.0.1"), 2: val_int(6380)}),
    row(1, {1: val_text(b"127.0.0.1"), 2: val_int(6380), 3: val_int(3), 4: val_text(b"alice"),
            5: val_text(b"secret"), 6: val_int(120)}),
    row(1, {1: val_text(b"::1"), 2: val_int(6379)}),
    row(1, {1: val_text(b""), 2: val_int(6379)}),
    row(1, {1: val_text(b"127.0.0.1"), 2: val_int(0)}),
    row(1, {1: val_text(b"127.0.0.1"), 2: val_int(70000)}),
    row(1, {1: val_text(b"127.0.0.1"), 2: val_text(b"x")}),
    row(1, {1: val_text(b"127.0.0.1"), 2: val_real(1.5)}),
    row(1, {1: val_blob(b"127.0.0.1"), 2: val_int(6379)}),
    row(1, {1: val_text(b"127.0.0.1\x00evil"), 2: val_int(6379)}),
    row(1, {1: val_text(b"127.0.0.1"), 5: val_text(b"pw\x00tail")}),
    row(1, {1: val_text(b"127.0.0.1"), 4: val_text(b"us\x00er")}),
    row(1, {1: val_text(b"127.0.0.1"), 2: val_int(6381), 7: val_text(b"redis://127.0.0.1:6382")}),
    row(1, {0: val_int(7), 1: val_text(b"127.0.0.1"), 2: val_int(6383)}),
    row(1, {0: val_int(-1), 1: val_text(b"127.0.0.1"), 2: val_int(6383)}),
    row(1, {1: val_text(b"127.0.0.1"), 8: val_text(b"up")}),
    row(3, {1: val_text(b"127.0.0.1"), 2: val_int(6390), 5: val_text(b"secret")},
        {2: val_int(6391), 5: val_text(b"********")}),
    row(3, {1: val_text(b"127.0.0.1"), 2: val_int(6390)}, {0: val_int(99)}),
    row(3, {1: val_text(b"127.0.0.1"), 2: val_int(6390)}, {7: val_text(b"redis://:pw@127.0.0.1:6392/1")}),
    row(3, {1: val_text(b"127.0.0.1"), 2: val_int(6390)}, {2: val_int(6379)}),
    row(3, {1: val_text(b"127.0.0.1"), 2: val_int(6390)}, {5: val_blob(b"xx"), 4: val_int(3)}),
] + [b"\x00" + u for u in TLS_URLS]


# fuzz_schema: place, function, quoting, case mask, attached, then the text
# before the attacker's call, a NUL, the text after it (see fuzz_schema.c)
SCHEMA_WRAPS = [
    (b"coalesce(length(", b"), 1) > 0"),
    (b"", b" IS NOT NULL"),
    (b"1 OR ", b""),
    (b"CASE WHEN 1 THEN ", b" END"),
    (b"(SELECT ", b")"),
    (b"'x' || ", b""),
    (b"", b" -- redlock_acquire"),
    (b"1)) /* ", b" */ --"),
]


def schema_seeds():
    out = []
    for place in range(12):
        for fn in range(5):
            pre, post = SCHEMA_WRAPS[(place + fn) % len(SCHEMA_WRAPS)]
            quote, mask, attached = (place + fn) % 4, (place * 37 + fn * 11) & 0xFF, (place + fn) & 1
            out.append(bytes([place, fn, quote, mask, attached]) + pre + b"\x00" + post)
    return out


def write(target, items, prefix=b""):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    for name in os.listdir(d):
        if name.startswith("seed-"):
            os.unlink(os.path.join(d, name))
    for i, data in enumerate(items):
        with open(os.path.join(d, "seed-%03d" % i), "wb") as f:
            f.write(prefix + data)


def main():
    write("url", URLS + TLS_URLS)
    # fuzz_reply: one chunk-size byte (0: all at once), then the bytes
    write("reply", [b"\x00" + r for r in REPLIES] + [b"\x03" + b"".join(REPLIES[:8])])
    # fuzz_conn: commands outstanding, chunk size, then the bytes
    write("conn", [b"\x01\x00" + r for r in REPLIES[:12]] +
          [b"\x04\x05+OK\r\n$-1\r\n:1\r\n:0\r\n", b"\x00\x00+OK\r\n", b"\x02\x00+OK\r\n+OK\r\n+OK\r\n",
           b"\x01\x00!bad\r\n"])
    write("nodes", NODES)
    write("schema", schema_seeds())


if __name__ == "__main__":
    main()
