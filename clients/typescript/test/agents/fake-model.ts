// A fake model for the agent specs: the Agents SDK's Model interface,
// answering from the conversation it is given by rules, never over the
// network. Its answers depend only on its input, so a process that replays
// a turn (after a crash, or to resume an approved run) gets the same tool
// calls, with the same call ids, as the process before it.
//
// Rules, on the newest user message's text:
// - "call NAME ARG ..." : call the tools NAME (one after another, each once
//   its result came back), with {"arg": ARG}; then answer with their outputs;
// - "handoff": hand off to the agent's first handoff, whose model answers;
// - anything else: answer `${prefix}${text}`.
import { createHash } from "node:crypto";
import { Usage, type AgentInputItem, type Model, type ModelRequest, type ModelResponse } from "@openai/agents-core";

type Item = Record<string, any>;

/** The text of a user message item (a plain string, or its input_text parts). */
export function userText(item: Item): string {
  if (typeof item.content === "string") return item.content;
  return (item.content as Item[]).filter((c) => c.type === "input_text").map((c) => c.text).join("");
}

/** An assistant message item with one output text, as a model returns it. */
export function assistant(text: string): Item {
  return { type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text }] };
}

/** The tool calls a "call ..." message asks for, each with a call id derived from the message and its position. */
export function plannedCalls(text: string): Array<{ name: string; arg: string; callId: string }> {
  const words = text.split(" ").slice(1);
  const digest = createHash("sha256").update(text).digest("hex").slice(0, 12);
  const out = [];
  for (let i = 0; i + 1 < words.length; i += 2) out.push({ name: words[i]!, arg: words[i + 1]!, callId: `call_${digest}_${i / 2}` });
  return out;
}

export class FakeModel implements Model {
  /** How many times the model was asked, by this object. */
  calls = 0;
  constructor(private readonly prefix = "", private readonly handoffTool = "") {}

  async getResponse(request: ModelRequest): Promise<ModelResponse> {
    this.calls++;
    const input = (typeof request.input === "string" ? [{ role: "user", content: request.input }] : request.input) as Item[];
    return { usage: new Usage(), output: this.answer(input) as any, responseId: `resp_${this.calls}` };
  }

  getStreamedResponse(): AsyncIterable<any> {
    throw new Error("FakeModel does not stream");
  }

  /** The output for a conversation, by the rules above. */
  private answer(input: Item[]): Item[] {
    let lastUser = input.length - 1;
    while (lastUser >= 0 && input[lastUser]!.role !== "user") lastUser--;
    const text = lastUser < 0 ? "" : userText(input[lastUser]!);
    const since = input.slice(lastUser + 1);
    if (text.startsWith("call ")) {
      const results = since.filter((i) => i.type === "function_call_result");
      const planned = plannedCalls(text);
      const next = planned[results.length];
      if (next) return [{ type: "function_call", callId: next.callId, name: next.name, arguments: JSON.stringify({ arg: next.arg }), status: "completed" }];
      return [assistant(`${this.prefix}${results.map((r) => outputText(r.output)).join(",")}`)];
    }
    if (text === "handoff" && this.handoffTool && !since.some((i) => i.type === "function_call_result")) {
      return [{ type: "function_call", callId: "call_handoff", name: this.handoffTool, arguments: "{}", status: "completed" }];
    }
    return [assistant(`${this.prefix}${text}`)];
  }
}

function outputText(output: unknown): string {
  if (typeof output === "string") return output;
  const o = output as Item;
  return o?.type === "text" ? String(o.text) : JSON.stringify(output);
}

export type { AgentInputItem };
