// Differential test of StepwellSessionService against ADK's own
// InMemorySessionService, on SQLite and on Postgres: 1,000 seeded random
// sequences per store of createSession, getSession (with and without
// numRecentEvents and afterTimestamp), listSessions (with order and pages),
// deleteSession and appendEvent (session, app:, user: and temp: deltas;
// partial events; appends to deleted sessions), each call made on both
// services and every answer compared, then every session's events and
// merged state read back from both and compared. Sequences run 32 at a
// time, each on apps of its own; a failure names its seed
// (ADK_DIFF_SEED=<seed> replays just that one).
//
// Both services get the same ids and clock: the in-memory one's generated
// session id is handed to stepwell's (its newSessionId option), and
// createSession's time is one fake clock for both (Date.now is pinned for
// the synchronous start of the in-memory call, and stepwell's now option
// reads the same clock); events carry explicit ids and whole-millisecond
// timestamps from that clock, which increases strictly so no two times tie.
// Answers are compared as JSON carries them (stepwell stores JSON).
//
// What legitimately differs, and how the test treats it:
// - createSession with the id of an existing session: the in-memory service
//   replaces that session; stepwell, being shared, refuses it with
//   AlreadyExistsError (the test checks that and skips the in-memory call);
// - a partial event: ADK's base and database services return it untouched,
//   and so does stepwell; the in-memory service also applies its app: and
//   user: deltas and its time to the session (the test checks stepwell's
//   answer and session object, and skips the in-memory call);
// - appendEvent to a deleted session: the in-memory service logs a warning,
//   applies the event to the session object and returns it; stepwell throws
//   SessionNotFoundError and leaves the object as it was (checked; the test
//   then drops both objects);
// - listSessions without an order: the in-memory service lists in insertion
//   order, stepwell by (lastUpdateTime, userId, id); the test compares such
//   lists sorted, and pages only ordered lists;
// - app:/user: keys in createSession's state: stepwell stores them as the
//   app's and the user's state, as ADK's database services and the Python
//   service do, while the in-memory service keeps them in that one session;
//   the generator puts only session and temp: keys in a create's state;
// - an event appended twice with the same id: the in-memory service replaces
//   it, stepwell (as the Python service) stores both; the generator gives
//   every event an id of its own.
import { InMemorySessionService, LogLevel, createEvent, setLogLevel, type Event, type Session } from "@google/adk";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { AlreadyExistsError, SessionNotFoundError, StepwellSessionService } from "../../src/adk/index.js";
import type { StepwellClient } from "../../src/index.js";
import { freshNamespace, type Sidecar } from "../sidecar.js";
import { BACKENDS, client, plain, rng, startBackend } from "./harness.js";

// 1,000 by default, as test.sh runs it alone; the test command
// (scripts/test) sets STEPWELL_DIFF_SEQUENCES to 150 per store, its short version.
const SEQUENCES = Number(process.env.STEPWELL_DIFF_SEQUENCES || 1000);
/** Sequences in flight at once. */
const POOL = 32;
const APPS = ["app", "app/2"];
const USERS = ["u1", "u 2"];
const IDS = ["s1", "s2", "ß:3"];
const KEYS = ["a", "b", "app:x", "app:y", "user:p", "user:q", "temp:t"];

/** The fake clock of createSession: Date.now answers `pinned` while the in-memory call starts. */
const realNow = Date.now.bind(Date);
// The in-memory service warns of each append to a deleted session, which the sequences make on purpose.
setLogLevel(LogLevel.ERROR);
let pinned: number | undefined;

type Rand = ReturnType<typeof rng>;
type Pair = { mem: Session; sw: Session };

/** One sequence's world: both services, the clock, the session objects held, and every key used. */
class World {
  readonly mem = new InMemorySessionService();
  readonly sw: StepwellSessionService;
  clock: number;
  nextId = "";
  events = 0;
  readonly held = new Map<string, Pair>();
  readonly keys = new Set<string>();
  readonly log: string[] = [];
  /** The sequence's apps: its seed keeps them apart from the other sequences' in the namespace. */
  readonly apps: string[];

  constructor(c: StepwellClient, namespace: string, readonly r: Rand, seed: number) {
    this.clock = 1_700_000_000_000 + seed * 1_000_000;
    this.apps = APPS.map((a) => `${seed}-${a}`);
    this.sw = new StepwellSessionService(c, { namespace, now: () => this.clock, newSessionId: () => this.nextId });
  }

