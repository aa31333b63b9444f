// What the agent specs share: a sidecar per store (reusing the LangGraph
// specs' backends), sessions on it, a bounded poll, a seeded random source,
// and the Agents SDK set up for tests (no tracing export, no network).
import { setTracingDisabled } from "@openai/agents-core";
import { StepwellClient } from "../../src/index.js";
import { StepwellSession } from "../../src/agents/index.js";
import type { Sidecar } from "../sidecar.js";
import { logLines, waitFor } from "../processes.js";

export { logLines, waitFor };

export { BACKENDS, startBackend, type BackendName } from "../langgraph/backends.js";

// The SDK would export traces to OpenAI; tests have no network.
setTracingDisabled(true);

/** A session on its own client to the sidecar (close() closes it). */
export function session(sidecar: Sidecar, namespace: string, sessionId: string): StepwellSession {
  return StepwellSession.fromAddress(sidecar.target, { sessionId, namespace, ...sidecar.connect });
}

/** A client of the sidecar (the caller closes it). */
export function client(sidecar: Sidecar, namespace: string): StepwellClient {
  return new StepwellClient({ target: sidecar.target, namespace, ...sidecar.connect });
}


/** A small seeded random source (mulberry32), so a failing sequence can be replayed from its seed. */
export function rng(seed: number): { int(n: number): number; pick<T>(xs: readonly T[]): T } {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return { int: (n) => Math.floor(next() * n), pick: (xs) => xs[Math.floor(next() * xs.length)]! };
}

/** An item as "type:name" or "role:text", for comparing a history's shape. */
export function shape(item: any): string {
  if (item.type === "function_call" || item.type === "function_call_result") return `${item.type}:${item.name}`;
  const text = typeof item.content === "string" ? item.content : item.content.map((c: any) => c.text).join("");
  return `${item.role}:${text}`;
}
