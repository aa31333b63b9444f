// What the ADK specs share: the two stores (a sidecar on SQLite and one on
// the Postgres of STEPWELL_TEST_POSTGRES_URL; without it the specs fail),
// session and memory services on a sidecar, a bounded poll and a seeded
// random source, and a normal form of ADK sessions and events for comparing
// them.
import { StepwellClient } from "../../src/index.js";
import {
  StepwellMemoryService,
  StepwellSessionService,
  type StepwellMemoryServiceOptions,
  type StepwellSessionServiceOptions,
} from "../../src/adk/index.js";
import type { Sidecar } from "../sidecar.js";

export { BACKENDS, startBackend, type BackendName } from "../langgraph/backends.js";
export { rng, waitFor } from "../agents/harness.js";

/** A client of the sidecar (the caller closes it). */
export function client(sidecar: Sidecar, namespace: string): StepwellClient {
  return new StepwellClient({ target: sidecar.target, namespace, ...sidecar.connect });
}

/** A service on its own client to the sidecar (close() closes it). */
export function service(sidecar: Sidecar, namespace: string, options: StepwellSessionServiceOptions = {}): StepwellSessionService {
  return StepwellSessionService.fromAddress(sidecar.target, { namespace, ...options, ...sidecar.connect });
}

/** A memory service on its own client to the sidecar (close() closes it). */
export function memoryService(sidecar: Sidecar, namespace: string, options: StepwellMemoryServiceOptions = {}): StepwellMemoryService {
  return StepwellMemoryService.fromAddress(sidecar.target, { namespace, ...options, ...sidecar.connect });
}

/** A value as JSON carries it: what a store keeps (no undefined fields, no symbols, no prototypes). */
export function plain<T>(value: T): T {
  return value === undefined ? value : (JSON.parse(JSON.stringify(value)) as T);
}

/** A deterministic embedding: one dimension per concept (colour, pet, food), one for any other word, so that synonyms meet (xlang_memory_py.py's embedding() is the same). */
export function conceptEmbedding(text: string): number[] {
  const concepts: Record<string, number> = { colour: 0, color: 0, hue: 0, teal: 0, blue: 0, green: 0, puppy: 1, dog: 1, cat: 1, pizza: 2, pasta: 2, lunch: 2 };
  const v = [0, 0, 0, 0.1];
  for (const w of text.toLowerCase().match(/[a-z]+/g) ?? []) {
    const c = concepts[w];
    if (c === undefined) v[3]! += 0.01;
    else v[c]! += 1;
  }
  return v;
}
