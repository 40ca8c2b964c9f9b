-- nightly_report.sql: a nightly batch job guarded by a distributed lock.
--
-- Several machines run this same job at the same time against one shared
-- SQLite database file. The job adds every order that is not in the report
-- yet to the `daily_report` table and marks those orders as reported. That is
-- a read-modify-write spread over several statements: if two workers ran it
-- at once, both would read the same unreported orders and both would add
-- them, so every order would be counted twice. The Redlock lock
-- 'nightly-report' makes sure only one worker does the work at a time.
--
-- Run it from the sqlite3 shell with the extension loaded:
--
--   export REDLOCK_NODES=redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379
--   sqlite3 -bail -cmd '.load ./redlock' -cmd '.parameter set @worker A' shop.db \
--       < examples/nightly_report.sql
--
-- Parameters (set them with `.parameter set @name value`; all but @worker
-- are optional):
--   @worker   a name for this worker, printed and stored in the log
--   @ttl_ms   how long the lock lives unless released or extended (30000)
--   @wait_ms  how long to wait when another worker holds the lock (0: try
--             once and skip the run if the lock is taken)
--   @work     size of the simulated slow part: loop steps (5000000, about
--             one second), so that the overlap of two workers is visible
--
-- The shared database must have a table
--   orders(id INTEGER PRIMARY KEY, day TEXT, amount_cents INTEGER,
--          reported INTEGER NOT NULL DEFAULT 0)
-- The job creates its own tables daily_report and job_log if they are missing.
--
-- SQL has no IF: every step below that must only run under the lock reads
-- the token from the one-row temp table `me` and does nothing when it is
-- NULL (the lock was not ours).
-- SPDX-License-Identifier: BSD-3-Clause

.bail on
.headers off
.mode list
.timeout 10000

CREATE TABLE IF NOT EXISTS daily_report(
  day           TEXT PRIMARY KEY,
  orders        INTEGER NOT NULL,
  revenue_cents INTEGER NOT NULL,
  built_by      TEXT,
  built_at      TEXT
);
CREATE TABLE IF NOT EXISTS job_log(
  id           INTEGER PRIMARY KEY,
  worker       TEXT,
  wait_ms      INTEGER,
  asked_at     TEXT,     -- when the worker asked for the lock (UTC)
  acquired_at  TEXT,     -- just after it got the lock (NULL: it did not)
  released_at  TEXT,     -- just before it gave the lock back
  outcome      TEXT,     -- done | skipped | lock-lost | expired-before-release
  orders_added INTEGER
);

-- Who am I, and what am I asked to do.
CREATE TEMP TABLE me(
  worker TEXT, ttl_ms INTEGER, wait_ms INTEGER, work INTEGER,
  asked_at TEXT, token TEXT, acquired_at TEXT,
  validity_ms INTEGER, released_at TEXT, released INTEGER,
  orders_added INTEGER, days INTEGER
);
INSERT INTO me(worker, ttl_ms, wait_ms, work)
VALUES (coalesce(@worker, 'anonymous'), coalesce(@ttl_ms, 30000),
        coalesce(@wait_ms, 0), coalesce(@work, 5000000));

SELECT strftime('%H:%M:%f', 'now', 'localtime') || ' worker ' || worker ||
       ': asking for the lock ''nightly-report'', willing to wait up to ' ||
       wait_ms || ' ms'
FROM me WHERE wait_ms > 0;

-- 1. Take the lock. redlock_acquire returns a token when we hold it, NULL
--    when another worker holds it (after waiting up to wait_ms), and raises
--    an error (which stops this script, see .bail) when too few Redis nodes
--    answered at all.
UPDATE me SET asked_at = strftime('%Y-%m-%d %H:%M:%f', 'now');
UPDATE me SET token = redlock_acquire('nightly-report', ttl_ms, wait_ms);
UPDATE me SET acquired_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE token IS NOT NULL;

