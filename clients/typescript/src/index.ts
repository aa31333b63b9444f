export * from "./errors.js";
export * from "./time.js";
export * from "./client.js";
export * from "./executor.js";
export * as checkpointPb from "./gen/stepwell/v1/checkpoint_pb.js";
export * as idempotencyPb from "./gen/stepwell/v1/idempotency_pb.js";
export { BeginOutcome, RecordState } from "./gen/stepwell/v1/idempotency_pb.js";
export { TurnStatus } from "./gen/stepwell/v1/checkpoint_pb.js";
export type { Checkpoint, TurnSummary } from "./gen/stepwell/v1/checkpoint_pb.js";
