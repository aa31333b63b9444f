// A Google ADK agent whose session is kept by a stepwell sidecar: a scripted
// model calls a tool that writes user state. The client README shows this
// file; test.sh runs it in a fresh project after the README's install.
import { BaseLlm, FunctionTool, LlmAgent, Runner } from "@google/adk";
import { StepwellSessionService } from "@stepwell/client/adk";

class ScriptedModel extends BaseLlm { // the example has no network: a scripted model stands in for a real one
  constructor() { super({ model: "scripted" }); }
  async *generateContentAsync(request) {
    const done = request.contents.at(-1)?.parts?.find((p) => p.functionResponse)?.functionResponse.response;
    yield done
      ? { content: { role: "model", parts: [{ text: `shipped ${done.order}, ${done.count} so far` }] } }
      : { content: { role: "model", parts: [{ functionCall: { name: "ship", args: { order: "A-17" } } }] } };
  }
  async connect() { throw new Error("not live"); }
}

const ship = new FunctionTool({
  name: "ship", description: "Ships an order.", parameters: { type: "OBJECT", properties: { order: { type: "STRING" } } },
  execute: ({ order }, ctx) => {
    const count = (ctx.state.get("user:shipped") ?? 0) + 1; // user: state, shared by the user's sessions
    ctx.state.set("user:shipped", count);
    return { order, count };
  },
});
const agent = new LlmAgent({ name: "shop", model: new ScriptedModel(), instruction: "Ship orders.", tools: [ship] });

const target = process.env.STEPWELL_TARGET ?? "127.0.0.1:50051";
const sessionService = StepwellSessionService.fromAddress(target, { namespace: "examples" });
const userId = `buyer-${process.pid}`;
const session = await sessionService.createSession({ appName: "shop", userId });
const runner = new Runner({ appName: "shop", agent, sessionService });
for await (const event of runner.runAsync({ userId, sessionId: session.id, newMessage: { role: "user", parts: [{ text: "ship A-17" }] } })) {
  for (const part of event.content?.parts ?? []) {
    if (part.functionCall) console.log(`${event.author}: ${part.functionCall.name}(${JSON.stringify(part.functionCall.args)})`);
    else if (part.functionResponse) console.log(`${event.author}: ${part.functionResponse.name} -> ${JSON.stringify(part.functionResponse.response)}`);
    else if (part.text) console.log(`${event.author}: ${part.text}`);
  }
}

// Any process that names the session reads it back from the sidecar.
const again = StepwellSessionService.fromAddress(target, { namespace: "examples" });
const stored = await again.getSession({ appName: "shop", userId, sessionId: session.id });
console.log(`stored: ${stored.events.length} events, state ${JSON.stringify(stored.state)}`);
again.close();
sessionService.close();
