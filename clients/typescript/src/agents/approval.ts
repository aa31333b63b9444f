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

/** An approval decision, as the signal's JSON payload carries it. */
export interface ApprovalDecision {
  approved: boolean;
  /** On a rejection: the text the model is told instead of the tool's output. */
  message?: string;
  [key: string]: unknown;
}

/** The name of the wait a run's approval signals: "agent-approval:" + the run id. */
export function approvalWaitName(runId: string): string {
  return `agent-approval:${runId}`;
}

function ns(ref: RunRef): { namespace: string } {
  return { namespace: ref.namespace ?? "default" };
}

/**
 * Saves (or replaces) a run's state: a record of kind "agent-run-state" in
 * the session's turn, id the run id, payload state.toString(), metadata
 * {"run": the run id} (so deleteRunState can name it).
 */
export async function saveRunState(client: StepwellClient, ref: RunRef, state: RunState<any, any> | string): Promise<void> {
  const text = typeof state === "string" ? state : state.toString();
  await client.putRecords(
    {
      records: [{ turnId: checkSessionId(ref.sessionId), scope: "", kind: RUN_STATE_KIND, id: ref.runId, payload: new TextEncoder().encode(text), contentType: "application/json", metadata: jsonBytes({ run: ref.runId }), mode: PutMode.UPSERT }],
    },
    ns(ref),
  );
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

/** Deletes a run's saved state (once the run is over); a state saved without the "run" mark (by another client) stays. */
export async function deleteRunState(client: StepwellClient, ref: RunRef): Promise<void> {
  await client.deleteRecords({ turnIds: [checkSessionId(ref.sessionId)], kind: RUN_STATE_KIND, metadataAny: [jsonBytes({ run: ref.runId })] }, ns(ref));
}

/**
 * Signals a run's approval decision, as the approving service does (any
 * process, any language): true when this call settled the wait, false when
 * it repeated the same decision. A decision may come before the run waits.
 */
export function signalApproval(client: StepwellClient, ref: RunRef, decision: ApprovalDecision): Promise<boolean> {
  return client.signal(checkSessionId(ref.sessionId), approvalWaitName(ref.runId), JSON.stringify(decision), { ...ns(ref), contentType: "application/json" });
}

/**
 * Waits for a run's approval decision and returns it (at once when it came
 * already). Creates the wait if needed, so a resumed process finds it; throws
 * WaitTimeout after `opts.timeoutMs` with the wait still pending.
 */
export async function awaitApproval(client: StepwellClient, ref: RunRef, opts: Omit<WaitForSignalOptions, "namespace"> = {}): Promise<ApprovalDecision> {
  const payload = await client.waitForSignal(checkSessionId(ref.sessionId), approvalWaitName(ref.runId), { ...opts, ...ns(ref) });
  const decision = parseJsonBytes(payload) as ApprovalDecision;
  if (typeof decision?.approved !== "boolean") throw new TypeError(`approval of run ${JSON.stringify(ref.runId)}: the signal's payload has no boolean "approved"`);
  return decision;
}

/** Approves, or rejects with the decision's message, every interruption the state stopped at. */
export function applyApproval(state: RunState<any, any>, decision: ApprovalDecision): void {
  for (const item of state.getInterruptions()) {
    if (decision.approved) state.approve(item);
    else state.reject(item, decision.message === undefined ? undefined : { message: decision.message });
  }
}
