// @stepwell/client/langgraph: the LangGraph.js checkpoint saver and store. It needs
// the optional peer dependency @langchain/langgraph-checkpoint; the rest of
// the client never loads it.
export { StepwellSaver, type PruneStrategy, type StepwellSaverOptions } from "./saver.js";
export { threadLeaseKey, type ThreadLease } from "./lease.js";
export { LeaseLost, ThreadBusy } from "../errors.js";
export { StepwellStore, getTextAtPath, tokenizePath, type StepwellStoreOptions, type StoreTtlConfig } from "./store.js";
