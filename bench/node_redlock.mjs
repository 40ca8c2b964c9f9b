// node_redlock: the peer, node-redlock (npm "redlock" 5.x on ioredis), run
// against the same nodes as ours: acquire+release cycles on fresh keys,
// one after another, for about SECONDS after a 200-cycle warm-up.
// Settings as ours: drift factor 0.01, one attempt (retryCount 0), 10 s TTL.
//
// usage: node node_redlock.mjs PORT[,PORT...] KEYPREFIX SECONDS [split] [tls=CAFILE]
// prints one JSON line: cycles, seconds, rate, p50_us, p99_us, mean_us, version.
// With split, each acquire and each release is timed too (acq_*, rel_*;
// a 20-cycle warm-up, at least 100 cycles: for nodes far away); with
// tls=CAFILE, the ports are TLS ports whose certificates CAFILE signed.
//
// usage: node node_redlock.mjs handoff PORT[,PORT...] RESOURCE ID GENFILE START_NS END_NS
// one of several processes contending for RESOURCE with node-redlock's own
// waiting (retries every retryDelay 200 +- retryJitter 100 ms, its
// defaults), printing the same "A id t_call t_got" / "R id t_call t_done ok"
// lines (CLOCK_MONOTONIC ns, as process.hrtime) as bench/driver.c handoff.
// After a release it waits until another process has written GENFILE (the
// holder writes it on acquiring) before it competes again.
// SPDX-License-Identifier: BSD-3-Clause
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const Redlock = require("redlock").default;
const Redis = require("ioredis");
const version = JSON.parse(
  readFileSync(new URL("./node_modules/redlock/package.json", import.meta.url), "utf8"),
).version;

const handoffMode = process.argv[2] === "handoff";
const ports = process.argv[handoffMode ? 3 : 2];
const [prefix, secondsArg, ...opts] = process.argv.slice(3);
const seconds = Number(secondsArg);
const split = !handoffMode && opts.includes("split");
const caFile = handoffMode ? null : (opts.find((o) => o.startsWith("tls=")) || "").slice(4) || null;
const tls = caFile ? { tls: { ca: [readFileSync(caFile)] } } : {};
const clients = ports.split(",").map(
  (p) => new Redis({ host: "127.0.0.1", port: Number(p), maxRetriesPerRequest: 0, enableOfflineQueue: true, ...tls }),
);
const redlock = new Redlock(clients, {
  driftFactor: 0.01,
  retryCount: 0,
  retryDelay: 200,
  retryJitter: 100,
  automaticExtensionThreshold: 500,
});

const acqLat = [], relLat = [];

async function cycle(key) {
  if (!split) { // as it was: no clock readings of its own
    const lock = await redlock.acquire([key], 10000);
    await lock.release();
    return;
  }
  const a = process.hrtime.bigint();
  const lock = await redlock.acquire([key], 10000);
  const b = process.hrtime.bigint();
  await lock.release();
  acqLat.push(Number(b - a) / 1000);
  relLat.push(Number(process.hrtime.bigint() - b) / 1000);
}

const pct = (v, q) => v[Math.floor(v.length * q)];

async function main() {
  await Promise.all(clients.map((c) => c.ping()));
  for (let i = 0; i < (split ? 20 : 200); i++) await cycle(`${prefix}w${i}`);
  acqLat.length = relLat.length = 0;
  const lat = [];
  const cpu0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  const end = t0 + BigInt(Math.round(seconds * 1e9));
  let t = t0;
  for (let i = 0; t < end || (split && i < 100); i++) {
    await cycle(`${prefix}${i}`);
    const t2 = process.hrtime.bigint();
    lat.push(Number(t2 - t) / 1000);
    t = t2;
  }
  const secs = Number(t - t0) / 1e9;
  const cpu = process.cpuUsage(cpu0);
  lat.sort((a, b) => a - b);
  acqLat.sort((a, b) => a - b);
  relLat.sort((a, b) => a - b);
  const sum = lat.reduce((a, b) => a + b, 0);
  const out = {
    cycles: lat.length,
    seconds: secs,
    rate: lat.length / secs,
    p50_us: pct(lat, 0.5),
    p99_us: pct(lat, 0.99),
    mean_us: sum / lat.length,
    cpu_us: (cpu.user + cpu.system) / lat.length,
    version,
  };
  if (split) {
    Object.assign(out, {
      acq_p50_us: pct(acqLat, 0.5), acq_p99_us: pct(acqLat, 0.99),
      rel_p50_us: pct(relLat, 0.5), rel_p99_us: pct(relLat, 0.99),
    });
  }
  console.log(JSON.stringify(out));
  await Promise.all(clients.map((c) => c.quit()));
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function handoff() {
  const [resource, id, genfile, startArg, endArg] = process.argv.slice(4);
  const start = BigInt(startArg), end = BigInt(endArg);
  const waiter = new Redlock(clients, { driftFactor: 0.01, retryCount: 25, retryDelay: 200, retryJitter: 100 });
  const now = () => process.hrtime.bigint();
  await Promise.all(clients.map((c) => c.ping()));
  while (now() < start) await sleep(1);
  const out = [];
  let n = 0;
  while (now() < end) {
    const a0 = now();
    let lock;
    try {
      lock = await waiter.acquire([resource], 10000);
    } catch (e) {
      continue; // waited its retries in vain; try again
    }
    const a1 = now();
    const mine = `${id}:${n++}`;
    writeFileSync(genfile, mine);
    out.push(`A ${id} ${a0} ${a1}`);
    await sleep(1);
    const r0 = now();
    let ok = 1;
    try {
      await lock.release();
    } catch (e) {
      ok = 0;
    }
    const r1 = now();
    out.push(`R ${id} ${r0} ${r1} ${ok}`);
    while (now() < end && readFileSync(genfile, "utf8") === mine) await sleep(0.2);
  }
  console.log(out.join("\n"));
  await Promise.all(clients.map((c) => c.quit()));
}

(handoffMode ? handoff() : main()).catch((e) => {
  console.error(`node_redlock: ${e && e.stack ? e.stack : e}`);
  process.exit(1);
});
