// Driven by test_fleet.py: the fleet-wide tables read from a Node app on
// better-sqlite3, with locks that other processes hold. Prints one JSON
// object {locks: [...], waiters: [...], cut: [...]}: every row of
// redlock_fleet_locks and redlock_fleet_waiters, and the rows of a read
// cut short by its key limit. REDLOCK_NODES comes from the environment.
//
//   node fleet.js <extension path> <max_keys for the cut read>
// SPDX-License-Identifier: BSD-3-Clause
'use strict';
const Database = require('better-sqlite3');

const [ext, cutAt] = process.argv.slice(2);
const db = new Database(':memory:');
db.loadExtension(ext);
const out = {
  locks: db.prepare('SELECT * FROM redlock_fleet_locks').all(),
  waiters: db.prepare('SELECT * FROM redlock_fleet_waiters').all(),
  // better-sqlite3 binds every number as a REAL: max_keys takes a whole one
  cut: db.prepare('SELECT resource, kind, note FROM redlock_fleet_locks WHERE max_keys = ?').all(Number(cutAt)),
};
db.close();
process.stdout.write(JSON.stringify(out));
