// @stepwell/client/langgraph: the LangGraph.js checkpoint saver. It needs
// the optional peer dependency @langchain/langgraph-checkpoint; the rest of
// the client never loads it.
export { StepwellSaver, type PruneStrategy, type StepwellSaverOptions } from "./saver.js";
export { threadLeaseKey, type ThreadLease } from "./lease.js";
export { LeaseLost, ThreadBusy } from "../errors.js";
