// Driven by test_xact.py: redlock_acquire_xact in better-sqlite3's
// db.transaction() on a database file with a table j(n): refused outside a
// transaction; held inside one and released by its COMMIT; released by the
// ROLLBACK of a function that throws; a COMMIT after the lock ran out
// (auto_extend off, a 200 ms TTL) throws the guard's message and writes
// nothing. REDLOCK_NODES comes from the environment. Prints one JSON object.
//
//   node xact.js <extension path> <database file>
// SPDX-License-Identifier: BSD-3-Clause
'use strict';
const Database = require('better-sqlite3');

const [ext, path] = process.argv.slice(2);
const db = new Database(path, { timeout: 10000 });
db.loadExtension(ext);
const one = (sql, ...args) => db.prepare(sql).pluck().get(...args);
const held = () => one('SELECT count(*) FROM redlock_locks');
const out = {};
one("SELECT redlock_config('timeout_ms', 500)");

try {
  one("SELECT redlock_acquire_xact('x:node', 60000)");
} catch (e) {
  out.outside = e.message;
}

db.transaction(() => {
  out.token = one("SELECT redlock_acquire_xact('x:node', 60000)");
  out.held_inside = held();
  db.prepare('INSERT INTO j VALUES (1)').run();
})();
out.held_after_commit = held();

try {
  db.transaction(() => {
    one("SELECT redlock_acquire_xact('x:node', 60000)");
    db.prepare('INSERT INTO j VALUES (2)').run();
    throw new Error('the job failed');
  })();
} catch (e) {
  out.thrown = e.message;
}
out.held_after_throw = held();

try {
  db.transaction(() => {
    one("SELECT redlock_acquire_xact('x:node', 200)");
    db.prepare('INSERT INTO j VALUES (3)').run();
    const until = Date.now() + 5000;
    // the TTL runs out
    while (one("SELECT redlock_validity('x:node')") > 0 && Date.now() < until) { /* spin */ }
  })();
} catch (e) {
  out.late_error = e.message;
}
out.held_after_late = held();
db.close();
process.stdout.write(JSON.stringify(out));