  tick(): number {
    this.clock += 1 + this.r.int(3);
    return this.clock;
  }
}

const key = (app: string, user: string, id: string) => JSON.stringify([app, user, id]);

/** A JSON value of a few shapes. */
function value(r: Rand): unknown {
  return r.pick<() => unknown>([() => r.int(100), () => `v${r.int(9)}`, () => null, () => r.int(2) === 0, () => ({ n: r.int(5), l: [1, "x"] }), () => [r.int(3)]])();
}

function delta(r: Rand, keys: readonly string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (let i = r.int(4); i > 0; i--) out[r.pick(keys)] = value(r);
  return out;
}

/** A session for comparison: as JSON, its state keys sorted (JSON keeps insertion order, which the two services build differently). */
function norm(s: Session | undefined): unknown {
  if (s === undefined) return undefined;
  const p = plain(s) as Session;
  return { ...p, state: Object.fromEntries(Object.entries(p.state).sort(([a], [b]) => (a < b ? -1 : 1))) };
}

async function createOp(w: World): Promise<void> {
  const r = w.r;
  const app = r.pick(w.apps);
  const user = r.pick(USERS);
  const sessionId = r.int(4) === 0 ? undefined : r.pick(IDS);
  const state = delta(r, ["a", "b", "temp:t"]);
  const now = w.tick();
  w.log.push(`create ${app} ${user} ${sessionId} ${JSON.stringify(state)}`);
  if (sessionId !== undefined && (await w.mem.getSession({ appName: app, userId: user, sessionId })) !== undefined) {
    await expect(w.sw.createSession({ appName: app, userId: user, sessionId, state })).rejects.toBeInstanceOf(AlreadyExistsError);
    return;
  }
  pinned = now;
  const memP = w.mem.createSession({ appName: app, userId: user, sessionId, state: structuredClone(state) });
  pinned = undefined;
  const mem = await memP;
  w.nextId = mem.id;
  const sw = await w.sw.createSession({ appName: app, userId: user, sessionId, state: structuredClone(state) });
  expect(norm(sw)).toEqual(norm(mem));
  w.held.set(key(app, user, mem.id), { mem, sw });
  w.keys.add(key(app, user, mem.id));
}

/** A getSession config: none, a count, a time (one of an event's, or between), or both. */
function config(w: World): { numRecentEvents?: number; afterTimestamp?: number } | undefined {
  const r = w.r;
  const n = r.int(4);
  const recent = () => r.int(5);
  const after = () => w.clock - r.int(20);
  return [undefined, { numRecentEvents: recent() }, { afterTimestamp: after() }, { numRecentEvents: recent(), afterTimestamp: after() }][n];
}

async function getOp(w: World): Promise<void> {
  const [app, user, sessionId] = pickKey(w);
  const cfg = config(w);
  w.log.push(`get ${app} ${user} ${sessionId} ${JSON.stringify(cfg)}`);
  const mem = await w.mem.getSession({ appName: app, userId: user, sessionId, config: cfg });
  const sw = await w.sw.getSession({ appName: app, userId: user, sessionId, config: cfg });
  expect(norm(sw)).toEqual(norm(mem));
  if (mem && sw && cfg === undefined) w.held.set(key(app, user, sessionId), { mem, sw });
}

function pickKey(w: World): [string, string, string] {
  if (w.keys.size > 0 && w.r.int(5) !== 0) return JSON.parse(w.r.pick([...w.keys])) as [string, string, string];
  return [w.r.pick(w.apps), w.r.pick(USERS), w.r.pick(IDS)];
}

async function listOp(w: World): Promise<void> {
  const r = w.r;
  const req: { appName: string; userId?: string; order?: "asc" | "desc"; limit?: number; offset?: number; page?: number } = { appName: r.pick(w.apps) };
  if (r.int(2) === 0) req.userId = r.pick(USERS);
  if (r.int(3) !== 0) {
    req.order = r.pick(["asc", "desc"] as const);
    if (r.int(2) === 0) req.limit = r.int(4);
    if (r.int(2) === 0) req.offset = r.int(3);
    if (req.limit !== undefined && r.int(2) === 0) req.page = 1 + r.int(3);
  }
  w.log.push(`list ${JSON.stringify(req)}`);
  const mem = plain(await w.mem.listSessions({ ...req }));
  const sw = plain(await w.sw.listSessions({ ...req }));
  if (req.order === undefined) {
    const byKey = (a: Session, b: Session) => (key(a.appName, a.userId, a.id) < key(b.appName, b.userId, b.id) ? -1 : 1);
    mem.sessions.sort(byKey);
    sw.sessions.sort(byKey);
  }
  expect(sw).toEqual(mem);
}

