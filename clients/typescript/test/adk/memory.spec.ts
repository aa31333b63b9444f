// StepwellMemoryService, on SQLite and on Postgres:
// - the behaviours of ADK's own in-memory memory tests (adk-js
//   core/test/memory/in_memory_memory_service_test.ts, those that
//   @google/adk 2.0.0 passes): events without content parts are not kept,
//   adding a session again replaces its memories, (app, user) scoping, any
//   word of the query matches, case-insensitively, the entry's author and
//   ISO 8601 time, an unknown user finds nothing;
// - what it does better than the in-memory service, tested apart: no
//   collision between ("app/x", "u") and ("app", "x/u") (the in-memory
//   service's "app/user" key collides, shown), a "__proto__" session id,
//   and sessions in the order they were first added whatever their ids (the
//   in-memory service lists integer-like ids first, ascending, an artifact
//   of JavaScript objects: shown);
// - the layout of docs/decisions/0047-adk-memory-layout.md: the stored
//   value of each memory, percent-encoded names, the empty name "%", too
//   long a name refused before anything is written, a tombstoned id never
//   added, the limit and ttlSeconds options;
// - search by meaning with a deterministic embedder: it finds what words
//   miss, best first, at most 10 by default, never another user's;
// - an agent loop: ADK's Runner on StepwellSessionService with a scripted
//   model that calls LOAD_MEMORY: alice's fact from one session is recalled
//   in a later session through services on a fresh client; bob never sees
//   it.
import {
  BaseLlm,
  InMemoryMemoryService,
  LOAD_MEMORY,
  LlmAgent,
  LogLevel,
  Runner,
  createEvent,
  createSession,
  setLogLevel,
  type BaseLlmConnection,
  type Event,
  type LlmRequest,
  type LlmResponse,
  type Session,
} from "@google/adk";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { StepwellMemoryService } from "../../src/adk/index.js";
import { jsonBytes, parseJsonBytes } from "../../src/index.js";
import { freshNamespace, type Sidecar } from "../sidecar.js";
import { BACKENDS, client, conceptEmbedding, memoryService, plain, service, startBackend } from "./harness.js";

setLogLevel(LogLevel.ERROR);

/** An event with text parts (or the content given), at `ms`. */
function ev(id: string, texts: string[] | null, ms = 1_705_314_600_000, author = "user"): Event {
  const content = texts === null ? undefined : { role: author === "user" ? "user" : "model", parts: texts.map((text) => ({ text })) };
  return createEvent({ id, author, invocationId: "inv", timestamp: ms, content });
}

function sess(appName: string, userId: string, id: string, events: Event[]): Session {
  return createSession({ id, appName, userId, state: {}, events, lastUpdateTime: 0 });
}

/** The texts of a search's memories. */
async function texts(m: { searchMemory: StepwellMemoryService["searchMemory"] }, appName: string, userId: string, query: string): Promise<string[]> {
  const { memories } = await m.searchMemory({ appName, userId, query });
  return memories.map((e) => (e.content.parts ?? []).map((p) => p.text ?? "").join(" "));
}

