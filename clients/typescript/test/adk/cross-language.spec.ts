// One ADK session, two languages, on SQLite and on Postgres: a TypeScript
// ADK agent (agent.ts, on this client's StepwellSessionService) and a Python
// ADK agent (clients/python/tests/adk/xlang_adk_py.py, google-adk with the
// Python client's stepwell.adk, run by STEPWELL_TEST_PYTHON) take turns on
// one session. Each one's tool reads the state the other's wrote (session,
// user: and app: keys), each one's runner loads the other's events as its
// history, and the final session read from both languages is the same.
//
// What the comparison normalises: each language's event form is turned
// into the fields both carry (id, invocationId, author, branch, content,
// actions.stateDelta, actions.transferToAgent, actions.escalate,
// actions.skipSummarization, timestamp in ms), because each language's
// defaults differ: Python writes nodeInfo {"path": ""}, empty
// requestedAuthConfigs/requestedToolConfirmations and leaves out empty
// longRunningToolIds; TypeScript writes [] for longRunningToolIds. Python's
// times (seconds) are compared as the TypeScript service reads them: times
// 1000, and within a microsecond of a whole millisecond, that millisecond.
//
// What does not carry, shown at the end: a workflow event's route, which
// TypeScript keeps at the event's top level and Python in its actions:
// Python reads TypeScript's, TypeScript does not follow Python's.
import { resolve } from "node:path";
import { LogLevel, createEvent, setLogLevel, type Event } from "@google/adk";
import type { StepwellSessionService } from "../../src/adk/index.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { msOf } from "../../src/adk/layout.js";
import { PythonSide } from "../python-side.js";
import { PKG_ROOT, freshNamespace, type Sidecar } from "../sidecar.js";
import { runner, shape, turn } from "./agent.js";
import { BACKENDS, plain, service, startBackend } from "./harness.js";

setLogLevel(LogLevel.ERROR);

/** The shared session's id: a slash, a space, non-ASCII and "!" (which encodeURIComponent leaves as it is, and the layout encodes as Python's quote does) in its turn id. */
const SID = "both/ß 1!";

/** The Python side: STEPWELL_TEST_XLANG_ADK_PY, or the Python client's tests/adk/xlang_adk_py.py. */
const XLANG_PY = process.env.STEPWELL_TEST_XLANG_ADK_PY || resolve(PKG_ROOT, "../python/tests/adk/xlang_adk_py.py");

/** The Python side, one process for this file's commands. */
const pythonSide = new PythonSide(XLANG_PY, "import stepwell.adk, google.adk");
afterAll(() => pythonSide.close());

/** Runs xlang_adk_py.py's command on session shop/ann/<sessionId> and resolves to what it printed; rejects when it fails. */
function py(sidecar: Sidecar, namespace: string, sessionId: string, args: string[]): Promise<string> {
  return pythonSide.run([sidecar.target, namespace, "shop", "ann", sessionId, ...args]);
}

/** An event of either language as the fields both carry, its time in ms. */
function common(e: Record<string, any>, fromPython: boolean): Record<string, unknown> {
  const a = e.actions ?? {};
  return plain({
    id: e.id, invocationId: e.invocationId, author: e.author, branch: e.branch, content: e.content,
    actions: { stateDelta: a.stateDelta ?? {}, transferToAgent: a.transferToAgent, escalate: a.escalate, skipSummarization: a.skipSummarization },
    timestamp: fromPython ? msOf(e.timestamp) : e.timestamp,
  });
}

for (const backend of BACKENDS) {
  describe(`an ADK session shared with Python (${backend})`, () => {
    let sidecar: Sidecar;
    beforeAll(async () => {
      pythonSide.ready();
      sidecar = await startBackend(backend);
    });
    afterAll(async () => {
      await sidecar?.stop();
    });

    it("takes turns between a TypeScript and a Python agent, each reading the other's events and state (a Python event's route does not carry)", async () => {
      await takeTurns(sidecar, backend);
    });
  });
}

