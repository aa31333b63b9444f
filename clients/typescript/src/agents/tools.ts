// runOnce: a function tool of the OpenAI Agents SDK whose effect runs once
// per (session, run, tool call), through stepwell's idempotency service. A
// run that is retried, replayed or resumed (after an approval, or in a new
// process after a crash) hands the tool the same call id again; the tool then
// returns the result recorded the first time instead of repeating the effect.
import type { OnceOptions, StepwellClient } from "../client.js";
import { StepwellSession, checkSessionId } from "./session.js";

/** What the SDK passes as a tool's third argument, as far as runOnce reads it. */
export interface ToolCallDetailsLike {
  toolCall?: { callId?: string };
}

/** What the SDK passes as a tool's second argument (its RunContext), as far as runOnce reads it. */
export interface RunContextLike {
  context?: unknown;
}

/** The run key of runOnce: a string, or a function of the call's run context and details giving one. */
export type RunKey = string | ((runContext: RunContextLike | undefined, details: ToolCallDetailsLike | undefined) => string);

/** The session of runOnce's calls: a StepwellSession, a session id, or a function of the call's run context and details giving either. */
export type RunOnceSession =
  | StepwellSession
  | string
  | ((runContext: RunContextLike | undefined, details: ToolCallDetailsLike | undefined) => StepwellSession | string);

/** Where runOnce's warnings go. */
export interface RunOnceLogger {
  warn(message: string): void;
}

export interface RunOnceOptions extends OnceOptions {
  /**
   * The session the tool's calls belong to; it is part of every key, so two
   * sessions never share a recorded result, whatever call ids the model
   * repeats. Default: the StepwellSession passed as runOnce's first
   * argument, if one was. A StepwellSession also gives the namespace of the
   * keys (unless `namespace` is set).
   */
  session?: RunOnceSession;
  /** Where warnings go (its `warn`): a key that names no session, a call that waits for another holder. Default console. */
  logger?: RunOnceLogger;
}

/** `%` and `:` percent-encoded, so a component of a key can hold no separator. */
function keyPart(s: string): string {
  return s.replace(/%/g, "%25").replace(/:/g, "%3A");
}

/**
 * The idempotency key of a tool call. With a session:
 * "agent-tool:" + the session id + ":" + the run key + ":" + the call id,
 * the session id and run key with `%` and `:` percent-encoded, so no two
 * sessions share a key. Without one (the keys of earlier versions):
 * "agent-tool:" + the run key + ":" + the call id.
 */
export function toolCallKey(runKey: string, callId: string, sessionId?: string): string {
  if (sessionId === undefined) return `agent-tool:${runKey}:${callId}`;
  return `agent-tool:${keyPart(sessionId)}:${keyPart(runKey)}:${callId}`;
}

/** The call id of a tool call, from the SDK's details; a call without one cannot be run once. */
function callIdOf(details: ToolCallDetailsLike | undefined): string {
  const callId = details?.toolCall?.callId;
  if (typeof callId !== "string" || callId === "") {
    throw new TypeError("runOnce: the tool was called without a tool call id (details.toolCall.callId), so it cannot be run once");
  }
  return callId;
}

/** The run key of one call: the string, or what the function gives for the call (non-empty). */
function runKeyOf(runKey: RunKey, ctx: RunContextLike | undefined, details: ToolCallDetailsLike | undefined): string {
  const key = typeof runKey === "function" ? runKey(ctx, details) : runKey;
  if (typeof key !== "string" || key === "") throw new TypeError("runOnce: the run key function gave no run key (a non-empty string)");
  return key;
}

/** The session of one call, as an id and the StepwellSession when there is one; undefined when none was given. */
function sessionOf(
  session: RunOnceSession | undefined,
  ctx: RunContextLike | undefined,
  details: ToolCallDetailsLike | undefined,
): { id: string; session?: StepwellSession } | undefined {
  if (session === undefined) return undefined;
  const s = typeof session === "function" ? session(ctx, details) : session;
  if (s instanceof StepwellSession) return { id: s.sessionId, session: s };
  try {
    return { id: checkSessionId(s) };
  } catch (err) {
    throw new TypeError(`runOnce: the session must be a StepwellSession or a session id: ${(err as Error).message}`);
  }
}

