// Driven by test_node_app.py: the extension in a Node app on better-sqlite3,
// loaded with db.loadExtension, as README's "From Node" section shows it:
// take and release a lock; a wait_ms that blocks the event loop on the main
// thread; the same wait in a worker thread while the event loop runs on.
// REDLOCK_NODES comes from the environment. Prints one JSON object; the
// Python side checks Redis.
//
//   node app.js <extension path> <resource>
// SPDX-License-Identifier: BSD-3-Clause
'use strict';
const { Worker, isMainThread, parentPort, workerData } = require('worker_threads');
const Database = require('better-sqlite3');

function open(ext) {
  const db = new Database(':memory:');
  db.loadExtension(ext);
  return db;
}

if (!isMainThread) {
  // The worker: its own connection; a waiting acquire blocks only this thread.
  try {
    const db = open(workerData.ext);
    const token = db.prepare('SELECT redlock_acquire(?, 10000, ?) AS t').get(workerData.res, workerData.wait_ms).t;
    db.close();
    parentPort.postMessage({ token });
  } catch (e) {
    parentPort.postMessage({ error: String(e && e.message) });
  }
} else {
  const [ext, res] = process.argv.slice(2);
  const out = {};
  const db = open(ext);
  const one = (sql, ...args) => Object.values(db.prepare(sql).get(...args))[0];

  out.token = one('SELECT redlock_acquire(?, 30000)', res);
  out.validity = one('SELECT redlock_validity(?)', res);

  // A second connection waits for the held lock on the main thread: no
  // timer callback can run until the call returns.
  const other = open(ext);
  let ticks = 0;
  const timer = setInterval(() => { ticks++; }, 1);
  const before = ticks;
  out.blocked_result = Object.values(other.prepare('SELECT redlock_acquire(?, 10000, 300)').get(res))[0];
  out.ticks_during_blocking_wait = ticks - before;
  other.close();

  // The same wait in a worker thread: the event loop keeps running.
  const startTicks = ticks;
  const w = new Worker(__filename, { workerData: { ext, res, wait_ms: 1000 } });
  w.on('message', (m) => {
    out.worker_result = m.token;
    if (m.error) out.worker_error = m.error;
    out.ticks_during_worker_wait = ticks - startTicks;
    clearInterval(timer);
    out.released = one('SELECT redlock_release(?)', res);
    db.close();
    process.stdout.write(JSON.stringify(out));
  });
  w.on('error', (e) => {
    clearInterval(timer);
    out.worker_error = String(e && e.message);
    process.stdout.write(JSON.stringify(out));
    process.exitCode = 1;
  });
}
