// ADK memories shared with Python, on SQLite and on Postgres: the Python
// client's stepwell.adk.StepwellMemoryService (test/adk/xlang_memory_py.py,
// imported from this checkout's clients/python/src and run by
// STEPWELL_TEST_PYTHON with google-adk 2.13.0) and this client's
// StepwellMemoryService on one sidecar and namespace, in the layout of
// docs/decisions/0047-adk-memory-layout.md:
// - a session Python added is found by TypeScript (content, author, time),
//   its content-less events left out, and one TypeScript added is found by
//   Python (each language's own time format), names with a slash, a space,
//   non-ASCII and "!" in them;
// - a memory Python's delete_memory removed stays removed when TypeScript
//   adds its session again (the tombstone holds), for both languages;
// - memories Python added with an embedder are found by meaning from
//   TypeScript with the same embedder, and the reverse.
import { resolve } from "node:path";
import { createEvent, createSession, type Event } from "@google/adk";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PythonSide } from "../python-side.js";
import { PKG_ROOT, freshNamespace, type Sidecar } from "../sidecar.js";
import { BACKENDS, conceptEmbedding, memoryService, plain, startBackend } from "./harness.js";

const XLANG_PY = resolve(PKG_ROOT, "test/adk/xlang_memory_py.py");
const pythonSide = new PythonSide(XLANG_PY, "import google.adk, grpc");
afterAll(() => pythonSide.close());

const APP = "shop/1";
const USER = "ann é!";

interface PyMemory { id: string; author?: string; timestamp?: string; content: { role?: string; parts: { text?: string }[] } }

/** Runs one command of xlang_memory_py.py and resolves to its JSON answer. */
async function py(sidecar: Sidecar, namespace: string, command: string, args: Record<string, unknown>): Promise<any> {
  return JSON.parse(await pythonSide.run([sidecar.target, namespace, command, JSON.stringify({ app: APP, user: USER, ...args })]));
}

function tsEvent(id: string, texts: string[] | null, ms: number, author = "user"): Event {
  return createEvent({ id, author, invocationId: "inv", timestamp: ms, content: texts === null ? undefined : { role: author === "user" ? "user" : "model", parts: texts.map((text) => ({ text })) } });
}

const textOf = (content: { parts?: { text?: string }[] }) => (content.parts ?? []).map((p) => p.text ?? "").join(" ");

for (const backend of BACKENDS) {
  describe(`ADK memories shared with Python (${backend})`, () => {
    let sidecar: Sidecar;
    beforeAll(async () => {
      pythonSide.ready();
      sidecar = await startBackend(backend);
    });
    afterAll(async () => {
      await sidecar?.stop();
    });

    it("finds in TypeScript what Python added, and in Python what TypeScript added", async () => {
      const namespace = freshNamespace(`adk-mem-xlang-${backend}`);
      const m = memoryService(sidecar, namespace);
      try {
        await py(sidecar, namespace, "add", { session: "py/ß 1!", events: [
          { id: "p1", author: "user", timestamp: 1_705_314_600.123, texts: ["my favourite colour is teal"] },
          { id: "p2", author: "agent", timestamp: 1_705_314_601, texts: null },
          { id: "p3", author: "agent", timestamp: 1_705_314_602, texts: ["teal", "noted"] },
        ] });
        const { memories } = await m.searchMemory({ appName: APP, userId: USER, query: "teal" });
        expect(plain(memories)).toEqual([
          { content: { role: "user", parts: [{ text: "my favourite colour is teal" }] }, author: "user", timestamp: "2024-01-15T10:30:00.123Z" },
          { content: { role: "model", parts: [{ text: "teal" }, { text: "noted" }] }, author: "agent", timestamp: "2024-01-15T10:30:02.000Z" },
        ]);
        await m.addSessionToMemory(createSession({ id: "ts/2", appName: APP, userId: USER, state: {}, lastUpdateTime: 0, events: [
          tsEvent("t1", ["the deploy is ready"], 1_705_400_000_250), tsEvent("t2", null, 1_705_400_001_000), tsEvent("t3", ["deploy again"], 1_705_400_002_000, "agent"),
        ] }));
        const fromPy = (await py(sidecar, namespace, "search", { query: "deploy" })) as PyMemory[];
        expect(fromPy.map((e) => [e.id, e.author, textOf(e.content), new Date(e.timestamp!).getTime()])).toEqual([
          ["t1", "user", "the deploy is ready", 1_705_400_000_250], ["t3", "agent", "deploy again", 1_705_400_002_000],
        ]);
        expect(fromPy[0]!.content).toEqual({ role: "user", parts: [{ text: "the deploy is ready" }] });
        expect((await py(sidecar, namespace, "search", { query: "teal deploy" }) as PyMemory[]).map((e) => e.id)).toEqual(["p1", "p3", "t1", "t3"]);
      } finally {
        m.close();
      }
    });

    it("keeps a memory Python deleted out when TypeScript adds its session again", async () => {
      const namespace = freshNamespace(`adk-mem-xlang-del-${backend}`);
      const m = memoryService(sidecar, namespace);
      try {
        const events = [tsEvent("k1", ["keep this plan"], 1_705_400_000_000), tsEvent("k/2", ["forget this plan"], 1_705_400_001_000)];
        const session = (evs: Event[]) => createSession({ id: "chat", appName: APP, userId: USER, state: {}, lastUpdateTime: 0, events: evs });
        await m.addSessionToMemory(session(events));
        expect(await py(sidecar, namespace, "delete", { id: "k/2" })).toEqual({ deleted: "k/2" });
        const texts = async () => (await m.searchMemory({ appName: APP, userId: USER, query: "plan" })).memories.map((e) => textOf(e.content));
        expect(await texts()).toEqual(["keep this plan"]);
        await m.addSessionToMemory(session([...events, tsEvent("k3", ["a new plan"], 1_705_400_002_000)]));
        expect(await texts()).toEqual(["keep this plan", "a new plan"]);
        expect(((await py(sidecar, namespace, "search", { query: "plan" })) as PyMemory[]).map((e) => e.id)).toEqual(["k1", "k3"]);
      } finally {
        m.close();
      }
    });

    it("finds by meaning, in each language, what the other added with the same embedder", async () => {
      const namespace = freshNamespace(`adk-mem-xlang-vec-${backend}`);
      const m = memoryService(sidecar, namespace, { embed: (t) => t.map(conceptEmbedding) });
      try {
        await py(sidecar, namespace, "add", { embed: true, session: "py", events: [
          { id: "p1", author: "user", timestamp: 1_705_314_600, texts: ["my favourite colour is teal"] },
          { id: "p2", author: "user", timestamp: 1_705_314_601, texts: ["lunch was pizza"] },
        ] });
        await m.addSessionToMemory(createSession({ id: "ts", appName: APP, userId: USER, state: {}, lastUpdateTime: 0, events: [tsEvent("t1", ["I walked the puppy"], 1_705_400_000_000)] }));
        const tsFound = (await m.searchMemory({ appName: APP, userId: USER, query: "which hue" })).memories.map((e) => textOf(e.content));
        expect(tsFound[0]).toBe("my favourite colour is teal");
        expect(tsFound).toHaveLength(3);
        const pyFound = (await py(sidecar, namespace, "search", { embed: true, query: "a dog" })) as PyMemory[];
        expect(pyFound[0]!.id).toBe("t1");
        expect(pyFound.map((e) => e.id).sort()).toEqual(["p1", "p2", "t1"]);
      } finally {
        m.close();
      }
    });
  });
}
