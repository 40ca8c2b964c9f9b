#!/bin/bash
# A nightly job in three sqlite3 invocations that holds one lock across all
# of them. A lock taken by a sqlite3 process is released when that process
# exits, so each step detaches the lock before it ends, and the next step
# adopts it (or extends or releases it by its token).
# SPDX-License-Identifier: BSD-3-Clause
set -euo pipefail
: "${REDLOCK_NODES:?set REDLOCK_NODES, e.g. redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379}"
EXT=${REDLOCK_EXT:-./redlock}   # the extension, without .so
DB=${DB:-shop.db}
run() { sqlite3 -bail -cmd ".load $EXT" "$DB" "$@"; }

# Step 1: take the lock for up to an hour (an error, and so the end of the
# script, when someone else has it) and detach it, which prints its token.
token=$(run "SELECT redlock_detach('nightly-report') WHERE redlock_lock('nightly-report', 3600000) IS NOT NULL;")

# Step 2: the work. Adopt the lock (checked on the nodes: NULL when it was
# lost), write only if it was ours then (nothing re-checks it before each
# write: its hour-long TTL must cover the step), and detach it again.
state=$(run <<SQL
CREATE TEMP TABLE me AS SELECT redlock_adopt('nightly-report', '$token') AS validity_ms;
INSERT INTO daily_report(day, orders, revenue_cents)
SELECT o.day, count(*), sum(o.amount_cents)
FROM orders AS o JOIN me ON me.validity_ms IS NOT NULL
WHERE o.reported = 0
GROUP BY o.day;
UPDATE orders SET reported = 1 WHERE reported = 0 AND (SELECT validity_ms FROM me) IS NOT NULL;
SELECT CASE WHEN validity_ms IS NULL THEN 'lost' ELSE 'kept ' || redlock_detach('nightly-report') END FROM me;
SQL
)
[ "$state" = "kept $token" ] || { echo "nightly-report: the lock was lost before step 2; nothing written" >&2; exit 1; }

# Step 3: give the lock back by its token (1: released; 0: it had expired).
released=$(run "SELECT redlock_release('nightly-report', '$token');")
[ "$released" = 1 ] || { echo "nightly-report: the lock had expired before step 3" >&2; exit 1; }
