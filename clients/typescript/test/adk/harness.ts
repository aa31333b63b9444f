// What the ADK specs share: the two stores (a sidecar on SQLite and one on
// the Postgres of STEPWELL_TEST_POSTGRES_URL; without it the specs fail),
// services on a sidecar, a bounded poll and a seeded random source, and a
// normal form of ADK sessions and events for comparing them.
import { StepwellClient } from "../../src/index.js";
import { StepwellSessionService, type StepwellSessionServiceOptions } from "../../src/adk/index.js";
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

/** A value as JSON carries it: what a store keeps (no undefined fields, no symbols, no prototypes). */
export function plain<T>(value: T): T {
  return value === undefined ? value : (JSON.parse(JSON.stringify(value)) as T);
}
