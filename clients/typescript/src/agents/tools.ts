// runOnce: a function tool of the OpenAI Agents SDK whose effect runs once
// per (run, tool call), through stepwell's idempotency service. A run that is
// retried, replayed or resumed (after an approval, or in a new process after
// a crash) hands the tool the same call id again; the tool then returns the
// result recorded the first time instead of repeating the effect.
import type { OnceOptions, StepwellClient } from "../client.js";

/** What the SDK passes as a tool's third argument, as far as runOnce reads it. */
export interface ToolCallDetailsLike {
  toolCall?: { callId?: string };
}

/** The idempotency key of a tool call: "agent-tool:" + the run key + ":" + the call id. */
export function toolCallKey(runKey: string, callId: string): string {
  return `agent-tool:${runKey}:${callId}`;
}

/**
 * Wraps a tool's `execute` so its effect runs once per (runKey, tool call
 * id): the first call runs `fn` under a lease of the key and records its
 * result as JSON; every later call with the same call id (in this process or
 * any other) returns the recorded result without running `fn`. A call that
 * finds the key held by another process waits for its result (at most
 * `opts.waitTimeoutMs`). If `fn` throws, nothing is recorded and a later call
 * runs it again. `runKey` names the run: the session id, or a run id of the
 * application's, the same when the run is resumed. The result must be JSON
 * (what JSON drops, it does not return).
 *
 *     tool({ name: "charge", parameters, execute: runOnce(client, sessionId, async ({ amount }) => charge(amount)) })
 */
export function runOnce<A extends unknown[], R>(
  client: StepwellClient,
  runKey: string,
  fn: (...args: A) => R | Promise<R>,
  opts: OnceOptions = {},
): (...args: A) => Promise<R> {
  if (typeof runKey !== "string" || runKey === "") throw new TypeError("runOnce needs a non-empty runKey (the session id or a run id)");
  return async (...args: A): Promise<R> => {
    const callId = (args[2] as ToolCallDetailsLike | undefined)?.toolCall?.callId;
    if (typeof callId !== "string" || callId === "") {
      throw new TypeError("runOnce: the tool was called without a tool call id (details.toolCall.callId), so it cannot be run once");
    }
    return client.once(toolCallKey(runKey, callId), () => fn(...args), opts);
  };
}
