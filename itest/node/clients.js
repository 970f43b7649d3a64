// Real Node.js lock clients against one server (redis-server or the proxy),
// driven by itest/node_test.go:
//
//   node clients.js <scenario> <port> [options as JSON]
//
// Every scenario prints one JSON object on stdout: what the library calls
// returned, so that the Go test can compare redis-server with the proxy, or
// for the hot key what a user needs to know (did every critical section run,
// alone, without losing its lock, within the client's own retry budget).
// Modules come from NODE_PATH (the harness installs package-lock.json with
// npm ci into a cache directory).
'use strict';

const Redis = require('ioredis');

const [, , scenario, port, optJSON] = process.argv;
const opt = optJSON ? JSON.parse(optJSON) : {};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// One ioredis connection: ioredis sends every caller's commands over it,
// pipelined, and matches replies in order.
function ioredis() {
  return new Redis({ host: '127.0.0.1', port: Number(port), maxRetriesPerRequest: 0, lazyConnect: false });
}

// One node-redis v4 connection, multiplexed the same way.
async function nodeRedis() {
  const { createClient } = require('redis');
  const c = createClient({ socket: { host: '127.0.0.1', port: Number(port), reconnectStrategy: false } });
  c.on('error', () => {});
  await c.connect();
  return c;
}

// The installed version of a package, read from its package.json (redlock
// v5's "exports" does not list it).
function pkgVersion(name) {
  const fs = require('fs');
  const path = require('path');
  for (const dir of (process.env.NODE_PATH || '').split(path.delimiter)) {
    try {
      return JSON.parse(fs.readFileSync(path.join(dir, name, 'package.json'), 'utf8')).version;
    } catch (e) {}
  }
  return 'unknown';
}

function errName(e) {
  return (e && (e.name || e.constructor && e.constructor.name)) || String(e);
}

// A Redlock of major version lib ('redlock4' or 'redlock5') on connection
// r, with the calls whose form differs between the two: v4 acquires a key
// and unlocks, v5 acquires a list of keys and releases.
function redlock(lib, r, settings) {
  if (lib === 'redlock4') {
    const Redlock = require('redlock4');
    const rl = new Redlock([r], settings);
    rl.on('clientError', () => {});
    return { rl, acquire: (key, ttl) => rl.acquire(key, ttl), release: (l) => l.unlock() };
  }
  const { default: Redlock } = require('redlock5');
  const rl = new Redlock([r], settings);
  rl.on('error', () => {});
  return { rl, acquire: (key, ttl) => rl.acquire([key], ttl), release: (l) => l.release() };
}

// What the basic scenarios of both majors start with, on key: an acquire,
// a second one refused, an extension and a release.
async function redlockBasic(lib, r, key) {
  const lock = redlock(lib, r, { retryCount: 0 });
  const out = { version: pkgVersion(lib) };
  const held = await lock.acquire(key, 1000);
  out.acquire = true;
  try {
    await lock.acquire(key, 1000);
    out.second_acquire = 'acquired';
  } catch (e) {
    out.second_acquire = errName(e);
  }
  const ext = await held.extend(3000);
  const pttl = await r.pttl(key);
  out.pttl_after_extend_above_1000 = pttl > 1000 && pttl <= 3000;
  await lock.release(ext);
  out.get_after_release = await r.get(key);
  return { lock, out };
}

async function redlock4Basic() {
  const r = ioredis();
  const { lock, out } = await redlockBasic('redlock4', r, 'nr4:res');
  const again = await lock.acquire('nr4:res', 1000);
  await lock.rl.release(again);
  out.reacquire = true;
  // A holder whose TTL ran out is told the release did not happen.
  const stale = await lock.acquire('nr4:exp', 200);
  await sleep(400);
  try {
    await lock.release(stale);
    out.stale_release = 'released';
  } catch (e) {
    out.stale_release = errName(e);
  }
  r.disconnect();
  return out;
}

async function redlock5Basic() {
  const r = ioredis();
  const { lock, out } = await redlockBasic('redlock5', r, 'nr5:res');
  // using() extends the lock automatically 500 ms before it would expire:
  // a routine that runs 1.7 s under a 1 s lock keeps it throughout.
  await lock.rl.using(['nr5:using'], 1000, async (signal) => {
    await sleep(1700);
    out.using_aborted = signal.aborted;
    out.using_held = (await r.get('nr5:using')) !== null;
  });
  out.using_get_after = await r.get('nr5:using');
  r.disconnect();
  return out;
}

