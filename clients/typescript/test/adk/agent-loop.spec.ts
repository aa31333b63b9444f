// A real ADK agent loop on StepwellSessionService, on SQLite and on
// Postgres: ADK's Runner drives an LlmAgent on a fake model (agent.ts) with
// tools, over several turns:
// - in one process: a tool call, state written by a tool (session, user:,
//   app: and temp: keys), the conversation and state read back through
//   another service object, the user's and app's state seen by the user's
//   other session, and no temp: key stored anywhere;
// - across processes: a worker SIGKILLed inside a tool, after the earlier
//   turns and the tool's call were stored (the spec polls the store for
//   them), and the conversation continued by a new worker process: the
//   final session holds every event once, in order, and the state the
//   first worker's tool wrote.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LogLevel, setLogLevel } from "@google/adk";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { STATE_KIND } from "../../src/adk/index.js";
import { freshNamespace, type Sidecar } from "../sidecar.js";
import { runner, shape, turn } from "./agent.js";
import { BACKENDS, client, service, startBackend, waitFor } from "./harness.js";
import { startWorker } from "./workers.js";

setLogLevel(LogLevel.ERROR);

for (const backend of BACKENDS) {
  describe(`an ADK agent on StepwellSessionService (${backend})`, () => {
    let sidecar: Sidecar;
    let dir: string;
    beforeAll(async () => {
      sidecar = await startBackend(backend);
      dir = mkdtempSync(join(tmpdir(), "adk-loop-"));
    });
    afterAll(async () => {
      await sidecar?.stop();
      if (dir) rmSync(dir, { recursive: true, force: true });
    });

    it("runs a multi-turn conversation with a tool that writes state, all of it read back by another service", async () => {
      await conversation(sidecar, backend);
    });

    it("continues in a new process a conversation whose worker was SIGKILLed inside a tool", async () => {
      await crashAndContinue(sidecar, dir, backend);
    });
  });
}

async function conversation(sidecar: Sidecar, backend: string): Promise<void> {
  const namespace = freshNamespace(`adk-loop-${backend}`);
  const sessions = service(sidecar, namespace);
  const other = service(sidecar, namespace);
  const c = client(sidecar, namespace);
  try {
    await sessions.createSession({ appName: "shop", userId: "ann", sessionId: "chat" });
    const r = runner(sessions, "a:");
    expect(await turn(r, "ann", "chat", "hello")).toBe("a:hello");
    expect(await turn(r, "ann", "chat", "call note apples")).toBe('a:{"noted":"apples"}');
    expect(await turn(r, "ann", "chat", "call recall -")).toBe('a:{"note":"apples","notes":1,"last":"apples"}');
    const got = (await other.getSession({ appName: "shop", userId: "ann", sessionId: "chat" }))!;
    expect(got.events.map(shape)).toEqual([
      "user:hello", "assistant:a:hello",
      "user:call note apples", "assistant:call note", "assistant:response note", 'assistant:a:{"noted":"apples"}',
      "user:call recall -", "assistant:call recall", "assistant:response recall", 'assistant:a:{"note":"apples","notes":1,"last":"apples"}',
    ]);
    expect(new Set(got.events.map((e) => e.id)).size).toBe(got.events.length);
    expect(got.state).toEqual({ note: "apples", "user:notes": 1, "app:last": "apples" });
    // The user's other session shares user: and app: state, not the session's own.
    const second = await other.createSession({ appName: "shop", userId: "ann", sessionId: "second" });
    expect(second.state).toEqual({ "user:notes": 1, "app:last": "apples" });
    expect(await turn(runner(other, "b:"), "ann", "second", "call note pears")).toBe('b:{"noted":"pears"}');
    expect((await sessions.getSession({ appName: "shop", userId: "ann", sessionId: "chat" }))!.state).toEqual({ note: "apples", "user:notes": 2, "app:last": "pears" });
    const stored = await c.listRecords({ turnId: "", hasScope: true, scope: "", kind: STATE_KIND, pageSize: 1000 });
    expect(stored.entries.map((e) => e.record!.id).sort()).toEqual(["klast", "knote", "knote", "knotes"]);
  } finally {
    sessions.close();
    other.close();
    c.close();
  }
}

async function crashAndContinue(sidecar: Sidecar, dir: string, backend: string): Promise<void> {
  const namespace = freshNamespace(`adk-crash-${backend}`);
  const gateFile = join(dir, `${backend}.gate`);
  const base = { target: sidecar.target, namespace, userId: "bob", sessionId: "crash", gateFile };
  const observer = service(sidecar, namespace);
  const read = async () => (await observer.getSession({ appName: "shop", userId: "bob", sessionId: "crash" }))?.events.map(shape) ?? [];
  try {
    const first = startWorker({ ...base, who: "w1", inputs: ["hello", "call note x", "call slow y"] });
    try {
      await first.waitLine("blocked");
      // Durable before the kill: both earlier turns, and slow's call.
      await waitFor(async () => (await read()).includes("assistant:call slow"), "slow's call to be stored");
    } finally {
      await first.kill();
    }
    const before = await read();
    expect(before).toEqual(["user:hello", "assistant:w1:hello", "user:call note x", "assistant:call note", "assistant:response note", 'assistant:w1:{"noted":"x"}', "user:call slow y", "assistant:call slow"]);
    writeFileSync(gateFile, "");
    const lines = await startWorker({ ...base, who: "w2", inputs: ["call recall -", "bye"] }).done();
    expect(lines).toEqual(['turn w2:{"note":"x","notes":1,"last":"x"}', "turn w2:bye", "done"]);
    const after = (await observer.getSession({ appName: "shop", userId: "bob", sessionId: "crash" }))!;
    expect(after.events.map(shape)).toEqual([...before, "user:call recall -", "assistant:call recall", "assistant:response recall", 'assistant:w2:{"note":"x","notes":1,"last":"x"}', "user:bye", "assistant:w2:bye"]);
    expect(new Set(after.events.map((e) => e.id)).size).toBe(after.events.length);
    expect(after.events.map((e) => e.timestamp)).toEqual(after.events.map((e) => e.timestamp).sort((a, b) => a - b));
    expect(after.state).toEqual({ note: "x", "user:notes": 1, "app:last": "x" });
  } finally {
    observer.close();
  }
}