async function deleteOp(w: World): Promise<void> {
  const [app, user, sessionId] = pickKey(w);
  w.log.push(`delete ${app} ${user} ${sessionId}`);
  await w.mem.deleteSession({ appName: app, userId: user, sessionId });
  await w.sw.deleteSession({ appName: app, userId: user, sessionId });
}

function newEvent(w: World): Event {
  const r = w.r;
  const text = `m${w.events}`;
  return createEvent({
    id: `e${w.events++}`, invocationId: `i${r.int(3)}`, author: r.pick(["user", "agent"]), timestamp: w.tick(),
    content: { role: "user", parts: [{ text }] }, actions: { stateDelta: delta(r, KEYS) }, ...(r.int(12) === 0 ? { partial: true } : {}),
  });
}

async function appendOp(w: World): Promise<void> {
  if (w.held.size === 0) return createOp(w);
  const k = w.r.pick([...w.held.keys()]);
  const pair = w.held.get(k)!;
  const event = newEvent(w);
  w.log.push(`append ${k} ${JSON.stringify(event)}`);
  if (event.partial) {
    const before = norm(pair.sw);
    expect(plain(await w.sw.appendEvent({ session: pair.sw, event: structuredClone(event) }))).toEqual(plain(event));
    expect(norm(pair.sw)).toEqual(before);
    return;
  }
  const memOut = plain(await w.mem.appendEvent({ session: pair.mem, event: structuredClone(event) }));
  const [app, user, id] = JSON.parse(k) as string[];
  const exists = (await w.mem.getSession({ appName: app!, userId: user!, sessionId: id! })) !== undefined;
  if (!exists) {
    const before = norm(pair.sw);
    await expect(w.sw.appendEvent({ session: pair.sw, event: structuredClone(event) })).rejects.toBeInstanceOf(SessionNotFoundError);
    expect(norm(pair.sw)).toEqual(before);
    w.held.delete(k);
    return;
  }
  const swOut = plain(await w.sw.appendEvent({ session: pair.sw, event: structuredClone(event) }));
  expect(swOut).toEqual(memOut);
  expect(norm(pair.sw)).toEqual(norm(pair.mem));
}

/** Every session either service may hold, read back whole from both. */
async function compareAll(w: World): Promise<void> {
  for (const k of w.keys) {
    const [app, user, id] = JSON.parse(k) as string[];
    const req = { appName: app!, userId: user!, sessionId: id! };
    expect(norm(await w.sw.getSession(req))).toEqual(norm(await w.mem.getSession(req)));
  }
}

async function sequence(c: StepwellClient, namespace: string, seed: number): Promise<void> {
  const r = rng(seed);
  const w = new World(c, namespace, r, seed);
  const ops = [createOp, createOp, getOp, getOp, listOp, deleteOp, appendOp, appendOp, appendOp, appendOp];
  try {
    for (let n = 3 + r.int(9); n > 0; n--) await r.pick(ops)(w);
    await compareAll(w);
  } catch (err) {
    throw new Error(`sequence ${seed} failed (ADK_DIFF_SEED=${seed} replays it):\n${w.log.join("\n")}\n${(err as Error).stack}`);
  }
}

for (const backend of BACKENDS) {
  describe(`StepwellSessionService against ADK's InMemorySessionService (${backend})`, () => {
    let sidecar: Sidecar;
    let c: StepwellClient;
    beforeAll(async () => {
      sidecar = await startBackend(backend);
      c = client(sidecar, "default");
      vi.spyOn(Date, "now").mockImplementation(() => pinned ?? realNow());
    });
    afterAll(async () => {
      vi.restoreAllMocks();
      c?.close();
      await sidecar?.stop();
    });

    it(`gives the same answers, events and merged state over ${SEQUENCES} random sequences`, async () => {
      const only = process.env.ADK_DIFF_SEED;
      const namespace = freshNamespace(`adk-diff-${backend}`);
      const seeds = only ? [Number(only)] : Array.from({ length: SEQUENCES }, (_, i) => i + 1);
      // A pool: each runner takes the next seed as it finishes one.
      const runner = async () => {
        for (let seed = seeds.shift(); seed !== undefined; seed = seeds.shift()) await sequence(c, namespace, seed);
      };
      await Promise.all(Array.from({ length: POOL }, runner));
    }, 300_000);
  });
}
