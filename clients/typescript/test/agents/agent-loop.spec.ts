// A real agent loop on a StepwellSession, on SQLite and on Postgres, with the
// fake model (no network): a multi-turn conversation with tool calls and a
// handoff, each turn reading the history the turns before stored, and a
// second session object (another client, as another process would have)
// continuing the same conversation.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { run } from "@openai/agents-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { StepwellSession } from "../../src/agents/index.js";
import { freshNamespace, type Sidecar } from "../sidecar.js";
import { triageAgent } from "./agents.js";
import { BACKENDS, client, logLines, shape, startBackend } from "./harness.js";

for (const backend of BACKENDS) {
  describe(`an agent loop on StepwellSession (${backend})`, () => {
    let sidecar: Sidecar;
    let dir: string;
    beforeAll(async () => {
      sidecar = await startBackend(backend);
      dir = mkdtempSync(join(tmpdir(), "agents-loop-"));
    });
    afterAll(async () => {
      await sidecar?.stop();
      if (dir) rmSync(dir, { recursive: true, force: true });
    });

    it("runs turns with tool calls and a handoff, and another session object continues the conversation", async () => {
      const namespace = freshNamespace(`agents-loop-${backend}`);
      const logFile = join(dir, "log");
      const c1 = client(sidecar, namespace);
      const c2 = client(sidecar, namespace);
      try {
        const agent = triageAgent({ client: c1, runKey: "conv", who: "p1", logFile });
        const session = new StepwellSession(c1, { sessionId: "conv", namespace });
        expect((await run(agent, "hello", { session })).finalOutput).toBe("triage:hello");
        expect((await run(agent, "call look a note b", { session })).finalOutput).toBe("triage:saw a,noted b");
        const handoff = await run(agent, "handoff", { session });
        expect(handoff.lastAgent?.name).toBe("specialist");
        expect(handoff.finalOutput).toBe("specialist:handoff");
        const history = await session.getItems();
        expect(history.map(shape)).toEqual([
          "user:hello", "assistant:triage:hello",
          "user:call look a note b", "function_call:look", "function_call_result:look", "function_call:note", "function_call_result:note", "assistant:triage:saw a,noted b",
          "user:handoff", "function_call:transfer_to_specialist", "function_call_result:transfer_to_specialist", "assistant:specialist:handoff",
        ]);
        // Another client continues: its first turn reads every item stored before.
        const other = new StepwellSession(c2, { sessionId: "conv", namespace });
        const again = triageAgent({ client: c2, runKey: "conv", who: "p2", logFile });
        expect((await run(again, "and now?", { session: other })).finalOutput).toBe("triage:and now?");
        expect((await session.getItems()).map(shape)).toEqual([...history.map(shape), "user:and now?", "assistant:triage:and now?"]);
        expect(logLines(logFile)).toEqual(["p1:note:b"]);
      } finally {
        c1.close();
        c2.close();
      }
    });
  });
}
