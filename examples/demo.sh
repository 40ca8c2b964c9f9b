#!/usr/bin/env bash
# demo.sh: the redlock extension end to end, on three local Redis nodes.
#
# Starts three throw-away redis-server processes on free loopback ports,
# makes a small shop database, and runs the batch job examples/nightly_report.sql
# from two sqlite3 processes at the same time, twice:
#   round 1: neither worker waits: one gets the lock, the other is refused;
#   round 2: both are willing to wait: one runs, the other waits and runs after.
# Then it checks that the two workers never held the lock at the same time,
# that every order was counted exactly once, and that the lock's key is gone
# from all three Redis nodes. It exits non-zero when any of that failed.
#
# Run it with `make demo` (which builds ./redlock.so first), or
# `bash examples/demo.sh` from the repository root after `make`.
# Needs: sqlite3, redis-server, redis-cli (Debian: sqlite3 redis-server redis-tools).
# SPDX-License-Identifier: BSD-3-Clause
set -euo pipefail

cd "$(dirname "$0")/.."
KEY=nightly-report
JOB=examples/nightly_report.sql

say()  { printf '%s\n' "$*"; }
fail() { printf '\nDEMO FAILED: %s\n' "$*" >&2; exit 1; }

for tool in sqlite3 redis-server redis-cli; do
  command -v "$tool" >/dev/null 2>&1 ||
    fail "$tool is not installed (Debian: apt-get install sqlite3 redis-server redis-tools)"
done
[ -f ./redlock.so ] || fail "./redlock.so is missing; run 'make' first (or 'make demo')"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/redlock-demo.XXXXXX")
TMP=$(cd "$TMP" && pwd -P)
NODE_PIDS=()
WORKER_PIDS=()
cleanup() {
  local pid
  for pid in "${WORKER_PIDS[@]}" "${NODE_PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${WORKER_PIDS[@]}" "${NODE_PIDS[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------- Redis nodes
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# start_node I: start node I on a free port; sets PORTS[I] and NODE_PIDS[I].
PORTS=()
start_node() {
  local i=$1 dir="$TMP/node$1" port pid n
  mkdir -p "$dir"
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    port=$(( 20000 + (RANDOM * 32768 + RANDOM) % 40000 ))
    port_in_use "$port" && continue
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
      --daemonize no --dir "$dir" --logfile "$dir/redis.log" &
    pid=$!
    NODE_PIDS[i]=$pid
    # Poll until this server answers PING (or dies, e.g. the port was taken).
    for (( n = 0; n < 1000; n++ )); do
      kill -0 "$pid" 2>/dev/null || break
      if [ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ]; then
        # Make sure the server answering is ours and not someone else's.
        if [ "$(redis-cli -p "$port" config get dir 2>/dev/null | sed -n 2p)" = "$dir" ]; then
          PORTS[i]=$port
          return 0
        fi
        break
      fi
      sleep 0.01
    done
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    unset 'NODE_PIDS[i]'
  done
  tail -n 5 "$dir/redis.log" >&2 2>/dev/null || true
  fail "could not start redis-server for node $i"
}

# key_on_nodes: one line per node saying what it holds under $KEY.
key_on_nodes() {
  local i port val ttl
  for i in 1 2 3; do
    port=${PORTS[i]}
    val=$(redis-cli -p "$port" get "$KEY")
    ttl=$(redis-cli -p "$port" pttl "$KEY")
    if [ -n "$val" ]; then
      say "    node $i (127.0.0.1:$port): $KEY = $val, expires in $ttl ms"
    else
      say "    node $i (127.0.0.1:$port): no key $KEY"
    fi
  done
}

# ----------------------------------------------------------------- the job
DB="$TMP/shop.db"
q() { sqlite3 -bail "$DB" "$@"; }

# run_worker NAME WAIT_MS OUT: run the job as worker NAME in the background.
run_worker() {
  sqlite3 -bail -cmd '.load ./redlock' \
    -cmd ".parameter set @worker '$1'" -cmd ".parameter set @wait_ms $2" \
    "$DB" < "$JOB" > "$3.out" 2> "$3.err" &
  WORKER_PIDS+=($!)
}

# run_round N WAIT_MS FIRST_ID: start workers A and B at the same moment,
# show what Redis holds while they run, wait for both, and print their lines
# in time order (FIRST_ID: the first job_log id this round will write).
run_round() {
  local r=$1 wait_ms=$2 first_id=$3 w rc failed=0 n name names=(A B) order
  WORKER_PIDS=()
  run_worker A "$wait_ms" "$TMP/r$r-A"
  run_worker B "$wait_ms" "$TMP/r$r-B"
  # Catch the lock while it is held (the job works for about a second).
  for (( n = 0; n < 300; n++ )); do
    [ -n "$(redis-cli -p "${PORTS[1]}" get "$KEY")" ] && break
    sleep 0.01
  done
  say "  While they run, the three Redis nodes hold:"
  key_on_nodes
  for w in 0 1; do
    name=${names[w]}
    rc=0
    wait "${WORKER_PIDS[w]}" || rc=$?
    if [ "$rc" -ne 0 ]; then
      failed=1
      say "  worker $name stopped with exit status $rc:"
      sed 's/^/    /' "$TMP/r$r-$name.err"
    fi
  done
  WORKER_PIDS=()
  say "  What the workers printed, in time order:"
  # Lines with the same millisecond: the worker that got the lock first
  # comes first (sort -s keeps the order of the files).
  order=$(q "SELECT group_concat(worker, ' ') FROM (SELECT worker FROM job_log
             WHERE id >= $first_id ORDER BY acquired_at IS NULL, acquired_at, id);" 2>/dev/null || true)
  case " $order " in *" A "*) ;; *) order="$order A" ;; esac
  case " $order " in *" B "*) ;; *) order="$order B" ;; esac
  for name in $order; do cat "$TMP/r$r-$name.out"; done | sort -s -k1,1 | sed 's/^/    /'
  [ "$failed" = 0 ] || fail "a worker failed in round $r"
}