async function takeTurns(sidecar: Sidecar, backend: string): Promise<void> {
  const namespace = freshNamespace(`adk-xlang-${backend}`);
  const sessions = service(sidecar, namespace);
  try {
    await sessions.createSession({ appName: "shop", userId: "ann", sessionId: SID });
    const r = runner(sessions, "ts:");
    expect(await turn(r, "ann", SID, "call note apple")).toBe('ts:{"noted":"apple"}');
    expect(await py(sidecar, namespace, SID, ["run", "call recall -"])).toBe('py:{"note":"apple","notes":1,"last":"apple"}');
    expect(await py(sidecar, namespace, SID, ["run", "call note pear"])).toBe('py:{"noted":"pear"}');
    expect(await turn(r, "ann", SID, "call recall -")).toBe('ts:{"note":"pear","notes":2,"last":"pear"}');
    expect(await turn(r, "ann", SID, "bye")).toBe("ts:bye");
    const ts = (await sessions.getSession({ appName: "shop", userId: "ann", sessionId: SID }))!;
    const fromPy = JSON.parse(await py(sidecar, namespace, SID, ["get"])) as { events: Record<string, any>[]; state: unknown; lastUpdateTime: number };
    expect(ts.events.map(shape)).toEqual([
      "user:call note apple", "assistant:call note", "assistant:response note", 'assistant:ts:{"noted":"apple"}',
      "user:call recall -", "assistant:call recall", "assistant:response recall", 'assistant:py:{"note":"apple","notes":1,"last":"apple"}',
      "user:call note pear", "assistant:call note", "assistant:response note", 'assistant:py:{"noted":"pear"}',
      "user:call recall -", "assistant:call recall", "assistant:response recall", 'assistant:ts:{"note":"pear","notes":2,"last":"pear"}',
      "user:bye", "assistant:ts:bye",
    ]);
    expect(ts.state).toEqual({ note: "pear", "user:notes": 2, "app:last": "pear" });
    expect(fromPy.state).toEqual(ts.state);
    expect(msOf(fromPy.lastUpdateTime)).toBe(ts.lastUpdateTime);
    expect(fromPy.events.map((e) => common(e, true))).toEqual(ts.events.map((e: Event) => common(e as Record<string, any>, false)));
    await routes(sidecar, namespace, sessions);
  } finally {
    sessions.close();
  }
}

/**
 * A workflow event's route: ADK's TypeScript Event has it at the top level,
 * ADK's Python Event in its actions. Python reads TypeScript's route into
 * its actions (it carries); TypeScript reads Python's as an unknown field
 * of the actions, which its workflows do not follow (it does not carry).
 * Both read the event's output.
 */
async function routes(sidecar: Sidecar, namespace: string, sessions: StepwellSessionService): Promise<void> {
  const session = (await sessions.getSession({ appName: "shop", userId: "ann", sessionId: SID }))!;
  await sessions.appendEvent({ session, event: createEvent({ author: "assistant", invocationId: "wf-ts", route: "next", output: { done: true } }) });
  const fromPy = (JSON.parse(await py(sidecar, namespace, SID, ["get"])) as { events: Record<string, any>[] }).events.at(-1)!;
  expect([fromPy.invocationId, fromPy.actions.route, fromPy.output]).toEqual(["wf-ts", "next", { done: true }]);
  await py(sidecar, namespace, SID, ["route", "later"]);
  const pyEvent = (await sessions.getSession({ appName: "shop", userId: "ann", sessionId: SID, config: { numRecentEvents: 1 } }))!.events[0]!;
  expect([pyEvent.invocationId, pyEvent.route, (pyEvent.actions as unknown as Record<string, unknown>).route, pyEvent.output]).toEqual(["wf-py", undefined, "later", { done: true }]);
}
