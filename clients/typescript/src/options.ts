// The options every call of the client takes, in a module of their own so
// that the client and the modules it is built from (waits.ts) share them
// without importing each other.

/** Per-call options. */
export interface CallOptions {
  /** Namespace of this call (overrides the client's). */
  namespace?: string;
  /** Deadline of each attempt, in ms (overrides the client's). */
  timeoutMs?: number;
  /** Attempts on UNAVAILABLE / OVERLOADED (overrides the client's). */
  maxAttempts?: number;
  /** Aborts the call. */
  signal?: AbortSignal;
}
