// Driven by test_lost.py: a Node app on better-sqlite3 whose lock, taken
// with on_lost and left to run out, interrupts the statement spinning past
// its validity inside db.transaction (which rolls back); and the error of
// redlock_check. REDLOCK_NODES comes from the environment; prints one JSON
// object for the Python side.
//
//   node lost.js <extension path>
// SPDX-License-Identifier: BSD-3-Clause
'use strict';
const Database = require('better-sqlite3');

const db = new Database(':memory:');
db.loadExtension(process.argv[2]);
const out = {};
const error = (fn) => {
  try {
    fn();
    return null;
  } catch (e) {
    return String(e && e.code) + ': ' + String(e && e.message);
  }
};
out.check_error = error(() => db.prepare("SELECT redlock_check('job') AS v").get());
db.prepare("SELECT redlock_config('on_lost', 1)").get();
db.prepare("SELECT redlock_acquire('node:job', 300)").get();
db.exec('CREATE TABLE t(i INTEGER)');
out.interrupt_error = error(() => db.transaction(() => {
  db.prepare('INSERT INTO t VALUES (1)').run();
  db.prepare('WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 40000000) ' +
             'SELECT count(*) AS n FROM c').get();
})());
out.rows_after = db.prepare('SELECT count(*) AS n FROM t').get().n;
const last = db.prepare('SELECT kind, resource FROM redlock_events ORDER BY id DESC LIMIT 1').get();
out.last_event = [last.kind, last.resource];
db.close();
process.stdout.write(JSON.stringify(out) + '\n');
