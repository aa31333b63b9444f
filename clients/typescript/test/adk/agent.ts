// The ADK agent of the specs: an LlmAgent on a fake model (a BaseLlm that
// answers by rules, never over the network) with three tools, run by ADK's
// Runner on a session service. The model's answers depend only on the
// request, so every process answers a turn alike.
//
// Rules, on the newest user text of the request:
// - "call NAME ARG": call tool NAME with {"arg": ARG}; once its response is
//   in, answer `${prefix}` + the response as JSON;
// - anything else: answer `${prefix}${text}`.
// Tools: note writes the session's "note", the user's "user:notes" (a
// count), the app's "app:last" and a "temp:scratch" key; recall answers what
// the state holds; slow prints "blocked" and waits for a gate file.
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { BaseLlm, FunctionTool, LlmAgent, Runner, type BaseLlmConnection, type BaseSessionService, type Event, type LlmRequest, type LlmResponse } from "@google/adk";

/** The newest user text of a request, and the function responses after it. */
function lastTurn(request: LlmRequest): { text: string; responses: unknown[] } {
  const contents = request.contents;
  let i = contents.length - 1;
  while (i >= 0 && !(contents[i]!.role === "user" && contents[i]!.parts?.some((p) => p.text !== undefined))) i--;
  const text = i < 0 ? "" : contents[i]!.parts!.map((p) => p.text ?? "").join("");
  const responses = contents.slice(i + 1).flatMap((c) => (c.parts ?? []).filter((p) => p.functionResponse).map((p) => p.functionResponse!.response));
  return { text, responses };
}

export class FakeLlm extends BaseLlm {
  constructor(private readonly prefix: string) {
    super({ model: "fake-model" });
  }

  async *generateContentAsync(request: LlmRequest): AsyncGenerator<LlmResponse, void> {
    const { text, responses } = lastTurn(request);
    const [verb, name, arg] = text.split(" ");
    if (verb === "call" && name && responses.length === 0) {
      const id = `fc-${createHash("sha256").update(text).digest("hex").slice(0, 12)}`;
      yield { content: { role: "model", parts: [{ functionCall: { id, name, args: { arg: arg ?? "" } } }] } };
      return;
    }
    const answer = verb === "call" ? JSON.stringify(responses[0]) : text;
    yield { content: { role: "model", parts: [{ text: `${this.prefix}${answer}` }] } };
  }

  async connect(): Promise<BaseLlmConnection> {
    throw new Error("FakeLlm does not stream");
  }
}

// The schema's types as ADK's Type enum spells them (its package, @google/genai, is ADK's dependency, not the client's).
const argSchema = { type: "OBJECT", properties: { arg: { type: "STRING" } } } as unknown as ConstructorParameters<typeof FunctionTool>[0]["parameters"];

/** The tools; `gateFile`, when given, holds slow until it exists. */
export function tools(gateFile?: string, onBlocked?: () => void) {
  const note = new FunctionTool({
    name: "note", description: "Notes an argument in the state.", parameters: argSchema,
    execute: (input: unknown, ctx) => {
      const arg = (input as { arg: string }).arg;
      ctx!.state.set("note", arg);
      ctx!.state.set("user:notes", ((ctx!.state.get<number>("user:notes")) ?? 0) + 1);
      ctx!.state.set("app:last", arg);
      ctx!.state.set("temp:scratch", arg);
      return { noted: arg };
    },
  });
  const recall = new FunctionTool({
    name: "recall", description: "Answers what the state holds.", parameters: argSchema,
    execute: (_input: unknown, ctx) => ({ note: ctx!.state.get("note") ?? null, notes: ctx!.state.get("user:notes") ?? null, last: ctx!.state.get("app:last") ?? null }),
  });
  const slow = new FunctionTool({
    name: "slow", description: "Waits for a gate.", parameters: argSchema,
    execute: async (input: unknown) => {
      onBlocked?.();
      while (gateFile && !existsSync(gateFile)) await new Promise((r) => setTimeout(r, 20));
      return { slowed: (input as { arg: string }).arg };
    },
  });
  return [note, recall, slow];
}

/** A Runner of the agent (its answers prefixed `prefix`) on `sessions`. */
export function runner(sessions: BaseSessionService, prefix: string, appName = "shop", gateFile?: string, onBlocked?: () => void): Runner {
  const agent = new LlmAgent({ name: "assistant", model: new FakeLlm(prefix), instruction: "Help.", tools: tools(gateFile, onBlocked) });
  return new Runner({ appName, agent, sessionService: sessions });
}

/** Runs one turn and answers the final text. */
export async function turn(r: Runner, userId: string, sessionId: string, text: string): Promise<string> {
  let last = "";
  for await (const event of r.runAsync({ userId, sessionId, newMessage: { role: "user", parts: [{ text }] } })) {
    const t = event.content?.parts?.map((p) => p.text ?? "").join("");
    if (t) last = t;
  }
  return last;
}

/** An event as "author:call NAME", "author:response NAME" or "author:text". */
export function shape(event: Event): string {
  const part = event.content?.parts?.[0];
  if (part?.functionCall) return `${event.author}:call ${part.functionCall.name}`;
  if (part?.functionResponse) return `${event.author}:response ${part.functionResponse.name}`;
  return `${event.author}:${event.content?.parts?.map((p) => p.text ?? "").join("")}`;
}