for (const backend of BACKENDS) {
  describe(`StepwellMemoryService (${backend})`, () => {
    let sidecar: Sidecar;
    let namespace: string;
    let memory: StepwellMemoryService;
    beforeAll(async () => {
      sidecar = await startBackend(backend);
    });
    afterAll(async () => {
      await sidecar?.stop();
    });
    const fresh = () => {
      memory?.close();
      namespace = freshNamespace(`adk-mem-${backend}`);
      memory = memoryService(sidecar, namespace);
      return memory;
    };
    afterAll(() => memory?.close());

    describe("as ADK's in-memory memory tests", () => {
      it("keeps only the events with content parts, each stored as the layout's value", async () => {
        const m = fresh();
        const events = [ev("e1", ["hello", "", "world"]), ev("e2", null), ev("e3", []), ev("e4", ["bye"], 1_705_314_600_123, "agent")];
        await m.addSessionToMemory(sess("app", "u", "s1", events));
        const c = client(sidecar, namespace);
        try {
          const hits = (await c.searchItems({ pathPrefix: ["adk"], limit: 100 })).hits;
          expect(hits.map((h) => [h.item!.path, h.item!.key])).toEqual([[["adk", "app", "u", "s", "s1"], "e1"], [["adk", "app", "u", "s", "s1"], "e4"]]);
          expect(parseJsonBytes(hits[0]!.item!.value)).toEqual({
            id: "e1", author: "user", timestamp: 1_705_314_600, place: 0, session: "s1", text: "hello world",
            content: { role: "user", parts: [{ text: "hello" }, { text: "" }, { text: "world" }] },
          });
          expect(parseJsonBytes(hits[1]!.item!.value)).toMatchObject({ id: "e4", author: "agent", timestamp: 1_705_314_600.123, place: 3, text: "bye" });
        } finally {
          c.close();
        }
        expect(await texts(m, "app", "u", "hello bye")).toEqual(["hello  world", "bye"]);
      });

      it("replaces a session's memories when it is added again", async () => {
        const m = fresh();
        await m.addSessionToMemory(sess("app", "u", "s1", [ev("e1", ["apple"]), ev("e2", ["banana"])]));
        await m.addSessionToMemory(sess("app", "u", "s2", [ev("e9", ["apple pie"])]));
        await m.addSessionToMemory(sess("app", "u", "s1", [ev("e1", ["apple tart"]), ev("e3", ["cherry"])]));
        expect(await texts(m, "app", "u", "banana")).toEqual([]);
        expect(await texts(m, "app", "u", "apple cherry")).toEqual(["apple tart", "cherry", "apple pie"]);
      });

      it("scopes memories by app and user", async () => {
        const m = fresh();
        await m.addSessionToMemory(sess("app", "alice", "s1", [ev("e1", ["the secret is kept"])]));
        expect(await texts(m, "app", "alice", "secret")).toEqual(["the secret is kept"]);
        expect(await texts(m, "app", "bob", "secret")).toEqual([]);
        expect(await texts(m, "other", "alice", "secret")).toEqual([]);
      });

      it("matches any word of the query, case-insensitively, whole [A-Za-z] words, punctuation of the query kept (as 2.0.0)", async () => {
        const m = fresh();
        await m.addSessionToMemory(sess("app", "u", "s1", [ev("e1", ["Hello there"]), ev("e2", ["the WORLD is round"]), ev("e3", ["abc123 café"]), ev("e4", ["nothing"])]));
        expect(await texts(m, "app", "u", "hello world")).toEqual(["Hello there", "the WORLD is round"]);
        expect(await texts(m, "app", "u", "HELLO")).toEqual(["Hello there"]);
        expect(await texts(m, "app", "u", "abc caf")).toEqual(["abc123 café"]);
        expect(await texts(m, "app", "u", "hello! abc123 café")).toEqual([]);
        expect(await texts(m, "app", "u", "")).toEqual([]);
        expect(await texts(m, "app", "u", "no overlap")).toEqual([]);
      });

      it("answers the author and the time as ISO 8601 in UTC, to the millisecond", async () => {
        const m = fresh();
        await m.addSessionToMemory(sess("app", "u", "s1", [ev("e1", ["deploy done"], 1_705_314_600_000, "agent"), ev("e2", ["deploy again"], 1_700_000_000_123)]));
        const { memories } = await m.searchMemory({ appName: "app", userId: "u", query: "deploy" });
        expect(memories.map((e) => [e.author, e.timestamp])).toEqual([["agent", "2024-01-15T10:30:00.000Z"], ["user", "2023-11-14T22:13:20.123Z"]]);
        expect(plain(memories[0]!.content)).toEqual({ role: "model", parts: [{ text: "deploy done" }] });
      });

      it("finds nothing for an unknown user or app", async () => {
        const m = fresh();
        expect(await m.searchMemory({ appName: "nowhere", userId: "nobody", query: "anything" })).toEqual({ memories: [] });
      });
    });

    describe("where it improves on the in-memory service", () => {
      it("keeps (\"app/x\", \"u\") apart from (\"app\", \"x/u\"), which the in-memory service mixes up", async () => {
        const m = fresh();
        const inMemory = new InMemoryMemoryService();
        for (const svc of [m, inMemory]) await svc.addSessionToMemory(sess("app/x", "u", "s1", [ev("e1", ["secret plan"])]));
        expect(await texts(m, "app", "x/u", "secret")).toEqual([]);
        expect(await texts(m, "app/x", "u", "secret")).toEqual(["secret plan"]);
        expect(await texts(inMemory, "app", "x/u", "secret")).toEqual(["secret plan"]);
      });

      it("stores and finds a session whose id is __proto__", async () => {
        const m = fresh();
        await m.addSessionToMemory(sess("app", "u", "__proto__", [ev("e1", ["polluted maybe"])]));
        await m.addSessionToMemory(sess("app", "u", "constructor", [ev("e2", ["maybe not"])]));
        expect(await texts(m, "app", "u", "maybe")).toEqual(["polluted maybe", "maybe not"]);
      });

      it("answers sessions in the order they were first added, where the in-memory service puts integer-like ids first", async () => {
        const m = fresh();
        const inMemory = new InMemoryMemoryService();
        for (const id of ["zeta", "10", "2", "alpha"]) {
          for (const svc of [m, inMemory]) await svc.addSessionToMemory(sess("app", "u", id, [ev(`e-${id}`, [`word ${id}`])]));
        }
        await m.addSessionToMemory(sess("app", "u", "zeta", [ev("e-zeta", ["word zeta again"])]));
        expect(await texts(m, "app", "u", "word")).toEqual(["word zeta again", "word 10", "word 2", "word alpha"]);
        expect(await texts(inMemory, "app", "u", "word")).toEqual(["word 2", "word 10", "word zeta", "word alpha"]);
      });
    });

    describe("the layout", () => {
      it("percent-encodes names as Python's quote, the empty name as %", async () => {
        const m = fresh();
        await m.addSessionToMemory(sess("a/p p!", "", "ß:1*", [{ ...ev("x", ["named oddly"]), id: "" }, ev("e'2", ["also oddly"])]));
        const c = client(sidecar, namespace);
        try {
          const hits = (await c.searchItems({ pathPrefix: [], limit: 100 })).hits;
          expect(hits.map((h) => [h.item!.path, h.item!.key])).toEqual([
            [["adk", "a%2Fp%20p%21", "%", "s", "%C3%9F%3A1%2A"], "%"], [["adk", "a%2Fp%20p%21", "%", "s", "%C3%9F%3A1%2A"], "e%272"],
          ]);
        } finally {
          c.close();
        }
        expect(await texts(m, "a/p p!", "", "oddly")).toEqual(["named oddly", "also oddly"]);
      });

      it("refuses a name too long for a label (or key), naming it, before writing anything", async () => {
        const m = fresh();
        const long = "é".repeat(43); // 258 bytes percent-encoded
        await expect(m.addSessionToMemory(sess("app", long, "s1", [ev("e1", ["x"])]))).rejects.toThrow(/user id "é+" is too long.*258 bytes/);
        await expect(m.addSessionToMemory(sess("app", "u", "s1", [ev("e1", ["x"]), ev("k".repeat(1025), ["y"])]))).rejects.toThrow(/event id "k+" is too long/);
        await expect(m.searchMemory({ appName: long, userId: "u", query: "x" })).rejects.toThrow(/app name "é+" is too long/);
        const c = client(sidecar, namespace);
        try {
          expect((await c.searchItems({ pathPrefix: [], limit: 10 })).hits).toEqual([]);
        } finally {
          c.close();
        }
        await m.addSessionToMemory(sess("app", "é".repeat(42), "s1", [ev("e1", ["fits"])]));
        expect(await texts(m, "app", "é".repeat(42), "fits")).toEqual(["fits"]);
      });

      it("never adds an id tombstoned under (adk-deleted, app, user), as Python's delete_memory leaves it", async () => {
        const m = fresh();
        await m.addSessionToMemory(sess("app", "u 1", "s1", [ev("e1", ["keep this"]), ev("e/2", ["drop this"])]));
        const c = client(sidecar, namespace);
        try {
          await c.putItems({ writes: [{ path: ["adk-deleted", "app", "u%201"], key: "e%2F2", value: jsonBytes({}) }, { path: ["adk", "app", "u%201", "s", "s1"], key: "e%2F2", delete: true }] });
        } finally {
          c.close();
        }
        await m.addSessionToMemory(sess("app", "u 1", "s1", [ev("e1", ["keep this"]), ev("e/2", ["drop this"]), ev("e3", ["and this"])]));
        expect(await texts(m, "app", "u 1", "this")).toEqual(["keep this", "and this"]);
      });

      it("caps a search at the limit option, and gives memories the ttlSeconds option's time to live", async () => {
        fresh();
        const m = memoryService(sidecar, namespace, { limit: 2, ttlSeconds: 3600 });
        try {
          await m.addSessionToMemory(sess("app", "u", "s1", ["one", "two", "three"].map((w, n) => ev(`e${n}`, [`item ${w}`]))));
          expect(await texts(m, "app", "u", "item")).toEqual(["item one", "item two"]);
          const c = client(sidecar, namespace);
          try {
            const hits = (await c.searchItems({ pathPrefix: ["adk"], limit: 10 })).hits;
            expect(hits.map((h) => Number(h.item!.ttl?.seconds))).toEqual([3600, 3600, 3600]);
          } finally {
            c.close();
          }
        } finally {
          m.close();
        }
        expect(() => memoryService(sidecar, namespace, { limit: 0 })).toThrow(/limit must be a positive integer/);
      });
    });

    describe("search by meaning", () => {
      it("finds what words miss, best first, at most 10 by default, never another user's", async () => {
        fresh();
        const calls: string[][] = [];
        const m = memoryService(sidecar, namespace, { embed: (t) => (calls.push(t), t.map(conceptEmbedding)) });
        try {
          await m.addSessionToMemory(sess("app", "alice", "s1", [
            ev("e1", ["my favourite colour is teal"]), ev("e2", ["I walked the puppy"]), ev("e3", ["lunch was pizza and pasta"]),
            createEvent({ id: "e4", author: "agent", timestamp: 1, content: { role: "model", parts: [{ functionCall: { name: "f", args: {} } }] } }),
          ]));
          await m.addSessionToMemory(sess("app", "bob", "s1", [ev("b1", ["bob likes blue and the colour green"])]));
          expect(calls[0]).toEqual(["my favourite colour is teal", "I walked the puppy", "lunch was pizza and pasta"]);
          expect(await texts(memory, "app", "alice", "which hue")).toEqual([]);
          expect(await texts(m, "app", "alice", "which hue")).toEqual(["my favourite colour is teal", "I walked the puppy", "lunch was pizza and pasta"]);
          expect((await texts(m, "app", "alice", "a dog")).slice(0, 1)).toEqual(["I walked the puppy"]);
          expect(await texts(m, "app", "bob", "which hue")).toEqual(["bob likes blue and the colour green"]);
          await m.addSessionToMemory(sess("app", "alice", "s2", Array.from({ length: 12 }, (_, n) => ev(`x${n}`, [`hue number ${n}`]))));
          expect(await texts(m, "app", "alice", "hue")).toHaveLength(10);
        } finally {
          m.close();
        }
      });
    });

    it("lets an agent recall with LOAD_MEMORY what the user said in an earlier session, through a fresh client, and nobody else", async () => {
      await recall(sidecar, backend);
    });
  });
}

