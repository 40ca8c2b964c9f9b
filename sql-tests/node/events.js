// Driven by test_events.py: redlock_events read from a Node app on
// better-sqlite3. REDLOCK_NODES comes from the environment, with one node
// killed beforehand; prints one JSON object for the Python side.
//
//   node events.js <extension path>
// SPDX-License-Identifier: BSD-3-Clause
'use strict';
const Database = require('better-sqlite3');

const db = new Database(':memory:');
db.loadExtension(process.argv[2]);
const out = {};
out.ping = db.prepare('SELECT redlock_ping() AS n').get().n;
out.events = db.prepare('SELECT id, time_ms, age_ms, kind, node_id, resource, message FROM redlock_events').all();
db.close();
process.stdout.write(JSON.stringify(out) + '\n');