# overlaps FIRST_ID: number of pairs of runs since FIRST_ID whose lock
# periods overlap (each period is measured from just after acquire to just
# before release, so it lies inside the time the worker really held the lock).
overlaps() {
  q "SELECT count(*) FROM job_log a JOIN job_log b ON a.id < b.id
     WHERE a.id >= $1 AND b.id >= $1
       AND a.acquired_at IS NOT NULL AND b.acquired_at IS NOT NULL
       AND a.acquired_at < b.released_at AND b.acquired_at < a.released_at;"
}

# ======================================================================
say "== redlock demo: one nightly job, two workers, three Redis nodes =="
say ""
say "Starting three Redis nodes (independent masters, no persistence):"
for i in 1 2 3; do
  start_node "$i"
  say "  node $i: redis-server on 127.0.0.1:${PORTS[i]} (pid ${NODE_PIDS[i]})"
done
export REDLOCK_NODES="redis://127.0.0.1:${PORTS[1]},redis://127.0.0.1:${PORTS[2]},redis://127.0.0.1:${PORTS[3]}"
say ""
say "Every sqlite3 process that loads the extension reads its nodes from"
say "  REDLOCK_NODES=$REDLOCK_NODES"
say "  $(sqlite3 -bail -cmd '.load ./redlock' :memory: "SELECT 'redlock ' || redlock_version() || ', nodes:'")"
sqlite3 -bail -table -cmd '.load ./redlock' :memory: \
  "SELECT id, host, port, timeout_ms, state FROM redlock_nodes ORDER BY id;" | sed 's/^/    /'

q "PRAGMA journal_mode = WAL;" >/dev/null
q "CREATE TABLE orders(id INTEGER PRIMARY KEY, day TEXT NOT NULL,
                       amount_cents INTEGER NOT NULL, reported INTEGER NOT NULL DEFAULT 0);
   WITH RECURSIVE i(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM i WHERE n < 60)
   INSERT INTO orders(id, day, amount_cents)
   SELECT n, date('2025-03-01', '+' || ((n - 1) / 20) || ' days'), 500 + (n * 7919) % 9500 FROM i;"
say ""
say "Shared database $DB:"
say "  $(q "SELECT count(*) || ' orders over ' || count(DISTINCT day) || ' days, none in the report yet' FROM orders;")"
say "  The job adds unreported orders to daily_report. Run twice at once"
say "  without a lock, it would count every order twice."

# ---------------------------------------------------------------- round 1
say ""
say "-- Round 1: workers A and B start at the same moment; neither waits (wait_ms = 0)."
R1=1
run_round 1 0 "$R1"
winner=$(q "SELECT group_concat(worker) FROM job_log WHERE id >= $R1 AND outcome = 'done';")
refused=$(q "SELECT group_concat(worker) FROM job_log WHERE id >= $R1 AND outcome = 'skipped';")
say ""
if [ "$(overlaps $R1)" != 0 ]; then
  fail "workers A and B held the lock at the same time: mutual exclusion is broken"
elif [ -z "$winner" ]; then
  fail "no worker got the lock in round 1"
elif [ "$winner" = A,B ] || [ "$winner" = B,A ]; then
  fail "both workers got the lock one after the other, so the demo did not show
a worker being refused (the machine may be too slow); run it again"
elif [ -z "$refused" ]; then
  fail "round 1 ended without a refused worker (outcomes: $(q "SELECT group_concat(worker || '=' || outcome) FROM job_log WHERE id >= $R1;"))"
