// The options and inputs of StepwellClient's wait calls, and the pure
// helpers that turn them into WaitService requests and a settled wait into
// its outcome. A wait is named by (turnId, name) or by the opaque handle the
// sidecar gave it; both forms reach the same wait from any process.
import { create } from "@bufbuild/protobuf";
import type { Fence } from "./gen/stepwell/v1/records_pb.js";
import { WaitStatus, type Wait } from "./gen/stepwell/v1/waits_pb.js";
import { FenceSchema } from "./gen/stepwell/v1/records_pb.js";
import { Code } from "@connectrpc/connect";
import { WaitCancelled, WaitExpired, WaitTimeout, type WaitError } from "./errors.js";
import type { CallOptions } from "./options.js";
import type { TimeLike } from "./time.js";

/** A wait, by its turn and name, or by its handle. */
export type WaitRef = { turnId: string; name: string } | { handle: string };

/** The request fields that name a wait. */
export function refFields(ref: WaitRef): { turnId: string; name: string; handle: string } {
  if ("handle" in ref) return { turnId: "", name: "", handle: ref.handle };
  return { turnId: ref.turnId, name: ref.name, handle: "" };
}

export interface CreateWaitOptions extends CallOptions {
  /** The wait's name within its turn. Unset or "": the sidecar names it (a UUIDv7); find it again by its handle. */
  name?: string;
  /** A JSON object to keep with the wait (any JSON value given is sent as its UTF-8 JSON; bytes are sent as they are). */
  metadata?: unknown;
  /** Settle the wait EXPIRED at this time if nothing settled it before. */
  expireAt?: TimeLike;
  /** A durable timer: the store resolves the wait (with an empty payload) at this time. */
  resolveAt?: TimeLike;
}

export interface SignalWaitOptions extends CallOptions {
  /** The payload (a string is sent as UTF-8). Default empty. */
  payload?: Uint8Array | string;
  /** Optional, at most 256 bytes. */
  contentType?: string;
  /** Settle only while this lease of the idempotency service is held. */
  fence?: { key: string; leaseToken: bigint | number | string } | Fence;
}

export interface AwaitWaitOptions extends CallOptions {
  /**
   * How long the sidecar holds the call before answering with the wait
   * still pending, in ms. Unset: the sidecar's default (60 s). The call's
   * deadline (`timeoutMs`) defaults to this plus the client's timeoutMs.
   */
  waitMs?: number;
}

export interface ListWaitsInput extends CallOptions {
  turnId?: string;
  /** Only waits in this status (unset: any). */
  status?: WaitStatus;
  /** Only waits whose timer (resolve_at) is before this time. */
  resolveBefore?: TimeLike;
  pageSize?: number;
  pageToken?: string;
}

/** Options of waitForSignal() and sleepUntil(). */
export interface WaitForOptions {
  /** Namespace of the wait (overrides the client's). */
  namespace?: string;
  /** Aborts the wait (the wait itself stays as it is on the sidecar). */
  signal?: AbortSignal;
}

export interface WaitForSignalOptions extends WaitForOptions {
  /**
   * How long to wait in all, in ms, before throwing WaitTimeout with the
   * wait still pending. Unset: wait for ever.
   */
  timeoutMs?: number;
  /** Passed to the CreateWait that makes the wait (a wait that exists keeps its own). */
  metadata?: unknown;
  /** Passed to the CreateWait that makes the wait (a wait that exists keeps its own). */
  expireAt?: TimeLike;
}

/** The longest single Await of waitForSignal() and sleepUntil(): the sidecar's default long-poll. */
export const AWAIT_SLICE_MS = 60_000;

export function fenceMessage(f: SignalWaitOptions["fence"]): Fence | undefined {
  if (f === undefined) return undefined;
  return create(FenceSchema, { key: f.key, leaseToken: BigInt(f.leaseToken) });
}

function describe(w: Wait): string {
  return `wait ${JSON.stringify(w.name)} of turn ${JSON.stringify(w.turnId)}`;
}

/**
 * The error for a wait that ended without resolving (EXPIRED or
 * CANCELLED), or undefined when it resolved or is still pending.
 */
export function unresolvedError(w: Wait): WaitError | undefined {
  const metadata = { namespace: w.namespace, turn_id: w.turnId, name: w.name };
  if (w.status === WaitStatus.EXPIRED) {
    return new WaitExpired(`${describe(w)} expired`, { grpcCode: Code.FailedPrecondition, reason: "WAIT_EXPIRED", metadata, wait: w });
  }
  if (w.status === WaitStatus.CANCELLED) {
    return new WaitCancelled(`${describe(w)} was cancelled`, { grpcCode: Code.FailedPrecondition, reason: "WAIT_CANCELLED", metadata, wait: w });
  }
  return undefined;
}

/** The error of a waitForSignal() whose timeout passed; `w` is the wait, still pending. */
export function timeoutError(w: Wait, timeoutMs: number): WaitTimeout {
  return new WaitTimeout(`${describe(w)} still pending after ${timeoutMs} ms`, {
    grpcCode: Code.DeadlineExceeded,
    reason: "WAIT_TIMEOUT",
    metadata: { namespace: w.namespace, turn_id: w.turnId, name: w.name },
    wait: w,
  });
}
