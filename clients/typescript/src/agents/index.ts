// @stepwell/client/agents: the OpenAI Agents SDK's Session on stepwell, a
// tool wrapper whose effect runs once per tool call, and the helpers that
// carry a run stopped for approval across a restart. It needs the optional
// peer dependency @openai/agents-core (which @openai/agents brings); the rest
// of the client never loads it.
export {
  ITEM_KIND,
  REQUEST_BYTES_MAX,
  REQUEST_RECORDS_MAX,
  StepwellSession,
  checkSessionId,
  itemId,
  type StepwellSessionAddressOptions,
  type StepwellSessionOptions,
} from "./session.js";
export {
  runOnce,
  toolCallKey,
  type RunContextLike,
  type RunKey,
  type RunOnceLogger,
  type RunOnceOptions,
  type RunOnceSession,
  type ToolCallDetailsLike,
} from "./tools.js";
export {
  RUN_STATE_KIND,
  applyApproval,
  approvalWaitName,
  awaitApproval,
  deleteRunState,
  loadRunState,
  saveRunState,
  signalApproval,
  type ApprovalDecision,
  type InterruptionLike,
  type RunRef,
} from "./approval.js";
export { RecordExists } from "../errors.js";
