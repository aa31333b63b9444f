// StepwellSession on SQLite and on Postgres: a differential test against the
// SDK's reference session (MemorySession: the JavaScript SDK ships no
// SQLiteSession), the same seeded random sequences of calls driven against
// both, every answer deep-equal; then concurrency (racing appends stay whole
// and in one order, concurrent pops never return one item twice), batches
// larger than one request, session id checks, and an item the sidecar refuses.
import { MemorySession, type AgentInputItem } from "@openai/agents-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { InvalidArgument, StepwellClient } from "../../src/index.js";
import { StepwellSession, checkSessionId } from "../../src/agents/index.js";
import { freshNamespace, type Sidecar } from "../sidecar.js";
import { BACKENDS, client, rng, session, startBackend } from "./harness.js";

// 1,000 by default, as test.sh runs it alone; the test command
// (scripts/test) sets STEPWELL_DIFF_SEQUENCES to 150 per store, its short version.
const SEQUENCES = Number(process.env.STEPWELL_DIFF_SEQUENCES || 1000);
const RECORD_BYTES_MAX = 256 * 1024;
/** The differential's own limit: on a busy two-core machine 1,000 sequences take minutes. */
const DIFFERENTIAL_TIMEOUT_MS = 900_000;
const TEXTS = ["hello", "héllo wörld", "日本語のテキスト", "emoji 🌍🚀", 'quote " and \\ backslash', "line\nbreak\ttab", "nul \u0000 and \u007f", "lone \ud800 surrogate", ""];

/** A random item of the kinds a run stores: user and assistant messages, tool calls and their results, reasoning. */
function randomItem(r: ReturnType<typeof rng>, n: number): AgentInputItem {
  const text = `${r.pick(TEXTS)} #${n}`;
  const callId = `call_${n}_${r.int(1000)}`;
  switch (r.int(6)) {
    case 0:
      return { role: "user", content: text };
    case 1:
      return { type: "message", role: "user", content: [{ type: "input_text", text }] };
    case 2:
      return { type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text }], providerData: { n, f: 1.5, big: 2 ** 53 - 1, nested: [null, true, { k: text }] } };
    case 3:
      return { type: "function_call", callId, name: "lookup", arguments: JSON.stringify({ q: text }), status: "completed" };
    case 4:
      return { type: "function_call_result", name: "lookup", callId, status: "completed", output: r.int(2) ? text : { type: "text", text } };
    default:
      return { type: "reasoning", content: [{ type: "input_text", text }] };
  }
}

/** One random operation against both sessions; its answers must be deep-equal. */
async function step(r: ReturnType<typeof rng>, ref: MemorySession, sw: StepwellSession, n: number, where: string): Promise<void> {
  const size = (await ref.getItems()).length;
  const op = r.int(20);
  if (op < 8) {
    const items = Array.from({ length: r.int(6) }, (_, i) => randomItem(r, n * 10 + i));
    await Promise.all([ref.addItems(items), sw.addItems(items)]);
  } else if (op < 14) {
    const limit = r.pick([undefined, 0, 1, 2, 3, size, size + 1, size + 5, -1, -3, 2.5, Infinity, NaN]);
    expect(await sw.getItems(limit), `${where}: getItems(${limit})`).toStrictEqual(await ref.getItems(limit));
  } else if (op < 19) {
    expect(await sw.popItem(), `${where}: popItem()`).toStrictEqual(await ref.popItem());
  } else {
    await Promise.all([ref.clearSession(), sw.clearSession()]);
  }
}

async function differential(sidecar: Sidecar, namespace: string, seed: number): Promise<void> {
  const r = rng(seed);
  const ref = new MemorySession({ sessionId: `s${seed}` });
  const c = client(sidecar, namespace);
  try {
    const sw = new StepwellSession(c, { sessionId: `seq-${seed}`, namespace });
    const steps = 4 + r.int(12);
    for (let n = 0; n < steps; n++) await step(r, ref, sw, n, `seed ${seed} step ${n}`);
    expect(await sw.getItems(), `seed ${seed}: the final history`).toStrictEqual(await ref.getItems());
  } finally {
    c.close();
  }
}