fi
say "  => Worker $winner got the lock and built the report. Worker $refused asked while"
say "     $winner held it, was refused (redlock_acquire returned NULL) and skipped the run."

# ---------------------------------------------------------------- round 2
q "WITH RECURSIVE i(n) AS (SELECT 61 UNION ALL SELECT n + 1 FROM i WHERE n < 85)
   INSERT INTO orders(id, day, amount_cents)
   SELECT n, '2025-03-04', 500 + (n * 7919) % 9500 FROM i;"
say ""
say "-- 25 new orders arrive for 2025-03-04."
say ""
say "-- Round 2: A and B start at the same moment again; this time each is willing"
say "   to wait up to 15 s for the lock (wait_ms = 15000)."
R2=$(q "SELECT max(id) + 1 FROM job_log;")
run_round 2 15000 "$R2"
say ""
[ "$(overlaps "$R2")" = 0 ] || fail "workers A and B held the lock at the same time: mutual exclusion is broken"
[ "$(q "SELECT count(*) FROM job_log WHERE id >= $R2 AND outcome = 'done';")" = 2 ] ||
  fail "in round 2 both workers should have run one after the other (outcomes: $(q "SELECT group_concat(worker || '=' || outcome) FROM job_log WHERE id >= $R2;"))"
IFS='|' read -r first second waited first_held < <(q "
  SELECT f.worker, s.worker,
         printf('%.1f', (julianday(s.acquired_at) - julianday(s.asked_at)) * 86400),
         printf('%.1f', (julianday(f.released_at) - julianday(f.acquired_at)) * 86400)
  FROM job_log f JOIN job_log s ON s.id >= $R2 AND f.id >= $R2 AND s.acquired_at > f.acquired_at;") ||
  fail "could not tell which worker ran first in round 2"
[ "$(q "SELECT s.asked_at < f.released_at FROM job_log f JOIN job_log s
        ON f.worker = '$first' AND s.worker = '$second' AND f.id >= $R2 AND s.id >= $R2;")" = 1 ] ||
  fail "worker $second only asked after $first had finished, so the demo did not show waiting; run it again"
say "  => Worker $first got the lock and held it for ${first_held} s. Worker $second asked at the"
say "     same time, waited ${waited} s until $first released it, then ran. Their lock"
say "     periods did not overlap, so $second saw $first's work and did not redo it."

# ---------------------------------------------------------------- results
say ""
say "The report (daily_report):"
q -table "SELECT day, orders, printf('%.2f', revenue_cents / 100.0) AS revenue, built_by
          FROM daily_report ORDER BY day;" | sed 's/^/  /'
say "The job log (job_log, times in UTC):"
q -table "SELECT id, worker, wait_ms, substr(asked_at, 12) AS asked,
                 substr(acquired_at, 12) AS acquired, substr(released_at, 12) AS released,
                 outcome, orders_added
          FROM job_log ORDER BY id;" | sed 's/^/  /'

counted=$(q "SELECT (SELECT sum(orders) FROM daily_report) = (SELECT count(*) FROM orders)
             AND (SELECT sum(revenue_cents) FROM daily_report) = (SELECT sum(amount_cents) FROM orders)
             AND (SELECT count(*) FROM orders WHERE reported = 0) = 0;")
[ "$counted" = 1 ] || fail "the report does not match the orders: some order was counted twice or not at all"
say "Every one of the $(q "SELECT count(*) FROM orders;") orders is in the report exactly once."

say ""
say "After the jobs, the lock's key '$KEY' on each Redis node:"
gone=1
for i in 1 2 3; do
  n=$(redis-cli -p "${PORTS[i]}" exists "$KEY")
  if [ "$n" = 0 ]; then
    say "  node $i (127.0.0.1:${PORTS[i]}): gone"
  else
    say "  node $i (127.0.0.1:${PORTS[i]}): STILL THERE ($(redis-cli -p "${PORTS[i]}" get "$KEY"))"
    gone=0
  fi
done
[ "$gone" = 1 ] || fail "redlock_release left the key behind on some node"
others=$(for i in 1 2 3; do redis-cli -p "${PORTS[i]}" --scan; done | grep -vxF "$KEY" | sort -u || true)
for k in $others; do
  ttl=$(redis-cli -p "${PORTS[1]}" pttl "$k")
  if [ "$ttl" -ge 0 ] 2>/dev/null; then when="expires in about $(( (ttl + 43200000) / 86400000 )) days"; else when="does not expire"; fi
  case "$k" in
    "$KEY:fence") say "  The nodes also keep '$k' ($when): it is not the lock"
                  say "  but the counter behind fencing numbers (setting 'fencing').";;
    *) say "  The nodes also hold the key '$k' ($when).";;
  esac
done

say ""
say "Demo passed: the lock let exactly one worker at a time do the job."
say "Stopping the Redis nodes."
