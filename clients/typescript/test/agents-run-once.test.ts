// runOnce (the OpenAI Agents SDK's tools that run once) against a real
// sidecar on a SQLite file: two sessions whose model repeats a call id each
// get their own result, with the session given as runOnce's first argument
// or as a function of the run's context; a fixed run key without a session
// is warned of; the lease set per tool is the one Begin asks for; and a call
// that finds its key held by a holder that never completes says it waits,
// then runs the tool once that lease ran out.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import type { Interceptor } from "@connectrpc/connect";
import { Agent, run, setTracingDisabled, tool } from "@openai/agents-core";
import { z } from "zod";
import { StepwellClient, idempotencyPb } from "../src/index.js";
import { StepwellSession, runOnce, toolCallKey, type RunOnceLogger } from "../src/agents/index.js";
import { FakeModel } from "./agents/fake-model.js";
import { freshNamespace, startSidecar, type Sidecar } from "./sidecar.js";

setTracingDisabled(true); // no network: the fake model answers

let sidecar: Sidecar;
let client: StepwellClient;
/** The lease of every Begin the client sent, in ms (undefined: none asked). */
const beginLeases: Array<number | undefined> = [];
const recordBegin: Interceptor = (next) => async (req) => {
  if (req.method.name === "Begin") {
    const lease = (req.message as idempotencyPb.BeginRequest).lease;
    beginLeases.push(lease ? Number(lease.seconds) * 1000 + lease.nanos / 1e6 : undefined);
  }
  return next(req);
};
before(async () => {
  sidecar = await startSidecar();
  client = new StepwellClient({ target: sidecar.target, interceptors: [recordBegin], ...sidecar.connect });
});
after(async () => {
  client?.close();
  await sidecar?.stop();
});

/** A logger that keeps what it is told. */
function recorder(): RunOnceLogger & { lines: string[] } {
  const lines: string[] = [];
  return { lines, warn: (m: string) => lines.push(m) };
}

/** Calls a wrapped execute as the SDK would, with a tool call id. */
function callTool(execute: (...args: any[]) => Promise<unknown>, callId: string): Promise<unknown> {
  return execute({}, {}, { toolCall: { callId } });
}

const Arg = z.object({ arg: z.string() });
/** A tool "note" whose effect records (session, arg) in `runs` and answers with the session's id. */
function noteTool(runs: string[], execute: (fn: (input: { arg: string }, ctx?: unknown) => Promise<string>) => (...args: any[]) => Promise<string>, who: () => string) {
  return tool({
    name: "note",
    description: "Notes.",
    parameters: Arg,
    execute: execute(async ({ arg }) => {
      runs.push(`${who()}:${arg}`);
      return `${who()} noted ${arg}`;
    }),
  });
}

describe("runOnce: one result per session", () => {
  it("keeps two sessions apart when the model repeats a call id (the session as runOnce's first argument)", async () => {
    const namespace = freshNamespace("run-once-sessions");
    const runs: string[] = [];
    const logger = recorder();
    for (const id of ["alice", "bob"]) {
      const session = new StepwellSession(client, { sessionId: id, namespace });
      const note = noteTool(runs, (fn) => runOnce(session, "shop", fn, { logger }), () => id);
      const agent = new Agent({ name: "shop", instructions: "Notes.", model: new FakeModel("shop:"), tools: [note] });
      // The same message in both sessions: the fake model gives the same call id.
      assert.equal((await run(agent, "call note x", { session })).finalOutput, `shop:${id} noted x`);
    }
    assert.deepEqual(runs, ["alice:x", "bob:x"]);
    assert.deepEqual(logger.lines, [], "a key with its session was warned of");
  });

  it("keeps two sessions apart with one tool for all sessions, the session named by the run's context", async () => {
    const namespace = freshNamespace("run-once-context");
    const runs: string[] = [];
    let current = "";
    const session = (ctx: any) => ctx.context.session as StepwellSession;
    const note = noteTool(runs, (fn) => runOnce(client, "shop", fn, { session, logger: recorder() }), () => current);
    const agent = new Agent({ name: "shop", instructions: "Notes.", model: new FakeModel("shop:"), tools: [note] });
    for (const id of ["carol", "dave"]) {
      current = id;
      const s = new StepwellSession(client, { sessionId: id, namespace });
      assert.equal((await run(agent, "call note y", { session: s, context: { session: s } })).finalOutput, `shop:${id} noted y`);
    }
    // A replay in carol's session gets carol's recorded result, without running the tool.
    current = "nobody";
    const carol = new StepwellSession(client, { sessionId: "carol", namespace });
    const replay = await run(agent, "call note y", { session: carol, context: { session: carol } });
    assert.equal(replay.finalOutput, "shop:carol noted y");
    assert.deepEqual(runs, ["carol:y", "dave:y"]);
  });

  it("warns, once per run key, of a fixed run key without a session", () => {
    const logger = recorder();
    const runKey = `fixed-${Math.random()}`;
    runOnce(client, runKey, async () => 1, { logger });
    runOnce(client, runKey, async () => 1, { logger });
    assert.equal(logger.lines.length, 1, logger.lines.join("\n"));
    assert.match(logger.lines[0]!, /cannot tell two sessions apart/);
    assert.ok(logger.lines[0]!.includes(JSON.stringify(runKey)));
    runOnce(client, () => "from-context", async () => 1, { logger });
    runOnce(client, "other", async () => 1, { logger, session: "s1" });
    assert.equal(logger.lines.length, 1, "a run key function or a session was warned of");
  });

  it("refuses a session function that names no session", async () => {
    const execute = runOnce(client, "shop", async () => "ran", { session: () => "", logger: recorder() });
    await assert.rejects(callTool(execute, "c1"), /runOnce: the session must be a StepwellSession or a session id/);
  });
});

describe("runOnce: the lease of a tool", () => {
  it("asks Begin for the lease set on the tool", async () => {
    const session = new StepwellSession(client, { sessionId: "lease", namespace: freshNamespace("run-once-lease") });
    const execute = runOnce(session, "shop", async () => "ran", { leaseMs: 4_500 });
    const from = beginLeases.length;
    assert.equal(await callTool(execute, "c1"), "ran");
    assert.deepEqual(beginLeases.slice(from), [4_500]);
  });

  it("warns that a call waits for a holder that never completes, then runs the tool once its lease ran out", async () => {
    const namespace = freshNamespace("run-once-wait");
    const session = new StepwellSession(client, { sessionId: "erin", namespace });
    const key = toolCallKey("shop", "c9", "erin");
    // A worker that took the call and died inside the tool: it never completes.
    const held = await client.begin(key, { namespace, leaseMs: 1_000 });
    assert.equal(held.outcome, idempotencyPb.BeginOutcome.ACQUIRED);
    const logger = recorder();
    let runs = 0;
    const execute = runOnce(session, "shop", async () => ++runs, { logger, leaseMs: 1_000 });
    assert.equal(await callTool(execute, "c9"), 1);
    assert.equal(runs, 1);
    assert.equal(logger.lines.length, 1, logger.lines.join("\n"));
    assert.match(logger.lines[0]!, /tool call c9 waits for another holder of its key/);
    assert.ok(logger.lines[0]!.includes(JSON.stringify(key)));
    assert.ok(logger.lines[0]!.includes(new Date(Number(held.leaseExpiresAt!.seconds) * 1000 + Math.floor(held.leaseExpiresAt!.nanos / 1e6)).toISOString()));
  });
});