SELECT strftime('%H:%M:%f', 'now', 'localtime') || ' worker ' || worker || ': ' ||
  CASE
    WHEN token IS NULL AND wait_ms > 0 THEN
      'lock is still held by another worker after waiting ' || wait_ms ||
      ' ms, skipping'
    WHEN token IS NULL THEN
      'lock is held by another worker, skipping'
    WHEN (julianday(acquired_at) - julianday(asked_at)) * 86400 >= 0.05 THEN
      printf('got the lock after waiting %.1f s, building the report',
             (julianday(acquired_at) - julianday(asked_at)) * 86400)
    ELSE 'got the lock, building the report'
  END
FROM me;

INSERT INTO job_log(worker, wait_ms, asked_at, outcome)
SELECT worker, wait_ms, asked_at, 'skipped' FROM me WHERE token IS NULL;

-- 2. Read: the orders that are not in the report yet (only with the lock).
CREATE TEMP TABLE batch AS
SELECT o.id, o.day, o.amount_cents
FROM orders AS o JOIN me ON me.token IS NOT NULL
WHERE o.reported = 0;

-- 3. The slow part of the job (stands for real work: calling other systems,
--    heavy queries...). SQL has no sleep(), so count to @work.
UPDATE me SET work = (
  WITH RECURSIVE burn(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM burn WHERE n < me.work)
  SELECT max(n) FROM burn)
WHERE token IS NOT NULL;

-- 4. Before writing, make sure the lock is still ours and push its expiry
--    out again. redlock_extend returns the new validity in ms, or NULL when
--    the lock was lost (it expired and may now belong to someone else).
UPDATE me SET validity_ms = redlock_extend('nightly-report', ttl_ms, token)
WHERE token IS NOT NULL;

SELECT strftime('%H:%M:%f', 'now', 'localtime') || ' worker ' || worker ||
       ': LOST the lock before writing (it expired), writing nothing'
FROM me WHERE token IS NOT NULL AND validity_ms IS NULL;

-- 5. Write: add the batch to the report and mark its orders, in one
--    transaction, only while the lock is ours.
BEGIN IMMEDIATE;
INSERT INTO daily_report(day, orders, revenue_cents, built_by, built_at)
SELECT b.day, count(*), sum(b.amount_cents), me.worker, strftime('%Y-%m-%d %H:%M:%f', 'now')
FROM batch AS b JOIN me ON me.validity_ms IS NOT NULL
WHERE true
GROUP BY b.day
ON CONFLICT(day) DO UPDATE SET
  orders        = orders + excluded.orders,
  revenue_cents = revenue_cents + excluded.revenue_cents,
  built_by      = excluded.built_by,
  built_at      = excluded.built_at;
UPDATE orders SET reported = 1
WHERE id IN (SELECT id FROM batch)
  AND (SELECT validity_ms FROM me) IS NOT NULL;
COMMIT;

UPDATE me SET orders_added = (SELECT count(*) FROM batch),
              days = (SELECT count(DISTINCT day) FROM batch)
WHERE validity_ms IS NOT NULL;

SELECT strftime('%H:%M:%f', 'now', 'localtime') || ' worker ' || worker || ': ' ||
  CASE WHEN orders_added = 0 THEN 'no new orders, the report was already up to date'
       ELSE printf('added %d orders (%d day%s) to the report', orders_added, days,
                   CASE WHEN days = 1 THEN '' ELSE 's' END)
  END
FROM me WHERE validity_ms IS NOT NULL;

-- 6. Give the lock back. redlock_release returns 1 when our lock was
--    deleted, 0 when it was not ours any more (it had expired).
UPDATE me SET released_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
WHERE token IS NOT NULL;
UPDATE me SET released = redlock_release('nightly-report', token)
WHERE token IS NOT NULL;

SELECT strftime('%H:%M:%f', 'now', 'localtime') || ' worker ' || worker || ': ' ||
  CASE released
    WHEN 1 THEN 'released the lock'
    ELSE 'the lock had already expired when we released it'
  END
FROM me WHERE token IS NOT NULL;

INSERT INTO job_log(worker, wait_ms, asked_at, acquired_at, released_at, outcome, orders_added)
SELECT worker, wait_ms, asked_at, acquired_at, released_at,
       CASE WHEN validity_ms IS NULL THEN 'lock-lost'
            WHEN released = 1 THEN 'done'
            ELSE 'expired-before-release' END,
       orders_added
FROM me WHERE token IS NOT NULL;