/** Run keys already warned of (once per process each, the first 100): a key without a session. */
const warnedRunKeys = new Set<string>();

function warnUnscoped(logger: RunOnceLogger, runKey: string): void {
  if (warnedRunKeys.has(runKey) || warnedRunKeys.size >= 100) return;
  warnedRunKeys.add(runKey);
  logger.warn(
    `runOnce: the run key ${JSON.stringify(runKey)} is a fixed string and no session was given, so the key of a call cannot tell two sessions apart: ` +
      "if this tool serves more than one session, a model that repeats a call id gets another session's recorded result. " +
      "Pass the StepwellSession (as runOnce's first argument or the session option), or a run key function that names the session.",
  );
}

function warnWaiting(logger: RunOnceLogger, key: string, callId: string, leaseMs: number, leaseExpiresAt: Date | undefined): void {
  const until = leaseExpiresAt ? `runs until ${leaseExpiresAt.toISOString()} unless it is extended` : "was not said";
  logger.warn(
    `runOnce: tool call ${callId} waits for another holder of its key ${JSON.stringify(key)}, whose lease ${until}: ` +
      `if that worker died inside the tool, the call runs the tool again only once that lease runs out (this tool's lease is ${leaseMs} ms; leaseMs sets it per tool)`,
  );
}

/**
 * Wraps a tool's `execute` so its effect runs once per (session, runKey,
 * tool call id): the first call runs `fn` under a lease of the key and
 * records its result as JSON; every later call with the same call id in the
 * same session (in this process or any other) returns the recorded result
 * without running `fn`. A call that finds the key held by another process
 * waits for its result (at most `opts.waitTimeoutMs`), and warns through
 * `opts.logger` that it waits: a holder that died holds the key until its
 * lease (`opts.leaseMs`, default 30 s) runs out. If `fn` throws, nothing is
 * recorded and a later call runs it again. The result must be JSON (what
 * JSON drops, it does not return).
 *
 * `client` is a StepwellClient, or the StepwellSession of the runs (then
 * the session is part of every key, and its namespace the keys'). `runKey`
 * names the run within the session: a string, or a function of the call's
 * run context and details. `opts.session` names the session otherwise (a
 * StepwellSession, an id, or a function of the run context). Without a
 * session the key is "agent-tool:<runKey>:<call id>", as in earlier
 * versions, and a fixed runKey is warned of: it cannot tell two sessions
 * apart when the model repeats a call id.
 *
 *     tool({ name: "charge", parameters, execute: runOnce(session, "checkout", async ({ amount }) => charge(amount)) })
 */
export function runOnce<A extends unknown[], R>(
  client: StepwellClient | StepwellSession,
  runKey: RunKey,
  fn: (...args: A) => R | Promise<R>,
  opts: RunOnceOptions = {},
): (...args: A) => Promise<R> {
  if (typeof runKey === "string" ? runKey === "" : typeof runKey !== "function") {
    throw new TypeError("runOnce needs a non-empty runKey (a string, or a function of the run context)");
  }
  const { session = client instanceof StepwellSession ? client : undefined, logger = console, ...onceOpts } = opts;
  const stepwell = client instanceof StepwellSession ? client.client : client;
  if (session === undefined && typeof runKey === "string") warnUnscoped(logger, runKey);
  return async (...args: A): Promise<R> => {
    const ctx = args[1] as RunContextLike | undefined;
    const details = args[2] as ToolCallDetailsLike | undefined;
    const callId = callIdOf(details);
    const s = sessionOf(session, ctx, details);
    const key = toolCallKey(runKeyOf(runKey, ctx, details), callId, s?.id);
    return stepwell.once(key, () => fn(...args), {
      ...onceOpts,
      namespace: onceOpts.namespace ?? s?.session?.namespace,
      onInProgress: (info) => {
        warnWaiting(logger, key, callId, onceOpts.leaseMs ?? 30_000, info.leaseExpiresAt);
        onceOpts.onInProgress?.(info);
      },
    });
  };
}