/** Runs `n` tasks, at most `width` at once. */
async function pool(n: number, width: number, task: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(Array.from({ length: width }, async () => {
    while (next < n) await task(next++);
  }));
}

for (const backend of BACKENDS) {
  describe(`StepwellSession (${backend})`, () => {
    let sidecar: Sidecar;
    beforeAll(async () => {
      sidecar = await startBackend(backend, ["--record-bytes-max", String(RECORD_BYTES_MAX)]);
    });
    afterAll(async () => {
      await sidecar?.stop();
    });

    it(`answers as MemorySession over ${SEQUENCES} random sequences`, async () => {
      const namespace = freshNamespace(`agents-diff-${backend}`);
      await pool(SEQUENCES, 16, (i) => differential(sidecar, namespace, i + 1));
    }, DIFFERENTIAL_TIMEOUT_MS);

    it("keeps two racing addItems whole and in one order, on one session object and on two with their own clients", async () => {
      const namespace = freshNamespace(`agents-race-${backend}`);
      const shared = session(sidecar, namespace, "race-shared");
      const a = session(sidecar, namespace, "race-two");
      const b = session(sidecar, namespace, "race-two");
      try {
        for (let round = 0; round < 25; round++) {
          await race(shared, shared, round);
          await race(a, b, round);
        }
      } finally {
        for (const s of [shared, a, b]) s.close();
      }
    });

    it("never returns one item to two concurrent popItem calls, and removes exactly as many as it returns", async () => {
      const namespace = freshNamespace(`agents-pop-${backend}`);
      const sessions = [0, 1, 2, 3].map(() => session(sidecar, namespace, "pops"));
      try {
        const items = Array.from({ length: 24 }, (_, i) => ({ role: "user", content: `m${i}` }) as AgentInputItem);
        await sessions[0]!.addItems(items);
        const popped = await Promise.all(Array.from({ length: 30 }, (_, i) => sessions[i % 4]!.popItem()));
        const got = popped.filter((p) => p !== undefined).map((p) => (p as { content: string }).content);
        expect(got).toHaveLength(24);
        expect(new Set(got).size).toBe(24);
        expect(got.sort()).toEqual(items.map((i) => (i as { content: string }).content).sort());
        expect(await sessions[1]!.getItems()).toEqual([]);
      } finally {
        for (const s of sessions) s.close();
      }
    });

    it("adds after the items written since a clear, never in a gap the clear left below them", async () => {
      const namespace = freshNamespace(`agents-clear-${backend}`);
      const [a, b, c] = [0, 1, 2].map(() => session(sidecar, namespace, "cleared"));
      const say = (text: string) => ({ role: "user", content: text }) as AgentInputItem;
      try {
        await a!.addItems(["a0", "a1", "a2"].map(say));
        await b!.addItems(["b0", "b1", "b2"].map(say));
        await c!.clearSession();
        await c!.addItems([say("c0")]);
        await b!.addItems([say("b-late")]);
        await a!.addItems([say("a-later")]);
        const texts = (await c!.getItems()).map((i) => (i as { content: string }).content);
        expect(texts).toEqual(["c0", "b-late", "a-later"]);
      } finally {
        for (const s of [a, b, c]) s!.close();
      }
    });

    it("writes a batch larger than one request in order, and reads it back across pages", async () => {
      const namespace = freshNamespace(`agents-big-${backend}`);
      const s = session(sidecar, namespace, "big");
      try {
        const many = Array.from({ length: 2500 }, (_, i) => ({ role: "user", content: `n${i}` }) as AgentInputItem);
        const heavy = Array.from({ length: 24 }, (_, i) => ({ role: "user", content: `${i}:${"x".repeat(200_000)}` }) as AgentInputItem);
        await s.addItems(many);
        await s.addItems(heavy);
        const all = await s.getItems();
        expect(all).toStrictEqual([...many, ...heavy]);
        expect(await s.getItems(1500)).toStrictEqual([...many.slice(1024), ...heavy]);
        // With the longest session id, each request's records still fit the sidecar's message limit.
        const long = session(sidecar, namespace, "L".repeat(256));
        try {
          const mid = Array.from({ length: 1600 }, (_, i) => ({ role: "user", content: `${i}:${"m".repeat(5000)}` }) as AgentInputItem);
          await long.addItems(mid);
          expect(await long.getItems()).toStrictEqual(mid);
        } finally {
          long.close();
        }
      } finally {
        s.close();
      }
    });

    it("stores once an append whose answer was lost after it committed, which the client sent again", async () => {
      const namespace = freshNamespace(`agents-lost-${backend}`);
      let puts = 0;
      // The first PutRecords commits, then its answer is lost: the client sees UNAVAILABLE and resends the same
      // request, which the sidecar refuses (RECORD_EXISTS) as the ids are taken, by the records it carries.
      const loseFirstAnswer: Interceptor = (next) => async (req) => {
        const put = req.method.name === "PutRecords" ? ++puts : 0;
        const res = await next(req);
        if (put === 1) throw new ConnectError("answer lost", Code.Unavailable);
        return res;
      };
      const c = new StepwellClient({ target: sidecar.target, namespace, interceptors: [loseFirstAnswer], initialBackoffMs: 1 });
      try {
        const s = new StepwellSession(c, { sessionId: "lost", namespace });
        const items = [{ role: "user", content: "once" }, { role: "user", content: "only" }] as AgentInputItem[];
        await s.addItems(items);
        expect(puts).toBe(2);
        expect(await s.getItems()).toStrictEqual(items);
        await s.addItems([{ role: "user", content: "next" }]);
        expect(await s.getItems()).toStrictEqual([...items, { role: "user", content: "next" }]);
      } finally {
        c.close();
      }
    });

    it("refuses an item larger than a record with the sidecar's INVALID_ARGUMENT, storing nothing of its request", async () => {
      const namespace = freshNamespace(`agents-huge-${backend}`);
      const s = session(sidecar, namespace, "huge");
      try {
        await s.addItems([{ role: "user", content: "before" }]);
        const huge = { role: "user", content: "y".repeat(RECORD_BYTES_MAX + 1) } as AgentInputItem;
        const err = await s.addItems([{ role: "user", content: "with it" }, huge]).then(() => undefined, (e: unknown) => e);
        expect(err).toBeInstanceOf(InvalidArgument);
        expect((err as InvalidArgument).code).toBe("INVALID_ARGUMENT");
        expect(await s.getItems()).toStrictEqual([{ role: "user", content: "before" }]);
        await s.addItems([{ role: "user", content: "after" }]);
        expect(await s.getItems()).toStrictEqual([{ role: "user", content: "before" }, { role: "user", content: "after" }]);
      } finally {
        s.close();
      }
    });
  });
}