/** A model that answers "recall X" with a call of load_memory(X), then with "recalled: " and the memories' contents; anything else with "ok". */
class ScriptedLlm extends BaseLlm {
  constructor() {
    super({ model: "scripted" });
  }

  async *generateContentAsync(req: LlmRequest): AsyncGenerator<LlmResponse, void> {
    for (const c of [...req.contents].reverse()) {
      for (const p of c.parts ?? []) {
        if (p.functionResponse?.name === "load_memory") {
          const mems = ((p.functionResponse.response as { memories?: { content: string }[] })?.memories ?? []).map((m) => m.content);
          yield { content: { role: "model", parts: [{ text: `recalled: ${mems.join(" | ")}` }] } };
          return;
        }
        if (c.role === "user" && p.text) {
          const call = { functionCall: { id: "fc-1", name: "load_memory", args: { query: p.text.slice(7) } } };
          yield { content: { role: "model", parts: [p.text.startsWith("recall ") ? call : { text: "ok" }] } };
          return;
        }
      }
    }
  }

  async connect(): Promise<BaseLlmConnection> {
    throw new Error("ScriptedLlm does not stream");
  }
}

/** One turn of `runner`: the final texts. */
async function turnTexts(runner: Runner, userId: string, sessionId: string, text: string): Promise<string[]> {
  const out: string[] = [];
  for await (const e of runner.runAsync({ userId, sessionId, newMessage: { role: "user", parts: [{ text }] } })) {
    for (const p of e.content?.parts ?? []) if (p.text) out.push(p.text);
  }
  return out;
}

