// StepwellError and its subclasses, decoded from a gRPC status carrying
// google.rpc.ErrorInfo (domain "stepwell.dev") and google.rpc.BadRequest.
import { Code, ConnectError } from "@connectrpc/connect";
import {
  BadRequestSchema,
  ErrorInfoSchema,
} from "./gen/google/rpc/error_details_pb.js";
import { WaitSettledSchema, type Wait } from "./gen/stepwell/v1/waits_pb.js";

/** The ErrorInfo domain of stepwell's errors. */
export const ERROR_DOMAIN = "stepwell.dev";

const CODE_NAMES: Record<number, string> = {
  [Code.Canceled]: "CANCELLED",
  [Code.Unknown]: "UNKNOWN",
  [Code.InvalidArgument]: "INVALID_ARGUMENT",
  [Code.DeadlineExceeded]: "DEADLINE_EXCEEDED",
  [Code.NotFound]: "NOT_FOUND",
  [Code.AlreadyExists]: "ALREADY_EXISTS",
  [Code.PermissionDenied]: "PERMISSION_DENIED",
  [Code.ResourceExhausted]: "RESOURCE_EXHAUSTED",
  [Code.FailedPrecondition]: "FAILED_PRECONDITION",
  [Code.Aborted]: "ABORTED",
  [Code.OutOfRange]: "OUT_OF_RANGE",
  [Code.Unimplemented]: "UNIMPLEMENTED",
  [Code.Internal]: "INTERNAL",
  [Code.Unavailable]: "UNAVAILABLE",
  [Code.DataLoss]: "DATA_LOSS",
  [Code.Unauthenticated]: "UNAUTHENTICATED",
};

/** The gRPC name of a status code, e.g. "ALREADY_EXISTS". */
export function grpcCodeName(code: number): string {
  return CODE_NAMES[code] ?? "UNKNOWN";
}

/** One google.rpc.BadRequest field violation. */
export interface FieldViolation {
  field: string;
  description: string;
  reason: string;
}

/**
 * An error answered by the sidecar (or by the transport). `code` is the gRPC
 * status name ("ALREADY_EXISTS"), `reason` the ErrorInfo reason
 * ("CHECKPOINT_CONFLICT", "" when none), `field` the first BadRequest field
 * violation's field ("" when none), `metadata` the ErrorInfo metadata.
 */
export class StepwellError extends Error {
  readonly code: string;
  readonly grpcCode: number;
  readonly reason: string;
  readonly domain: string;
  readonly field: string;
  readonly fieldViolations: FieldViolation[];
  readonly metadata: Record<string, string>;

