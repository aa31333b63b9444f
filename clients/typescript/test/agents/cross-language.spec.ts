// One session, two languages, on SQLite and on Postgres: the Python client's
// StepwellSession (driven through clients/python/tests/agents/xlang_py.py,
// run by STEPWELL_TEST_PYTHON) and this client's keep the same records, so a
// conversation started in one language is continued in the other, each
// side's agent (a fake model on each side, no network) reading every turn
// before. Both SDKs store plain messages alike; their tool items differ
// (TypeScript: function_call with callId, function_call_result with name,
// status and an output object; Python: function_call with call_id,
// function_call_output with an output string), and the spec pins what that
// means for a real model provider: the TypeScript SDK's OpenAI Responses
// model (with a stub client, never the network) sends a Python-written
// message history, and refuses one holding Python's tool output.
import { resolve } from "node:path";
import { Agent, run, type AgentInputItem } from "@openai/agents-core";
import { OpenAIResponsesModel } from "@openai/agents";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { StepwellSession } from "../../src/agents/index.js";
import { PythonSide } from "../python-side.js";
import { PKG_ROOT, freshNamespace, type Sidecar } from "../sidecar.js";
import { FakeModel } from "./fake-model.js";
import { BACKENDS, client, shape, startBackend } from "./harness.js";

/** The Python side: STEPWELL_TEST_XLANG_PY, or the Python client's tests/agents/xlang_py.py. */
const XLANG_PY = process.env.STEPWELL_TEST_XLANG_PY || resolve(PKG_ROOT, "../python/tests/agents/xlang_py.py");

/** The Python side, one process for this file's commands. */
const pythonSide = new PythonSide(XLANG_PY, "import stepwell.agents, agents");
afterAll(() => pythonSide.close());

/** Runs xlang_py.py's command on the session and resolves to what it printed; rejects when it fails. */
function py(sidecar: Sidecar, namespace: string, sessionId: string, args: string[], stdin = ""): Promise<string> {
  return pythonSide.run([sidecar.target, namespace, sessionId, ...args], stdin);
}

/** The TypeScript side's agent: answers "ts:" + the last user message. */
const tsAgent = () => new Agent({ name: "ts", instructions: "Answer.", model: new FakeModel("ts:") });

/** A tool turn as the Python SDK stores it (its ResponseFunctionToolCall and function_call_output items). */
const PY_TOOL_TURN = [
  { content: "look it up", role: "user" },
  { arguments: "{}", call_id: "call_py_1", name: "look", type: "function_call", id: "fc_1", status: "completed" },
  { call_id: "call_py_1", output: "saw it", type: "function_call_output" },
  { id: "msg_2", content: [{ annotations: [], text: "py:saw it", type: "output_text" }], role: "assistant", status: "completed", type: "message" },
];

/** The SDK's own OpenAI Responses model on a stub client that records each request's input and answers "ok". */
function recordingResponsesModel(inputs: unknown[]): OpenAIResponsesModel {
  const answer = { id: "resp_1", output: [{ type: "message", id: "msg_ok", role: "assistant", status: "completed", content: [{ type: "output_text", text: "ok", annotations: [] }] }], usage: { input_tokens: 1, output_tokens: 1, total_tokens: 2 } };
  const stub = { baseURL: "http://127.0.0.1:9/v1", apiKey: "none", responses: { create: async (req: { input: unknown }) => (inputs.push(req.input), answer) } };
  return new OpenAIResponsesModel(stub as any, "stub-model");
}

for (const backend of BACKENDS) {
  describe(`a session shared with Python (${backend})`, () => {
    let sidecar: Sidecar;
    beforeAll(async () => {
      pythonSide.ready();
      sidecar = await startBackend(backend);
    });
    afterAll(async () => {
      await sidecar?.stop();
    });

    it("continues in Python a conversation TypeScript started, and back", async () => {
      const namespace = freshNamespace(`agents-xlang-ts-${backend}`);
      const c = client(sidecar, namespace);
      try {
        const session = new StepwellSession(c, { sessionId: "ts-first", namespace });
        expect((await run(tsAgent(), "hello from ts", { session })).finalOutput).toBe("ts:hello from ts");
        expect(await py(sidecar, namespace, "ts-first", ["run", "then from python"])).toBe("py:then from python");
        expect((await run(tsAgent(), "back in ts", { session })).finalOutput).toBe("ts:back in ts");
        const items = await session.getItems();
        expect(items.map(shape)).toEqual(["user:hello from ts", "assistant:ts:hello from ts", "user:then from python", "assistant:py:then from python", "user:back in ts", "assistant:ts:back in ts"]);
        // Python reads the very items TypeScript reads.
        expect(JSON.parse(await py(sidecar, namespace, "ts-first", ["get"]))).toStrictEqual(items);
      } finally {
        c.close();
      }
    });

    it("continues in TypeScript a conversation Python started, and back", async () => {
      const namespace = freshNamespace(`agents-xlang-py-${backend}`);
      const c = client(sidecar, namespace);
      try {
        expect(await py(sidecar, namespace, "py-first", ["run", "hello from python"])).toBe("py:hello from python");
        const session = new StepwellSession(c, { sessionId: "py-first", namespace });
        expect((await run(tsAgent(), "then from ts", { session })).finalOutput).toBe("ts:then from ts");
        expect(await py(sidecar, namespace, "py-first", ["run", "back in python"])).toBe("py:back in python");
        const fromPython = JSON.parse(await py(sidecar, namespace, "py-first", ["get"]));
        expect(fromPython.map(shape)).toEqual(["user:hello from python", "assistant:py:hello from python", "user:then from ts", "assistant:ts:then from ts", "user:back in python", "assistant:py:back in python"]);
        expect(await session.getItems()).toStrictEqual(fromPython);
      } finally {
        c.close();
      }
    });

    it("hands Python's messages to the SDK's OpenAI model, but not Python's tool items, which it refuses", async () => {
      const namespace = freshNamespace(`agents-xlang-tools-${backend}`);
      const c = client(sidecar, namespace);
      try {
        await py(sidecar, namespace, "py-messages", ["run", "hi"]);
        const inputs: unknown[] = [];
        const agent = new Agent({ name: "real", instructions: "Answer.", model: recordingResponsesModel(inputs) });
        const messages = new StepwellSession(c, { sessionId: "py-messages", namespace });
        expect((await run(agent, "next", { session: messages })).finalOutput).toBe("ok");
        expect((inputs[0] as Array<Record<string, unknown>>).map((i) => i.role)).toEqual(["user", "assistant", "user"]);

        await py(sidecar, namespace, "py-tools", ["add"], JSON.stringify(PY_TOOL_TURN));
        const tools = new StepwellSession(c, { sessionId: "py-tools", namespace });
        expect(await tools.getItems()).toStrictEqual(PY_TOOL_TURN as unknown as AgentInputItem[]);
        await expect(run(agent, "next", { session: tools })).rejects.toThrow(/Unsupported item .*function_call_output/);
      } finally {
        c.close();
      }
    });
  });
}
