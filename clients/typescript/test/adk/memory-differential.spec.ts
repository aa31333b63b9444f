// Differential test of StepwellMemoryService against ADK's own
// InMemoryMemoryService (@google/adk 2.0.0), on SQLite and on Postgres:
// seeded random sequences (300 per store; STEPWELL_ADK_MEMORY_DIFF_SEQS for
// more) of addSessionToMemory (sessions that grow, are added again
// unchanged, or lose events, as a rewind does; events without content,
// with empty parts, with a function call only, with several text parts,
// digits, accents and punctuation) and searchMemory (words of the events in
// any case, several words, punctuation, empty and blank queries, unknown
// users and apps), each call made on both services and every answer
// compared (content, author, timestamp, order), then a search of every
// word for every user. Sequences run 16 at a time, each on apps of its own;
// a failure names its seed (ADK_MEMORY_DIFF_SEED=<seed> replays just that
// one).
//
// What legitimately differs, and how the test treats it:
// - session ids: the in-memory service lists integer-like ids first (a
//   JavaScript object's key order), stepwell in the order sessions were
//   first added (memory.spec.ts shows both); the generator's ids are not
//   integer-like;
// - a session first added with no event to keep holds its place in the
//   in-memory service's order but leaves nothing in the store, so it takes
//   its place when it first has a memory; the generator's first add of a
//   session keeps at least one event;
// - two events of one session with the same id: the in-memory service keeps
//   both, stepwell (keyed by event id) the first, as the Python service
//   does; every event has an id of its own.
import { InMemoryMemoryService, createEvent, createSession, type Event } from "@google/adk";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { StepwellMemoryService } from "../../src/adk/index.js";
import type { StepwellClient } from "../../src/index.js";
import { freshNamespace, type Sidecar } from "../sidecar.js";
import { BACKENDS, client, plain, rng, startBackend } from "./harness.js";

const SEQUENCES = Number(process.env.STEPWELL_ADK_MEMORY_DIFF_SEQS || 300);
const POOL = 16;
const OPS = 8;
const USERS = ["u1", "u 2"];
const SESSIONS = ["s1", "s2", "ß:3", "a/b"];
const WORDS = ["apple", "Banana", "cherry", "date", "elder", "fig"];
const EXTRA_QUERIES = ["", " ", "apple!", "APPLE banana", "  cherry  fig", "abc123", "abc", "caf", "café", "zzz", "date\tfig"];

type Rand = ReturnType<typeof rng>;

/** One sequence's world: both services, its apps, each session's events, the log. */
class World {
  readonly mem = new InMemoryMemoryService();
  readonly sw: StepwellMemoryService;
  readonly apps: string[];
  readonly sessions = new Map<string, { app: string; user: string; id: string; events: Event[] }>();
  readonly log: string[] = [];
  clock: number;
  next = 0;

  constructor(c: StepwellClient, namespace: string, readonly r: Rand, readonly seed: number) {
    this.sw = new StepwellMemoryService(c, { namespace });
    this.apps = [`${seed}-app`, `${seed}-app/2`];
    this.clock = 1_700_000_000_000 + seed * 1_000_000;
  }
}

/** A text of a few words, in any case, sometimes with digits, accents or punctuation. */
function text(r: Rand): string {
  const words = Array.from({ length: 1 + r.int(4) }, () => {
    const w = r.pick([...WORDS, "abc123", "café", "x", "Fig."]);
    return r.int(3) === 0 ? w.toUpperCase() : w;
  });
  return words.join(r.pick([" ", "  ", ", "]));
}

/** An event of one of the shapes sessions hold. */
function event(w: World): Event {
  const r = w.r;
  const id = `${w.seed}-e${w.next++}`;
  w.clock += 1 + r.int(1500);
  const author = r.pick(["user", "agent", undefined]);
  const shapes: (() => Event["content"])[] = [
    () => ({ role: "user", parts: [{ text: text(r) }] }),
    () => ({ role: "model", parts: [{ text: text(r) }, { text: "" }, { text: text(r) }] }),
    () => undefined,
    () => ({ role: "model", parts: [] }),
    () => ({ role: "model", parts: [{ functionCall: { name: "f", args: { q: "apple" } } }] }),
  ];
  return createEvent({ id, author, invocationId: "inv", timestamp: w.clock, content: r.pick(shapes)() });
}

