// Driven by test_nodes_txn.py: redlock_nodes edited inside better-sqlite3's
// db.transaction() (BEGIN ... COMMIT, ROLLBACK when the function throws; a
// nested one is a SAVEPOINT), on the recent SQLite it bundles. The
// extension is loaded with the default node (REDLOCK_NODES unset); the
// nodes to use come as arguments. Prints one JSON object; the Python side
// checks Redis.
//
//   node nodes_txn.js <extension path> <resource> <url>...
// SPDX-License-Identifier: BSD-3-Clause
'use strict';
const Database = require('better-sqlite3');

const [ext, res, ...urls] = process.argv.slice(2);
const out = {};
const db = new Database(':memory:');
db.loadExtension(ext);
const one = (sql, ...args) => Object.values(db.prepare(sql).get(...args))[0];
const ports = () => db.prepare('SELECT port FROM redlock_nodes ORDER BY id').pluck().all();
const error = (fn) => {
  try {
    fn();
    return null;
  } catch (e) {
    return String(e.message);
  }
};

out.sqlite_version = one('SELECT sqlite_version()');
out.before = ports();

// The way the README shows: the nodes set in one transaction, then a lock.
db.transaction(() => {
  db.prepare('DELETE FROM redlock_nodes').run();
  for (const u of urls) db.prepare('INSERT INTO redlock_nodes(url) VALUES (?)').run(u);
  out.inside = ports();
  out.acquire_inside = error(() => one('SELECT redlock_acquire(?, 10000)', res));
})();
out.after_commit = ports();
out.token = one('SELECT redlock_acquire(?, 10000)', res);
out.released = one('SELECT redlock_release(?, ?)', res, out.token);

// A transaction whose function throws is rolled back: so are its edits.
out.throw_error = error(() => db.transaction(() => {
  db.prepare('DELETE FROM redlock_nodes').run();
  throw new Error('boom');
})());
out.after_throw = ports();

// A nested transaction is a SAVEPOINT: its throw undoes only its own edits.
db.transaction(() => {
  db.prepare("INSERT INTO redlock_nodes(host, port) VALUES ('127.0.0.1', 1)").run();
  out.nested_error = error(() => db.transaction(() => {
    db.prepare('DELETE FROM redlock_nodes').run();
    throw new Error('inner');
  })());
  out.inside_after_nested = ports();
})();
out.after_nested = ports();
db.prepare('DELETE FROM redlock_nodes WHERE port = 1').run();   // autocommit: at once
out.after_autocommit_delete = ports();
out.token2 = one('SELECT redlock_acquire(?, 10000)', res);
out.released2 = one('SELECT redlock_release(?, ?)', res, out.token2);
db.close();
process.stdout.write(JSON.stringify(out));
