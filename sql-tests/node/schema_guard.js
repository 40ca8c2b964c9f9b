// Driven by test_schema_guard.py: the CHECK case of the schema guard on the
// recent SQLite that better-sqlite3 bundles (3.50 or later), with the
// extension loaded by db.loadExtension. REDLOCK_NODES comes from the
// environment. Prints one JSON object; the Python side checks Redis.
//
//   node schema_guard.js <extension path> <scratch directory>
'use strict';
const path = require('path');
const Database = require('better-sqlite3');

const [ext, dir] = process.argv.slice(2);
const out = { sqlite_version: null, cases: {} };

function hostileFile(file, ddl) {
  const db = new Database(file);
  for (const [name, n] of [['redlock_acquire', 2], ['redlock_lock', 2], ['redlock_config', 2]]) {
    db.function(name, { deterministic: true, varargs: false },
      n === 2 ? (a, b) => 1 : (a) => 1);
  }
  for (const s of ddl) db.exec(s);
  db.close();
}

function attempt(fn) {
  try {
    const r = fn();
    return { ok: true, value: r === undefined ? null : r };
  } catch (e) {
    return { ok: false, error: String(e.message) };
  }
}

const checkFile = path.join(dir, 'check.db');
hostileFile(checkFile, ["CREATE TABLE joblog(tok CHECK (coalesce(length(redlock_acquire('atk', 600000)), 1) > 0))"]);
const configFile = path.join(dir, 'config.db');
hostileFile(configFile, ["CREATE TABLE joblog(tok CHECK (coalesce(length(redlock_config('unsafe_test_quorum', 1)), 1) > 0))"]);

function open(main) {
  const db = new Database(main);
  db.loadExtension(ext);
  return db;
}

// the extension works in this host at all
{
  const db = open(':memory:');
  out.sqlite_version = db.prepare('SELECT sqlite_version() AS v').get().v;
  out.cases.clean = attempt(() => {
    const tok = db.prepare("SELECT redlock_acquire('clean', 10000) AS t").get().t;
    const rel = db.prepare("SELECT redlock_release('clean', ?) AS r").get(tok).r;
    return { token: tok, released: rel };
  });
  db.close();
}

// the hostile CHECK, file attached and as main; the user's statement calls the same function
for (const [name, file, call] of [['acquire', checkFile, "redlock_acquire('job', 10000)"],
                                  ['config', configFile, "redlock_config('timeout_ms')"]]) {
  {
    const db = open(':memory:');
    const c = {};
    c.attach = attempt(() => db.prepare('ATTACH ? AS h').run(file));
    if (c.attach.ok) {
      c.statement = attempt(() => db.prepare(`INSERT INTO h.joblog(tok) VALUES (${call})`).run());
      c.detach = attempt(() => db.prepare('DETACH h').run());
    }
    c.quorum = attempt(() => db.prepare("SELECT redlock_config('unsafe_test_quorum') AS q").get().q);
    db.close();
    out.cases[name + '_attach'] = c;
  }
  {
    const c = {};
    const db = attempt(() => open(file));
    if (db.ok) {
      const d = db.value;
      c.statement = attempt(() => d.prepare(`INSERT INTO joblog(tok) VALUES (${call})`).run());
      c.quorum = attempt(() => d.prepare("SELECT redlock_config('unsafe_test_quorum') AS q").get().q);
      d.close();
    } else {
      c.open = db;
    }
    out.cases[name + '_main'] = c;
  }
}
process.stdout.write(JSON.stringify(out) + '\n');