const kept = (e: Event) => (e.content?.parts?.length ?? 0) > 0;

async function addOp(w: World): Promise<void> {
  const r = w.r;
  const [app, user, id] = [r.pick(w.apps), r.pick(USERS), r.pick(SESSIONS)];
  const k = JSON.stringify([app, user, id]);
  const s = w.sessions.get(k) ?? { app, user, id, events: [] };
  const how = s.events.length === 0 ? 0 : r.int(5);
  if (how <= 2) for (let n = r.int(4); n > 0 || !s.events.some(kept); n--) s.events.push(event(w));
  else if (how === 3) s.events = s.events.filter(() => r.int(3) > 0);
  w.sessions.set(k, s);
  w.log.push(`add ${k} ${JSON.stringify(s.events.map((e) => [e.id, e.content?.parts?.map((p) => p.text ?? "call")]))}`);
  const session = () => createSession({ id, appName: app, userId: user, state: {}, events: structuredClone(s.events), lastUpdateTime: w.clock });
  await w.mem.addSessionToMemory(session());
  await w.sw.addSessionToMemory(session());
}

async function search(w: World, appName: string, userId: string, query: string): Promise<void> {
  w.log.push(`search ${appName} ${userId} ${JSON.stringify(query)}`);
  const [mem, sw] = [await w.mem.searchMemory({ appName, userId, query }), await w.sw.searchMemory({ appName, userId, query })];
  expect(plain(sw), `search ${appName} ${userId} ${JSON.stringify(query)}`).toEqual(plain(mem));
}

async function searchOp(w: World): Promise<void> {
  const r = w.r;
  const app = r.int(8) === 0 ? `${w.seed}-nowhere` : r.pick(w.apps);
  const user = r.int(8) === 0 ? "nobody" : r.pick(USERS);
  const query = r.int(3) === 0 ? r.pick(EXTRA_QUERIES) : Array.from({ length: 1 + r.int(2) }, () => r.pick(WORDS)).join(" ");
  await search(w, app, user, r.int(2) === 0 ? query.toLowerCase() : query);
}

async function sequence(c: StepwellClient, namespace: string, seed: number): Promise<void> {
  const w = new World(c, namespace, rng(seed), seed);
  try {
    for (let op = 0; op < OPS; op++) await (w.r.int(2) === 0 ? addOp(w) : searchOp(w));
    for (const app of w.apps) for (const user of USERS) await search(w, app, user, WORDS.join(" "));
  } catch (err) {
    throw new Error(`sequence ${seed} failed (ADK_MEMORY_DIFF_SEED=${seed} replays it): ${(err as Error).message}\n${w.log.join("\n")}`);
  }
}

for (const backend of BACKENDS) {
  describe(`StepwellMemoryService against InMemoryMemoryService (${backend})`, () => {
    let sidecar: Sidecar;
    beforeAll(async () => {
      sidecar = await startBackend(backend);
    });
    afterAll(async () => {
      await sidecar?.stop();
    });

    it(`answers every search as the in-memory service does (${SEQUENCES} seeded sequences)`, async () => {
      const namespace = freshNamespace(`adk-mem-diff-${backend}`);
      const c = client(sidecar, namespace);
      const only = process.env.ADK_MEMORY_DIFF_SEED;
      const seeds = only ? [Number(only)] : Array.from({ length: SEQUENCES }, (_, n) => n + 1);
      try {
        let at = 0;
        const runOne = async (): Promise<void> => {
          while (at < seeds.length) await sequence(c, namespace, seeds[at++]!);
        };
        await Promise.all(Array.from({ length: POOL }, runOne));
      } finally {
        c.close();
      }
      expect(seeds.length).toBeGreaterThan(0);
    });
  });
}
