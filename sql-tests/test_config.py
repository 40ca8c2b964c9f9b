"""redlock_config(name [, value]) and redlock_version()."""
# SPDX-License-Identifier: BSD-3-Clause

import harness as h
from harness import check, eq, is_token, redlock_error, value

# (test_defaults_readable asks for the real defaults)
h.default_config(timeout_ms=h.RELAXED_TIMEOUT_MS)

DEFAULTS = {
    "timeout_ms": 50,
    "retry_delay_ms": 200,
    "retry_jitter_ms": 100,
    "drift_factor": 0.01,
    "key_prefix": "",
    "fencing": 1,
    "fence_ttl_ms": 604800000,
    "restart_guard": 0,
    "reconnect_min_ms": 100,
    "reconnect_max_ms": 5000,
    "unsafe_test_quorum": 0,
}

NEW_VALUES = {
    "timeout_ms": 75,
    "retry_delay_ms": 150,
    "retry_jitter_ms": 20,
    "drift_factor": 0.02,
    "key_prefix": "myapp:locks:",
    "fencing": 0,
    "fence_ttl_ms": 3600000,
    "restart_guard": 1,
    "reconnect_min_ms": 50,
    "reconnect_max_ms": 2000,
    "unsafe_test_quorum": 1,
}

BAD_VALUES = [
    ("timeout_ms", -1),
    ("timeout_ms", "abc"),
    ("retry_delay_ms", -1),
    ("retry_jitter_ms", -1),
    ("drift_factor", 1),
    ("drift_factor", 1.5),
    ("drift_factor", -0.01),
    ("drift_factor", "lots"),
    ("reconnect_min_ms", -1),
    ("reconnect_max_ms", -1),
    ("fence_ttl_ms", -1),
]


def same(a, b):
    """Config values compare as numbers when both look numeric."""
    try:
        return abs(float(a) - float(b)) < 1e-9
    except (TypeError, ValueError):
        return a == b


def test_defaults_readable():
    con = h.connect(h.shared_cluster(1), defaults=True)
    for name, default in DEFAULTS.items():
        v = value(con, "SELECT redlock_config(?)", name)
        check(same(v, default), "redlock_config(%r) = %r, documented default %r"
              % (name, v, default))


def test_set_returns_value_and_reads_back():
    con = h.connect(h.shared_cluster(1))
    for name, new in NEW_VALUES.items():
        r = value(con, "SELECT redlock_config(?, ?)", name, new)
        check(same(r, new), "redlock_config(%r, %r) returned %r" % (name, new, r))
        v = value(con, "SELECT redlock_config(?)", name)
        check(same(v, new), "redlock_config(%r) after setting %r reads %r" % (name, new, v))


def test_settings_belong_to_the_connection():
    c = h.shared_cluster(1)
    a = h.connect(c)
    b = h.connect(c, defaults=True)
    value(a, "SELECT redlock_config('key_prefix', 'a:')")
    value(a, "SELECT redlock_config('timeout_ms', 80)")
    eq(value(b, "SELECT redlock_config('key_prefix')"), "",
       "key_prefix of another connection")
    check(same(value(b, "SELECT redlock_config('timeout_ms')"), 50),
          "timeout_ms of another connection")


def test_key_prefix_can_be_reset_to_empty():
    c = h.shared_cluster(1)
    con = h.connect(c, key_prefix="p:")
    eq(value(con, "SELECT redlock_config('key_prefix', '')"), "", "reset key_prefix")
    tok = is_token(value(con, "SELECT redlock_acquire('kp', 10000)"))
    eq(c[0].get("kp"), tok, "key without prefix")


def test_unknown_name_is_error():
    con = h.connect(h.shared_cluster(1))
    redlock_error(con, "SELECT redlock_config('no_such_setting')")
    redlock_error(con, "SELECT redlock_config('no_such_setting', 1)")
    redlock_error(con, "SELECT redlock_config('TIMEOUT_MSX', 1)")


def test_null_name_is_error():
    con = h.connect(h.shared_cluster(1))
    redlock_error(con, "SELECT redlock_config(NULL)")


def test_bad_values_are_errors_and_change_nothing():
    con = h.connect(h.shared_cluster(1))
    for name, bad in BAD_VALUES:
        before = value(con, "SELECT redlock_config(?)", name)
        redlock_error(con, "SELECT redlock_config(?, ?)", name, bad,
                      what="redlock_config(%r, %r)" % (name, bad))
        after = value(con, "SELECT redlock_config(?)", name)
        check(same(before, after), "redlock_config(%r) changed from %r to %r by a refused value"
              % (name, before, after))


def test_settings_take_effect_key_prefix():
    c = h.shared_cluster(1)
    con = h.connect(c)
    value(con, "SELECT redlock_config('key_prefix', 'x/')")
    tok = is_token(value(con, "SELECT redlock_acquire('k', 10000)"))
    eq(c[0].get("x/k"), tok, "key after setting key_prefix through SQL")


def test_version():
    con = h.connect(h.shared_cluster(1))
    v = value(con, "SELECT redlock_version()")
    check(isinstance(v, str) and v.strip() != "", "redlock_version() = %r" % (v,))
    eq(value(con, "SELECT typeof(redlock_version())"), "text", "typeof(redlock_version())")