async function recall(sidecar: Sidecar, backend: string): Promise<void> {
  const namespace = freshNamespace(`adk-mem-loop-${backend}`);
  const agent = () => new LlmAgent({ name: "a", model: new ScriptedLlm(), instruction: "Help.", tools: [LOAD_MEMORY] });
  const [sessions, memories] = [service(sidecar, namespace), memoryService(sidecar, namespace)];
  try {
    const runner = new Runner({ appName: "app", agent: agent(), sessionService: sessions, memoryService: memories });
    const s1 = await sessions.createSession({ appName: "app", userId: "alice" });
    expect(await turnTexts(runner, "alice", s1.id, "my favourite colour is teal")).toEqual(["ok"]);
    await memories.addSessionToMemory((await sessions.getSession({ appName: "app", userId: "alice", sessionId: s1.id }))!);
  } finally {
    sessions.close();
    memories.close();
  }
  const [sessions2, memories2] = [service(sidecar, namespace), memoryService(sidecar, namespace)];
  try {
    const runner = new Runner({ appName: "app", agent: agent(), sessionService: sessions2, memoryService: memories2 });
    const s2 = await sessions2.createSession({ appName: "app", userId: "alice" });
    expect(await turnTexts(runner, "alice", s2.id, "recall favourite colour")).toEqual(["recalled: my favourite colour is teal"]);
    const s3 = await sessions2.createSession({ appName: "app", userId: "bob" });
    expect(await turnTexts(runner, "bob", s3.id, "recall favourite colour")).toEqual(["recalled: "]);
  } finally {
    sessions2.close();
    memories2.close();
  }
}