// The hot key (issue 33 item 1): workers share one connection and take
// turns on one key, each critical section `hold` ms. The run needs every
// section done, never two at once, no lock lost, and no acquire that ran
// out of the client's own retry budget.
async function hotKey() {
  const lib = opt.lib;
  const workers = opt.workers || 16;
  const sections = opt.sections || 240;
  const hold = opt.hold || 2;
  const ttl = opt.ttl || 1000;
  const retryCount = opt.retryCount || 300;
  const retryDelay = opt.retryDelay || 10;
  const key = 'hot:' + lib;
  // The longest a caller can wait by the client's own settings: every
  // retry's sleep at its longest (delay plus full jitter).
  const budget = retryCount * 2 * retryDelay;
  const out = { lib, workers, sections, hold, ttl, retryCount, retryDelay, budgetMs: budget, done: 0, maxInside: 0, lost: 0, overBudget: 0 };
  let inside = 0;
  let next = 0;
  let failure = null;
  const waits = [];
  const holds = [];
  let acquire, release, close;

  if (lib === 'redlock4' || lib === 'redlock5') {
    const r = ioredis();
    close = () => r.disconnect();
    const lock = redlock(lib, r, { retryCount, retryDelay, retryJitter: retryDelay, driftFactor: 0.01 });
    if (lib === 'redlock4') {
      acquire = () => lock.acquire(key, ttl);
      release = lock.release;
    } else {
      // using(): acquire, the routine, automatic extension, release.
      out.using = true;
      acquire = null;
      out.run = (body) => lock.rl.using([key], ttl, body);
    }
  } else if (lib === 'universal') {
    const { createLock, NodeRedisAdapter } = require('redlock-universal');
    const c = await nodeRedis();
    close = () => c.disconnect();
    const lock = createLock({ adapter: new NodeRedisAdapter(c), key, ttl, retryAttempts: retryCount, retryDelay });
    acquire = () => lock.acquire();
    release = async (h) => {
      if (!(await lock.release(h))) throw new Error('release: the lock was no longer held');
    };
  } else {
    throw new Error('unknown lib ' + lib);
  }

  const waited = (ms) => {
    waits.push(ms);
    if (ms > budget) {
      out.overBudget++;
      throw new Error('an acquire took ' + ms + ' ms, more than the ' + budget + ' ms the client retries for');
    }
  };
  const section = async (signal) => {
    inside++;
    out.maxInside = Math.max(out.maxInside, inside);
    const t0 = Date.now();
    await sleep(hold);
    inside--;
    if (signal && signal.aborted) {
      out.lost++;
      throw new Error('using: the lock was lost during the critical section');
    }
    out.done++;
    return t0;
  };

  const t0 = Date.now();
  await Promise.all(
    Array.from({ length: workers }, async () => {
      while (!failure && next < sections) {
        next++;
        const asked = Date.now();
        try {
          if (out.run) {
            let got = 0;
            await out.run(async (signal) => {
              got = Date.now();
              waited(got - asked);
              await section(signal);
            });
            holds.push(Date.now() - got);
          } else {
            const l = await acquire();
            const got = Date.now();
            waited(got - asked);
            await section(null);
            try {
              await release(l);
            } catch (e) {
              out.lost++;
              throw e;
            }
            // RedLock's promise: the lock is the caller's until its
            // expiration (TTL less drift, counted from the request). A
            // release that returns later may have found it expired.
            if (l.expiration && Date.now() > l.expiration) {
              out.lost++;
              throw new Error('released ' + (Date.now() - l.expiration) + ' ms after the lock expired (TTL ' + ttl + ' ms)');
            }
            holds.push(Date.now() - got);
          }
        } catch (e) {
          failure = failure || errName(e) + ': ' + e.message + ' (after ' + (Date.now() - t0) + ' ms, ' + out.done + ' sections done)';
        }
      }
    })
  );
  out.wallMs = Date.now() - t0;
  out.maxWaitMs = Math.max(0, ...waits);
  out.meanHoldMs = holds.length ? Math.round((holds.reduce((a, b) => a + b, 0) / holds.length) * 10) / 10 : 0;
  out.error = failure;
  delete out.run;
  close();
  return out;
}

// One connection pipelines a lock of its own behind an acquire that cannot
// succeed at once (issue 33 item 1, node-redlock v5's test suite in small):
// another connection holds `busy`; this one holds `mine` for 1.5 s and
// sends SET busy NX PX 60000, PING and PEXPIRE mine in one go. Redis
// answers all three at once: nil, PONG, 1.
async function pipelineBehindAcquire() {
  const other = ioredis();
  const r = ioredis();
  const out = {};
  out.other_busy = await other.set('pl:busy', 'them', 'PX', 60000, 'NX');
  out.mine = await r.set('pl:mine', 'me', 'PX', 1500, 'NX');
  const t0 = Date.now();
  const res = await r.pipeline().set('pl:busy', 'me', 'PX', 60000, 'NX').ping().pexpire('pl:mine', 1500).exec();
  out.replies = res.map(([err, v]) => (err ? 'ERR ' + err.message : v));
  out.pttl_mine_positive = (await r.pttl('pl:mine')) > 0;
  out.ms = Date.now() - t0;
  other.disconnect();
  r.disconnect();
  return out;
}

const scenarios = {
  'redlock4-basic': redlock4Basic,
  'redlock5-basic': redlock5Basic,
  hotkey: hotKey,
  pipeline: pipelineBehindAcquire,
};

(async () => {
  const f = scenarios[scenario];
  if (!f) throw new Error('unknown scenario ' + scenario);
  const out = await f();
  process.stdout.write(JSON.stringify(out) + '\n');
  process.exit(0);
})().catch((e) => {
  process.stdout.write(JSON.stringify({ fatal: errName(e) + ': ' + (e && e.message) }) + '\n');
  process.exit(0);
});
