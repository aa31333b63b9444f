// Approval across a restart for the OpenAI Agents SDK: a run that stopped at
// a tool needing approval keeps its RunState (the SDK's own serialization) in
// stepwell, under the session it belongs to, and the process may exit; the
// approval comes from another service as the signal of a stepwell wait; a new
// process loads the state, applies the decision and resumes the run. With the
// tool wrapped in runOnce, its effect still runs once if that process dies too.
import type { RunState } from "@openai/agents-core";
import type { StepwellClient } from "../client.js";
import { jsonBytes, parseJsonBytes } from "../client.js";
import { PutMode } from "../gen/stepwell/v1/records_pb.js";
import type { WaitForSignalOptions } from "../waits.js";
import { checkSessionId } from "./session.js";

/** The record kind of saved run states. */
export const RUN_STATE_KIND = "agent-run-state";

/** Where a run's state and approval live: the session (the turn), the run id the application chose, and the namespace. */
export interface RunRef {
  sessionId: string;
  runId: string;
  /** Default "default", as StepwellSession's. */
  namespace?: string;
}

/** An approval decision, as the signal's JSON payload carries it: approved only when `approved` is true. */
export interface ApprovalDecision {
  approved?: boolean;
  /** On a rejection: the text the model is told instead of the tool's output. */
  message?: string;
  [key: string]: unknown;
}

/** An interruption of a run (the SDK's RunToolApprovalItem), as far as these helpers read it. */
export interface InterruptionLike {
  rawItem: unknown;
}

/** The tool call id of an interruption, or the call id itself. */
function callIdOf(interruption: InterruptionLike | string): string {
  if (typeof interruption === "string") return interruption;
  const raw = interruption.rawItem as { callId?: unknown; id?: unknown } | undefined;
  if (typeof raw?.callId !== "string" || raw.callId === "") throw new TypeError("the interruption has no tool call id");
  return raw.callId;
}

/** The name of the wait that decides one interruption of a run: "approval:<run id>:<tool call id>" (as the Python client names it). */
export function approvalWaitName(runId: string, interruption: InterruptionLike | string): string {
  return `approval:${runId}:${callIdOf(interruption)}`;
}

function ns(ref: RunRef): { namespace: string } {
  return { namespace: ref.namespace ?? "default" };
}

/**
 * Saves (or replaces) a run's state: a record of kind "agent-run-state" in
 * the session's turn, id the run id, payload state.toString(), metadata
 * {"run_id": the run id} (so deleteRunState can name it), as the Python
 * client saves one; either language loads the other's record, though each
 * SDK reads only its own RunState format.
 */
export async function saveRunState(client: StepwellClient, ref: RunRef, state: RunState<any, any> | string): Promise<void> {
  const text = typeof state === "string" ? state : state.toString();
  const record = {
    turnId: checkSessionId(ref.sessionId),
    scope: "",
    kind: RUN_STATE_KIND,
    id: ref.runId,
    payload: new TextEncoder().encode(text),
    contentType: "application/json",
    metadata: jsonBytes({ run_id: ref.runId }),
    mode: PutMode.UPSERT,
  };
  await client.putRecords({ records: [record] }, ns(ref));
}

/** The saved state of a run, as RunState.fromString(agent, it) takes it, or undefined when none is saved. */
export async function loadRunState(client: StepwellClient, ref: RunRef): Promise<string | undefined> {
  const page = await client.listRecords(
    { turnId: checkSessionId(ref.sessionId), hasScope: true, scope: "", kind: RUN_STATE_KIND, id: ref.runId, pageSize: 1 },
    ns(ref),
  );
  const r = page.entries[0]?.record;
  return r === undefined ? undefined : new TextDecoder("utf-8", { fatal: true }).decode(r.payload);
}

/** Deletes a run's saved state (once the run is over). */
export async function deleteRunState(client: StepwellClient, ref: RunRef): Promise<void> {
  // DeleteRecords selects by metadata, not by id: the state carries its run id in its metadata for this.
  await client.deleteRecords({ turnIds: [checkSessionId(ref.sessionId)], kind: RUN_STATE_KIND, metadataAny: [jsonBytes({ run_id: ref.runId })] }, ns(ref));
}

/**
 * Signals the decision on one interruption of a run, as the approving
 * service does (any process, any language): true when this call settled the
 * wait, false when it repeated the same decision. A decision may come before
 * anyone waits for it; it is kept.
 */
export function signalApproval(client: StepwellClient, ref: RunRef, interruption: InterruptionLike | string, decision: ApprovalDecision): Promise<boolean> {
  const name = approvalWaitName(ref.runId, interruption);
  return client.signal(checkSessionId(ref.sessionId), name, JSON.stringify(decision), { ...ns(ref), contentType: "application/json" });
}

/**
 * Waits for the decision on one interruption of a run and returns it (at
 * once when it came already). Creates the wait if needed, so a resumed
 * process finds it; throws WaitTimeout after `opts.timeoutMs` with the wait
 * still pending.
 */
export async function awaitApproval(
  client: StepwellClient,
  ref: RunRef,
  interruption: InterruptionLike | string,
  opts: Omit<WaitForSignalOptions, "namespace"> = {},
): Promise<ApprovalDecision> {
  const name = approvalWaitName(ref.runId, interruption);
  const payload = await client.waitForSignal(checkSessionId(ref.sessionId), name, { ...opts, ...ns(ref) });
  const decision = payload.length === 0 ? {} : parseJsonBytes(payload);
  if (decision === null || typeof decision !== "object" || Array.isArray(decision)) {
    throw new TypeError(`the approval signal of ${JSON.stringify(name)} is not a JSON object`);
  }
  return decision as ApprovalDecision;
}

/** Approves the interruption when decision.approved is true, else rejects it (telling the model decision.message, when given); returns whether it approved. */
export function applyApproval(state: RunState<any, any>, interruption: Parameters<RunState<any, any>["approve"]>[0], decision: ApprovalDecision): boolean {
  if (decision.approved === true) {
    state.approve(interruption);
    return true;
  }
  state.reject(interruption, typeof decision.message === "string" ? { message: decision.message } : undefined);
  return false;
}