  constructor(
    message: string,
    init: {
      grpcCode: number;
      reason?: string;
      domain?: string;
      fieldViolations?: FieldViolation[];
      metadata?: Record<string, string>;
      cause?: unknown;
    },
  ) {
    super(message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = new.target.name;
    this.grpcCode = init.grpcCode;
    this.code = grpcCodeName(init.grpcCode);
    this.reason = init.reason ?? "";
    this.domain = init.domain ?? "";
    this.fieldViolations = init.fieldViolations ?? [];
    this.field = this.fieldViolations[0]?.field ?? "";
    this.metadata = init.metadata ?? {};
  }
}

/** ALREADY_EXISTS / CHECKPOINT_CONFLICT: same key, different content. */
export class CheckpointConflict extends StepwellError {}
/** FAILED_PRECONDITION / WORKFLOW_VERSION_MISMATCH (metadata expected_version, recorded_version). */
export class WorkflowVersionMismatch extends StepwellError {}
/** FAILED_PRECONDITION / KEY_REUSED: the key was begun with another fingerprint. */
export class KeyReused extends StepwellError {}
/** ABORTED / LEASE_LOST: the token is not the current holder's. */
export class LeaseLost extends StepwellError {}
/**
 * FAILED_PRECONDITION / IN_PROGRESS, raised by a fenced LangGraph saver
 * (`@stepwell/client/langgraph`) when another worker holds the lease of the
 * thread: the thread is being run elsewhere right now, and nothing of this
 * worker's was stored. `metadata` has `key`, `thread_id` and, when known,
 * `lease_expires_at` (RFC 3339).
 */
export class ThreadBusy extends StepwellError {
  get threadId(): string {
    return this.metadata.thread_id ?? "";
  }
  /** When the holder's lease runs out unless it is extended, if the sidecar said. */
  get leaseExpiresAt(): string | undefined {
    return this.metadata.lease_expires_at || undefined;
  }
}
/**
 * ALREADY_EXISTS / RECORD_EXISTS: a PutRecords in PUT_MODE_CREATE named an
 * address that is already taken, and nothing of the request was written.
 * `metadata` names the record (turn_id, scope, kind, id). An OpenAI Agents
 * session (`@stepwell/client/agents`) takes it as another writer's progress
 * and claims the next free ids.
 */
export class RecordExists extends StepwellError {}
/**
 * NOT_FOUND / RECORD_NOT_FOUND: a PutRecords in PUT_MODE_UPDATE named an
 * address holding no record (deleted, or never written), and nothing of the
 * request was written. `metadata` names the record (turn_id, scope, kind, id).
 */
export class RecordNotFound extends StepwellError {}
/** FAILED_PRECONDITION / NOT_ACQUIRED: Complete/Release/Extend on a key that is not held. */
export class NotAcquired extends StepwellError {}
/** ALREADY_EXISTS / RESULT_MISMATCH: Complete repeated with another result. */
export class ResultMismatch extends StepwellError {}
/** NOT_FOUND / KEY_NOT_FOUND: Get on an unknown key. */
export class KeyNotFound extends StepwellError {}
/** INVALID_ARGUMENT: a field is wrong (see `field`); nothing was stored. */
export class InvalidArgument extends StepwellError {}
/**
 * RESOURCE_EXHAUSTED / OVERLOADED: too many requests in flight or the write
 * queue is full; nothing was stored. Retried with backoff.
 */
export class Overloaded extends StepwellError {}
/**
 * RESOURCE_EXHAUSTED / MESSAGE_TOO_LARGE: the request message is over the
 * sidecar's --message-bytes-max; nothing was stored. Never retried: the same
 * request can never fit.
 */
export class MessageTooLarge extends StepwellError {
  /** The sidecar's message size limit in bytes (ErrorInfo metadata limit_bytes), if it sent one. */
  get limitBytes(): number | undefined {
    const raw = this.metadata.limit_bytes;
    const n = raw === undefined || raw === "" ? NaN : Number(raw);
    return Number.isSafeInteger(n) ? n : undefined;
  }
}
/**
 * RESOURCE_EXHAUSTED / STORE_FULL: the sidecar's disk or SQLite size cap is
 * full; nothing was stored. Reads still work; writes succeed again only after
 * an operator frees space (deletes turns), so it is not retried.
 */
export class StoreFull extends StepwellError {}
/**
 * UNAUTHENTICATED: the call carried no token, or one the sidecar does not
 * know. Never retried: the same token is refused again.
 */
export class Unauthenticated extends StepwellError {}
/**
 * PERMISSION_DENIED: the token is known but has no grant of the needed role
 * for the namespace. Never retried: only an operator's grant helps.
 */
export class PermissionDenied extends StepwellError {}
/** UNAVAILABLE: nothing was acknowledged; retry with the same key. */
export class Unavailable extends StepwellError {}
/** once(): the operation is recorded as FAILED (a permanent Release). */
export class OperationFailed extends StepwellError {}
/** NOT_FOUND / WAIT_NOT_FOUND: Await or GetWait of a wait nobody created. */
export class WaitNotFound extends StepwellError {}
/**
 * RESOURCE_EXHAUSTED / WAITS_PER_TURN: the turn holds --waits-per-turn-max
 * waits already; nothing was stored. Never retried: only deleting the turn
 * frees room.
 */
export class WaitsPerTurnExceeded extends StepwellError {}

/**
 * What the wait errors carry beyond a StepwellError's fields: the wait as the
 * sidecar last reported it.
 */
export type WaitErrorInit = ConstructorParameters<typeof StepwellError>[1] & { wait: Wait };

/** A wait that ended otherwise than the caller waited for; `wait` is how it ended (or stands). */
export class WaitError extends StepwellError {
  readonly wait: Wait;
  constructor(message: string, init: WaitErrorInit) {
    super(message, init);
    this.wait = init.wait;
  }
}

/**
 * ALREADY_EXISTS / WAIT_SETTLED: a Signal (or CancelWait) of a wait that
 * another call settled first, otherwise. `wait` is the winner: its status,
 * payload, content type and who settled it. The sidecar leaves a payload
 * over 4 KiB out of the error; the client's methods then read it with
 * GetWait, so `wait.payload` is always the winner's (`payloadOmitted` is
 * true only on an error from `raw`, decoded by toStepwellError).
 */
export class WaitSettled extends WaitError {
  readonly payloadOmitted: boolean;
  constructor(message: string, init: WaitErrorInit & { payloadOmitted?: boolean }) {
    super(message, init);
    this.payloadOmitted = init.payloadOmitted ?? false;
  }
}
/** waitForSignal(): the wait was settled EXPIRED at its expire_at, with no signal. */
export class WaitExpired extends WaitError {}
/** waitForSignal() or sleepUntil(): the wait was cancelled (CancelWait). */
export class WaitCancelled extends WaitError {}
/**
 * waitForSignal(): its `timeoutMs` passed with the wait still pending. The
 * wait stays as it is, so a later call (after a restart, say) finds it, and
 * any signal that came meanwhile.
 */
export class WaitTimeout extends WaitError {}

type ErrorClass = new (
  message: string,
  init: ConstructorParameters<typeof StepwellError>[1],
) => StepwellError;

const BY_REASON: Record<string, ErrorClass> = {
  CHECKPOINT_CONFLICT: CheckpointConflict,
  WORKFLOW_VERSION_MISMATCH: WorkflowVersionMismatch,
  KEY_REUSED: KeyReused,
  LEASE_LOST: LeaseLost,
  NOT_ACQUIRED: NotAcquired,
  RESULT_MISMATCH: ResultMismatch,
  RECORD_EXISTS: RecordExists,
  RECORD_NOT_FOUND: RecordNotFound,
  KEY_NOT_FOUND: KeyNotFound,
  OVERLOADED: Overloaded,
  MESSAGE_TOO_LARGE: MessageTooLarge,
  STORE_FULL: StoreFull,
  WAIT_NOT_FOUND: WaitNotFound,
  WAITS_PER_TURN: WaitsPerTurnExceeded,
  UNAUTHENTICATED: Unauthenticated,
  PERMISSION_DENIED: PermissionDenied,
};

const BY_CODE: Record<number, ErrorClass> = {
  [Code.InvalidArgument]: InvalidArgument,
  [Code.Unavailable]: Unavailable,
  [Code.ResourceExhausted]: Overloaded,
  // A proxy in front of the sidecar may refuse a call without an ErrorInfo.
  [Code.Unauthenticated]: Unauthenticated,
  [Code.PermissionDenied]: PermissionDenied,
};

/** Converts anything a call threw into a StepwellError (kept as is if it already is one). */
export function toStepwellError(err: unknown): StepwellError {
  if (err instanceof StepwellError) return err;
  const ce = ConnectError.from(err);
  let reason = "";
  let domain = "";
  let metadata: Record<string, string> = {};
  let fieldViolations: FieldViolation[] = [];
  try {
    const info = ce.findDetails(ErrorInfoSchema)[0];
    if (info) {
      reason = info.reason;
      domain = info.domain;
      metadata = { ...info.metadata };
    }
    for (const br of ce.findDetails(BadRequestSchema)) {
      for (const v of br.fieldViolations) {
        fieldViolations.push({ field: v.field, description: v.description, reason: v.reason });
      }
    }
  } catch {
    // undecodable details: keep code and message
  }
  const init = { grpcCode: ce.code, reason, domain, fieldViolations, metadata, cause: err };
  const settled = reason === "WAIT_SETTLED" ? waitSettledDetail(ce) : undefined;
  if (settled?.wait) return new WaitSettled(ce.rawMessage || ce.message, { ...init, wait: settled.wait, payloadOmitted: settled.payloadOmitted });
  const cls =
    (domain === ERROR_DOMAIN || domain === "" ? BY_REASON[reason] : undefined) ??
    BY_CODE[ce.code] ??
    StepwellError;
  return new cls(ce.rawMessage || ce.message, init);
}

/** The stepwell.v1.WaitSettled packed in a WAIT_SETTLED status's details, if it decodes. */
function waitSettledDetail(ce: ConnectError) {
  try {
    return ce.findDetails(WaitSettledSchema)[0];
  } catch {
    return undefined;
  }
}

/**
 * Node's codes for a connection that went away under a call: reset or
 * broken by the peer, or a session that closed or was destroyed with it.
 */
const CONNECTION_LOST_CODES = new Set([
  "ECONNRESET",
  "ECONNABORTED",
  "EPIPE",
  "ERR_HTTP2_GOAWAY_SESSION",
  "ERR_HTTP2_INVALID_SESSION",
  "ERR_HTTP2_SESSION_ERROR",
  "ERR_HTTP2_STREAM_CANCEL",
  "ERR_STREAM_PREMATURE_CLOSE",
]);

/**
 * Whether a call failed because its connection to the sidecar was lost
 * mid-call, which the client reports as UNAVAILABLE (and retries) like a
 * connection that cannot be made. The sidecar sends every status of its own
 * with an ErrorInfo, so a status with details is its answer and stays as it
 * is (e.g. CANCELLED with BODY_BROKEN_OFF); so does a call the caller aborted
 * (`callerAborted`). What is left:
 * - CANCELLED: Node ends a call's stream with CANCEL when its session closes
 *   under it (the sidecar crashed or restarted), and a proxy in between
 *   resets the stream with CANCEL when it loses the sidecar;
 * - ABORTED, INTERNAL or UNKNOWN caused by one of Node's errors for a lost
 *   connection (e.g. `read ECONNRESET`, which Connect reports as ABORTED).
 */
export function isConnectionLoss(err: ConnectError, callerAborted: boolean): boolean {
  if (callerAborted || err.details.length > 0) return false;
  if (err.code === Code.Canceled) return true;
  if (err.code !== Code.Aborted && err.code !== Code.Internal && err.code !== Code.Unknown) return false;
  const seen = new Set<unknown>();
  for (let e: unknown = err; e instanceof Error && !seen.has(e); e = e.cause) {
    seen.add(e);
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string" && CONNECTION_LOST_CODES.has(code)) return true;
  }
  return false;
}

/**
 * Whether a failed call is worth resending unchanged: UNAVAILABLE always;
 * RESOURCE_EXHAUSTED when its reason is OVERLOADED, or AWAITS (every Await
 * slot of the sidecar is taken, until some wait settles or times out), or
 * when it carries no ErrorInfo at all (e.g. from a proxy in between).
 * MESSAGE_TOO_LARGE, STORE_FULL and WAITS_PER_TURN cannot succeed on a
 * retry, nor can any other code.
 */
export function isRetryable(err: StepwellError): boolean {
  if (err.grpcCode === Code.Unavailable) return true;
  if (err.grpcCode === Code.ResourceExhausted) return err.reason === "OVERLOADED" || err.reason === "AWAITS" || err.reason === "";
  return false;
}
