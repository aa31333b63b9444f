// What the agent specs share: a sidecar per store (reusing the LangGraph
// specs' backends), sessions on it, a bounded poll, a seeded random source,
// and the Agents SDK set up for tests (no tracing export, no network).
import { readFileSync, existsSync } from "node:fs";
import { setTracingDisabled } from "@openai/agents-core";
import { StepwellClient } from "../../src/index.js";
import { StepwellSession } from "../../src/agents/index.js";
import type { Sidecar } from "../sidecar.js";

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

/** Polls `cond` until it holds, failing after `timeoutMs` with what it waited for. */
export async function waitFor(cond: () => boolean | Promise<boolean>, what: string, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** The lines of a side-effect log file ([] when it does not exist). */
export function logLines(file: string): string[] {
  return existsSync(file) ? readFileSync(file, "utf8").split("\n").filter((l) => l !== "") : [];
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