/** Two addItems at once: both batches whole, one after the other, after what was there. */
async function race(a: StepwellSession, b: StepwellSession, round: number): Promise<void> {
  const before = await a.getItems();
  const batch = (who: string, n: number) => Array.from({ length: n }, (_, i) => ({ role: "user", content: `${round}:${who}:${i}` }) as AgentInputItem);
  const A = batch("a", 1 + (round % 5));
  const B = batch("b", 1 + ((round * 3) % 5));
  await Promise.all([a.addItems(A), b.addItems(B)]);
  const all = await b.getItems();
  expect(all.slice(0, before.length)).toStrictEqual(before);
  const after = all.slice(before.length);
  expect([[...A, ...B], [...B, ...A]]).toContainEqual(after);
}

describe("session ids", () => {
  it("accepts 1..256 bytes of UTF-8 without control characters, and names sessionId when refusing one", () => {
    expect(checkSessionId("a")).toBe("a");
    expect(checkSessionId("é".repeat(128))).toBe("é".repeat(128));
    for (const bad of ["", "é".repeat(128) + "a", "line\nbreak", "tab\t", "del\u007f", "c1\u0085", "lone\ud800"]) {
      expect(() => checkSessionId(bad), JSON.stringify(bad)).toThrow(/sessionId/);
      expect(() => StepwellSession.fromAddress("127.0.0.1:1", { sessionId: bad }), JSON.stringify(bad)).toThrow(/sessionId/);
    }
    expect(() => checkSessionId(7 as unknown as string)).toThrow(/sessionId must be a string/);
  });
});
