// An OpenAI Agents SDK run that stops for a person's approval and resumes,
// its session and run state kept by a stepwell sidecar. The client README
// shows this file; test.sh runs it in a fresh project after the README's install.
import { Agent, RunState, run, tool, setTracingDisabled, Usage } from "@openai/agents";
import { z } from "zod";
import { StepwellClient } from "@stepwell/client";
import { StepwellSession, runOnce, saveRunState, loadRunState, signalApproval, awaitApproval, applyApproval } from "@stepwell/client/agents";

setTracingDisabled(true); // the example has no network: a scripted model stands in for a real one
const model = {
  async getResponse({ input }) {
    const result = input.find((i) => i.type === "function_call_result");
    const output = result
      ? [{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: result.output.text ?? result.output }] }]
      : [{ type: "function_call", callId: "call_1", name: "ship", arguments: '{"order":"A-17"}', status: "completed" }];
    return { usage: new Usage(), output };
  },
  getStreamedResponse() { throw new Error("not streamed"); },
};

const client = new StepwellClient({ target: process.env.STEPWELL_TARGET ?? "127.0.0.1:50051", namespace: "examples" });
const sessionId = `order-${process.pid}`;
const ref = { sessionId, runId: "ship-run", namespace: "examples" };
const session = new StepwellSession(client, { sessionId, namespace: "examples" });
const ship = tool({
  name: "ship", description: "Ships an order.", parameters: z.object({ order: z.string() }),
  needsApproval: async () => true,
  execute: runOnce(session, "ship-run", async ({ order }) => `shipped ${order}`), // once per tool call of the session, whatever replays
});
const agent = new Agent({ name: "shop", instructions: "Ship orders.", model, tools: [ship] });

const first = await run(agent, "ship A-17", { session });           // stops: ship needs approval
await saveRunState(client, ref, first.state);                       // the process may exit here
const asked = first.interruptions[0];
console.log(`approve ${asked.name}(${asked.arguments})?`);          // approve ship({"order":"A-17"})?
await signalApproval(client, ref, asked.rawItem.callId, { approved: true }); // from another service

// Later, in this process or any other: load the state, await the decision, resume.
const state = await RunState.fromString(agent, await loadRunState(client, ref));
for (const item of state.getInterruptions()) applyApproval(state, item, await awaitApproval(client, ref, item));
console.log((await run(agent, state, { session })).finalOutput);   // shipped A-17
client.close();
