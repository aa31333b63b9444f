// StepwellClient: every RPC of stepwell.v1, with per-call deadlines, retries
// on UNAVAILABLE / OVERLOADED that resend the same request, errors as
// StepwellError, once() for exactly-once side effects, and signal(),
// waitForSignal() and sleepUntil() to pause a run for a person or a clock.
import { readFileSync } from "node:fs";
import * as net from "node:net";
import * as tls from "node:tls";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import type { Timestamp } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient, type Client, type Interceptor, type Transport } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import {
  CheckpointRequestSchema,
  CheckpointService,
  DeleteTurnRequestSchema,
  ListTurnsRequestSchema,
  RestoreRequestSchema,
  TurnStatus,
  type Checkpoint,
  type CheckpointResponse,
  type DeleteTurnResponse,
  type ListTurnsResponse,
  type RestoreResponse,
  type TurnSummary,
} from "./gen/stepwell/v1/checkpoint_pb.js";
import {
  BeginOutcome,
  BeginRequestSchema,
  CompleteRequestSchema,
  ExtendRequestSchema,
  GetRequestSchema,
  IdempotencyService,
  ReleaseRequestSchema,
  type BeginResponse,
  type CompleteResponse,
  type ExtendResponse,
  type GetResponse,
  type ReleaseResponse,
} from "./gen/stepwell/v1/idempotency_pb.js";
import {
  CopyTurnRequestSchema,
  DeleteRecordsRequestSchema,
  ListRecordsRequestSchema,
  PutRecordsRequestSchema,
  RecordService,
  type CopyTurnResponse,
  type DeleteRecordsResponse,
  type ListRecordsResponse,
  type PutRecordsResponse,
} from "./gen/stepwell/v1/records_pb.js";
import {
  DeleteItemsRequestSchema,
  GetItemsRequestSchema,
  ListPathsRequestSchema,
  MemoryService,
  PutItemsRequestSchema,
  SearchItemsRequestSchema,
  type DeleteItemsResponse,
  type GetItemsResponse,
  type ListPathsResponse,
  type PutItemsResponse,
  type SearchItemsResponse,
} from "./gen/stepwell/v1/memory_pb.js";
import {
  AwaitRequestSchema,
  CancelWaitRequestSchema,
  CreateWaitRequestSchema,
  GetWaitRequestSchema,
  ListWaitsRequestSchema,
  SignalRequestSchema,
  WaitService,
  WaitStatus,
  type AwaitResponse,
  type CancelWaitResponse,
  type CreateWaitResponse,
  type GetWaitResponse,
  type ListWaitsResponse,
  type SignalResponse,
  type Wait,
} from "./gen/stepwell/v1/waits_pb.js";
import {
  LeaseLost,
  OperationFailed,
  StepwellError,
  Unavailable,
  WaitSettled,
  isConnectionLoss,
  isRetryable,
  toStepwellError,
} from "./errors.js";
import {
  AWAIT_SLICE_MS,
  fenceMessage,
  refFields,
  timeoutError,
  unresolvedError,
  type AwaitWaitOptions,
  type CreateWaitOptions,
  type ListWaitsInput,
  type SignalWaitOptions,
  type WaitForOptions,
  type WaitForSignalOptions,
  type WaitRef,
} from "./waits.js";
import type { CallOptions } from "./options.js";
import { msToDuration, timestampToDate, toTimestamp, type TimeLike } from "./time.js";
import { traceContextAvailable, traceContextInterceptor } from "./tracing.js";

/** A RecordService request's fields, as create() takes them. */
export type RecordsInit<S extends Parameters<typeof create>[0]> = MessageInitShape<S>;

/** A MemoryService request's fields, as create() takes them. */
export type MemoryInit<S extends Parameters<typeof create>[0]> = MessageInitShape<S>;

export interface StepwellClientOptions {
  /** "host:port", "unix:/path/to.sock", or an "http://host:port" URL. Default "127.0.0.1:50051". */
  target?: string;
  /** Namespace of every call that does not name one. Default "" (the server's "default"). */
  namespace?: string;
  /** Deadline of each attempt of a call, in ms. Default 10000. */
  timeoutMs?: number;
  /** Attempts of a call failing with UNAVAILABLE / OVERLOADED (1 = no retry). Default 5. */
  maxAttempts?: number;
  /** First backoff between attempts, in ms; doubles up to maxBackoffMs, with jitter. Default 50. */
  initialBackoffMs?: number;
  /** Largest backoff, in ms. Default 2000. */
  maxBackoffMs?: number;
  /** Connect interceptors run on every attempt of every call (e.g. to add headers). */
  interceptors?: Interceptor[];
  /**
   * A bearer token, sent as `authorization: Bearer <token>` on every call
   * (the methods, once(), the DurableExecutor and `raw` alike). It is added
   * after the `interceptors` have run, so they never see it.
   */
  token?: string;
  /** TLS to the sidecar: options, or true for the system's roots. Default: plaintext. */
  tls?: TlsOptions | boolean;
  /**
   * Send the active span's trace context (W3C `traceparent`, and
   * `tracestate` when there is one) on every call, so the sidecar's span of
   * the call is a child of the caller's span. It takes effect only when
   * `@opentelemetry/api` is installed and an OpenTelemetry SDK has registered
   * a propagator; a header the call already has is kept. It is added after
   * the `interceptors` have run, before the token. Default true; false sends
   * no trace context.
   */
  traceContext?: boolean;
}

/**
 * TLS to the sidecar. Each of `ca`, `cert` and `key` is a path to a PEM file
 * (a string) or the PEM contents themselves (a Uint8Array, e.g. a Buffer).
 */
export interface TlsOptions {
  /** The CA bundle to trust. Default: the system's roots. */
  ca?: string | Uint8Array;
  /** A client certificate chain for mutual TLS (needs `key`). */
  cert?: string | Uint8Array;
  /** The client certificate's private key (needs `cert`). */
  key?: string | Uint8Array;
  /** The name checked against the server's certificate when it differs from the target's host. */
  serverName?: string;
}

export type { CallOptions } from "./options.js";

export interface CheckpointInput {
  turnId: string;
  phase: string;
  /** Any JSON value, sent as its UTF-8 JSON serialization (ignored when stateBytes is given). */
  state?: unknown;
  /** The state as raw UTF-8 JSON bytes, sent byte for byte. */
  stateBytes?: Uint8Array;
  timestamp: TimeLike;
  sessionId?: string;
  terminal?: boolean;
  workflowVersion?: string;
}

export interface RestoreOptions extends CallOptions {
  newestFirst?: boolean;
  phase?: string;
  expectWorkflowVersion?: string;
  /** Page size of each RPC (0 = server default). */
  pageSize?: number;
}

export interface RestorePageInput extends RestoreOptions {
  turnId: string;
  pageToken?: string;
}

export type TurnStatusName = "open" | "terminal" | "any";

export interface ListTurnsInput extends CallOptions {
  status?: TurnStatus | TurnStatusName;
  sessionId?: string;
  updatedBefore?: TimeLike;
  pageSize?: number;
  pageToken?: string;
}

export interface BeginOptions extends CallOptions {
  /** A hash of the operation's parameters (a string is sent as UTF-8). */
  fingerprint?: Uint8Array | string;
  /** Lease in ms (unset: the server default, 30 s). */
  leaseMs?: number;
  /** Retention in ms after completion or failure (unset: the server default, 7 days). */
  retentionMs?: number;
}

/** What once() passes to the function it runs. */
export interface OnceContext {
  key: string;
  leaseToken: bigint;
  attempt: number;
  /** An earlier holder's lease ran out without Complete/Release: the effect may already have happened. */
  previousLeaseExpired: boolean;
  /** Aborted when the lease is lost while fn runs (a heartbeat got LEASE_LOST / NOT_ACQUIRED). */
  signal: AbortSignal;
}

export interface OnceOptions extends BeginOptions {
  /** Lease in ms, renewed every leaseMs/3 while fn runs. Default 30000. */
  leaseMs?: number;
  /** How long to wait for another holder (IN_PROGRESS) before giving up, in ms. Default 60000. */
  waitTimeoutMs?: number;
  /**
   * Called once per call, the first time Begin finds the key held by
   * another holder (IN_PROGRESS), before once() waits: `leaseExpiresAt` is
   * when that holder's lease runs out unless it is extended. A holder that
   * died keeps the key until then.
   */
  onInProgress?: (info: { key: string; leaseExpiresAt: Date | undefined }) => void;
}

const utf8 = new TextEncoder();
const utf8d = new TextDecoder("utf-8", { fatal: true });

function toBytes(v: Uint8Array | string | undefined): Uint8Array {
  if (v === undefined) return new Uint8Array(0);
  return typeof v === "string" ? utf8.encode(v) : v;
}

/** The UTF-8 JSON bytes of a JSON value (undefined is sent as null). */
export function jsonBytes(value: unknown): Uint8Array {
  const s = JSON.stringify(value);
  return utf8.encode(s === undefined ? "null" : s);
}

/** Parses UTF-8 JSON bytes. */
export function parseJsonBytes(bytes: Uint8Array): unknown {
  return JSON.parse(utf8d.decode(bytes));
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal!.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** A wait's metadata as sent: bytes as they are, any other value as its UTF-8 JSON, nothing as empty. */
function metadataBytes(v: unknown): Uint8Array {
  if (v === undefined) return new Uint8Array(0);
  return v instanceof Uint8Array ? v : jsonBytes(v);
}

function turnStatus(s: TurnStatus | TurnStatusName | undefined): TurnStatus {
  if (s === undefined) return TurnStatus.UNSPECIFIED;
  if (typeof s === "number") return s;
  return { open: TurnStatus.OPEN, terminal: TurnStatus.TERMINAL, any: TurnStatus.ANY }[s];
}

function readPem(source: string | Uint8Array | undefined, what: string): Buffer | undefined {
  if (source === undefined) return undefined;
  if (typeof source !== "string") return Buffer.from(source);
  try {
    return readFileSync(source);
  } catch (err) {
    throw new Error(`cannot read the TLS ${what} ${JSON.stringify(source)}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`);
  }
}

/** The node TLS options of TlsOptions (files are read now). */
function tlsConnectionOptions(o: TlsOptions): tls.ConnectionOptions {
  if ((o.cert === undefined) !== (o.key === undefined)) {
    throw new TypeError("tls needs both cert and key for a client certificate, or neither");
  }
  const out: tls.ConnectionOptions = {};
  const ca = readPem(o.ca, "CA bundle");
  const cert = readPem(o.cert, "client certificate");
  const key = readPem(o.key, "client key");
  if (ca) out.ca = ca;
  if (cert) out.cert = cert;
  if (key) out.key = key;
  if (o.serverName) out.servername = o.serverName;
  return out;
}

/**
 * The interceptor that adds the bearer token. The token lives only in this
 * closure, so printing a client, its transport or an error cannot show it.
 */
export function bearerTokenInterceptor(token: string): Interceptor {
  if (typeof token !== "string" || token === "") throw new TypeError("token must be a non-empty string");
  // A header value must be visible ASCII; a newline above all would split the header.
  if (!/^[\x21-\x7e]+$/.test(token)) throw new TypeError("token must be visible ASCII without spaces");
  const value = `Bearer ${token}`;
  return (next) => async (req) => {
    req.header.set("authorization", value);
    return next(req);
  };
}

/** Transport settings beyond the target. */
export interface TransportOptions {
  interceptors?: Interceptor[];
  token?: string;
  tls?: TlsOptions | boolean;
  /** Add the active trace context to every call (see StepwellClientOptions.traceContext). Default true. */
  traceContext?: boolean;
}

/**
 * Reports a call whose connection to the sidecar was lost (see
 * isConnectionLoss) as UNAVAILABLE, so that it is retried like a connection
 * that cannot be made. As an interceptor of the transport, it covers the
 * generated clients of `raw` too.
 */
const connectionLossInterceptor: Interceptor = (next) => async (req) => {
  try {
    return await next(req);
  } catch (err) {
    if (err instanceof ConnectError && isConnectionLoss(err, req.signal.aborted)) {
      throw new ConnectError(`connection to the sidecar lost: ${err.rawMessage}`, Code.Unavailable, undefined, undefined, err);
    }
    throw err;
  }
};

/**
 * Keepalive of the client's HTTP/2 connection. Node may keep an HTTP/2
 * session over TLS open after its TCP connection was reset under it; calls
 * on it then never end. While a call is open and nothing arrives for
 * PING_INTERVAL_MS, and before a connection idle for as long is used again,
 * the client sends a PING; without an answer within PING_TIMEOUT_MS it drops
 * the session, and the call fails UNAVAILABLE (retried on a new connection)
 * before the default 10 s timeout.
 */
const PING_INTERVAL_MS = 1_000;
const PING_TIMEOUT_MS = 3_000;

/**
 * Whether a target never leaves the machine: a Unix socket, `localhost` or a
 * loopback IP. Anything the client cannot tell (a DNS name) is remote.
 */
export function isLocalTarget(target: string): boolean {
  if (target.startsWith("unix:")) return true;
  let authority = target.replace(/^https?:\/\//, "").split("/")[0];
  let host: string;
  if (authority.startsWith("[")) host = authority.slice(1, authority.indexOf("]"));
  else if (authority.split(":").length === 2) host = authority.split(":")[0];
  else host = authority;
  if (host === "localhost") return true;
  if (net.isIPv4(host)) return host.startsWith("127.");
  if (net.isIPv6(host)) {
    const v = host.toLowerCase();
    return v === "::1" || /^(0{0,4}:){7}0{0,3}1$/.test(v) || /^::ffff:127\./.test(v);
  }
  return false;
}

/** Builds a gRPC (HTTP/2) transport and its session manager for a target. */
export function createStepwellTransport(
  target: string,
  options: Interceptor[] | TransportOptions = [],
): {
  transport: Transport;
  sessionManager: Http2SessionManager;
} {
  const o: TransportOptions = Array.isArray(options) ? { interceptors: options } : options;
  const secure = o.tls === undefined || o.tls === false ? undefined : tlsConnectionOptions(o.tls === true ? {} : o.tls);
  if (o.token !== undefined && !secure && !isLocalTarget(target)) {
    // Checked before the token's own checks, and without naming it.
    throw new TypeError(`a token to ${target}, beyond loopback, needs the tls option: it is never sent in the clear`);
  }
  const scheme = secure ? "https" : "http";
  let baseUrl: string;
  let nodeOptions: import("node:http2").SecureClientSessionOptions | undefined = secure;
  if (target.startsWith("unix:")) {
    const path = target.slice("unix:".length).replace(/^\/\/(?=\/)/, "");
    // Over a Unix socket the HTTP/2 authority is "localhost".
    baseUrl = `${scheme}://localhost`;
    nodeOptions = secure
      ? {
          ...secure,
          createConnection: () =>
            tls.connect({ ...secure, path, servername: secure.servername ?? "localhost", ALPNProtocols: ["h2"] }),
        }
      : { createConnection: () => net.connect(path) };
  } else if (/^https?:\/\//.test(target)) {
    if (target.startsWith("http://") && secure) baseUrl = `https://${target.slice("http://".length)}`;
    else if (target.startsWith("https://") && !secure) throw new TypeError("an https:// target needs the tls option");
    else baseUrl = target;
  } else {
    baseUrl = `${scheme}://${target}`;
  }
  // The caller's interceptors run first, so a trace header they set is kept;
  // the token's interceptor runs last, so they never see the token.
  const interceptors = [
    connectionLossInterceptor,
    ...(o.interceptors ?? []),
    ...(traceContextAvailable && o.traceContext !== false ? [traceContextInterceptor] : []),
    ...(o.token === undefined ? [] : [bearerTokenInterceptor(o.token)]),
  ];
  const sessionManager = new Http2SessionManager(baseUrl, { pingIntervalMs: PING_INTERVAL_MS, pingTimeoutMs: PING_TIMEOUT_MS }, nodeOptions);
  const transport = createGrpcTransport({ baseUrl, sessionManager, interceptors });
  return { transport, sessionManager };
}

/**
 * A client of one stepwell sidecar. Every method throws StepwellError (or a
 * subclass named after the reason) on failure.
 */
export class StepwellClient {
  /** The generated clients, one call per RPC with no retries and ConnectError failures. */
  readonly raw: {
    checkpoints: Client<typeof CheckpointService>;
    idempotency: Client<typeof IdempotencyService>;
    waits: Client<typeof WaitService>;
    records: Client<typeof RecordService>;
    memory: Client<typeof MemoryService>;
  };
  readonly namespace: string;
  private readonly timeoutMs: number;
  private readonly maxAttempts: number;
  private readonly initialBackoffMs: number;
  private readonly maxBackoffMs: number;
  // An ES private field: printing the client must not show the TLS key the session holds.
  readonly #sessionManager: Http2SessionManager;

  constructor(options: StepwellClientOptions | string = {}) {
    const o: StepwellClientOptions = typeof options === "string" ? { target: options } : options;
    const { transport, sessionManager } = createStepwellTransport(o.target ?? "127.0.0.1:50051", {
      interceptors: o.interceptors,
      token: o.token,
      tls: o.tls,
      traceContext: o.traceContext,
    });
    this.#sessionManager = sessionManager;
    this.raw = {
      checkpoints: createClient(CheckpointService, transport),
      idempotency: createClient(IdempotencyService, transport),
      waits: createClient(WaitService, transport),
      records: createClient(RecordService, transport),
      memory: createClient(MemoryService, transport),
    };
    this.namespace = o.namespace ?? "";
    this.timeoutMs = o.timeoutMs ?? 10_000;
    this.maxAttempts = Math.max(1, o.maxAttempts ?? 5);
    this.initialBackoffMs = o.initialBackoffMs ?? 50;
    this.maxBackoffMs = o.maxBackoffMs ?? 2000;
  }

  /** Closes the HTTP/2 connection. */
  close(): void {
    this.#sessionManager.abort();
  }

  private ns(opts?: CallOptions): string {
    return opts?.namespace ?? this.namespace;
  }

  /**
   * Runs one RPC, resending the same request with backoff while the failure
   * is retryable (isRetryable: UNAVAILABLE, or RESOURCE_EXHAUSTED that is
   * OVERLOADED or has no ErrorInfo).
   */
  private async call<T>(
    opts: CallOptions | undefined,
    fn: (o: { timeoutMs: number; signal?: AbortSignal }) => Promise<T>,
  ): Promise<T> {
    const attempts = Math.max(1, opts?.maxAttempts ?? this.maxAttempts);
    const timeoutMs = opts?.timeoutMs ?? this.timeoutMs;
    let backoff = this.initialBackoffMs;
    for (let attempt = 1; ; attempt++) {
      try {
        return await fn({ timeoutMs, signal: opts?.signal });
      } catch (err) {
        const e = toStepwellError(err);
        if (!isRetryable(e) || attempt >= attempts || opts?.signal?.aborted) throw e;
        await sleep(backoff / 2 + Math.random() * (backoff / 2), opts?.signal);
        backoff = Math.min(backoff * 2, this.maxBackoffMs);
      }
    }
  }

  // ---- CheckpointService ----

  /** Appends a checkpoint; idempotent on (namespace, turnId, phase, timestamp). */
  checkpoint(input: CheckpointInput, opts?: CallOptions): Promise<CheckpointResponse> {
    const req = create(CheckpointRequestSchema, {
      namespace: this.ns(opts),
      turnId: input.turnId,
      sessionId: input.sessionId ?? "",
      phase: input.phase,
      state: input.stateBytes ?? jsonBytes(input.state),
      timestamp: toTimestamp(input.timestamp),
      terminal: input.terminal ?? false,
      workflowVersion: input.workflowVersion ?? "",
    });
    return this.call(opts, (o) => this.raw.checkpoints.checkpoint(req, o));
  }

  /** One page of a turn's checkpoints. */
  restorePage(input: RestorePageInput): Promise<RestoreResponse> {
    const req = create(RestoreRequestSchema, {
      namespace: this.ns(input),
      turnId: input.turnId,
      pageSize: input.pageSize ?? 0,
      pageToken: input.pageToken ?? "",
      newestFirst: input.newestFirst ?? false,
      phase: input.phase ?? "",
      expectWorkflowVersion: input.expectWorkflowVersion ?? "",
    });
    return this.call(input, (o) => this.raw.checkpoints.restore(req, o));
  }

  /** Every checkpoint of a turn (all pages), oldest first unless newestFirst. Unknown turn: []. */
  async restore(turnId: string, opts: RestoreOptions = {}): Promise<Checkpoint[]> {
    const out: Checkpoint[] = [];
    let pageToken = "";
    do {
      const page = await this.restorePage({ ...opts, turnId, pageToken });
      out.push(...page.checkpoints);
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
    return out;
  }

  /** The newest checkpoint of a turn, or undefined (the "load the latest snapshot" shape). */
  async latest(turnId: string, opts: Omit<RestoreOptions, "newestFirst" | "pageSize"> = {}): Promise<Checkpoint | undefined> {
    const page = await this.restorePage({ ...opts, turnId, newestFirst: true, pageSize: 1 });
    return page.checkpoints[0];
  }

  /** One page of turn summaries. */
  listTurns(input: ListTurnsInput = {}): Promise<ListTurnsResponse> {
    const req = create(ListTurnsRequestSchema, {
      namespace: this.ns(input),
      status: turnStatus(input.status),
      sessionId: input.sessionId ?? "",
      updatedBefore: input.updatedBefore === undefined ? undefined : toTimestamp(input.updatedBefore),
      pageSize: input.pageSize ?? 0,
      pageToken: input.pageToken ?? "",
    });
    return this.call(input, (o) => this.raw.checkpoints.listTurns(req, o));
  }

  /** Every turn summary matching the filters (all pages). */
  async *allTurns(input: Omit<ListTurnsInput, "pageToken"> = {}): AsyncGenerator<TurnSummary> {
    let pageToken = "";
    do {
      const page = await this.listTurns({ ...input, pageToken });
      yield* page.turns;
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
  }

  /** Deletes a turn's checkpoints; `deleted` is how many (0 for an unknown turn). */
  deleteTurn(turnId: string, opts?: CallOptions): Promise<DeleteTurnResponse> {
    const req = create(DeleteTurnRequestSchema, { namespace: this.ns(opts), turnId });
    return this.call(opts, (o) => this.raw.checkpoints.deleteTurn(req, o));
  }

  // ---- RecordService ----
  // The generic records a framework adapter keeps (the LangGraph saver's
  // checkpoints, blobs and writes). Each takes the request's fields; the
  // namespace, when not given, is the call's or the client's.

  /** Stores records in one commit, each by its mode; with a fence, only while the lease is the caller's. */
  putRecords(input: RecordsInit<typeof PutRecordsRequestSchema>, opts?: CallOptions): Promise<PutRecordsResponse> {
    const req = create(PutRecordsRequestSchema, { ...input, namespace: input.namespace ?? this.ns(opts) });
    return this.call(opts, (o) => this.raw.records.putRecords(req, o));
  }

  /** One page of records, newest first, with each one's children and refs when asked. */
  listRecords(input: RecordsInit<typeof ListRecordsRequestSchema>, opts?: CallOptions): Promise<ListRecordsResponse> {
    const req = create(ListRecordsRequestSchema, { ...input, namespace: input.namespace ?? this.ns(opts) });
    return this.call(opts, (o) => this.raw.records.listRecords(req, o));
  }

  /** Deletes turns' records, or the records of a kind matching metadata, with their children and unused refs. */
  deleteRecords(input: RecordsInit<typeof DeleteRecordsRequestSchema>, opts?: CallOptions): Promise<DeleteRecordsResponse> {
    const req = create(DeleteRecordsRequestSchema, { ...input, namespace: input.namespace ?? this.ns(opts) });
    return this.call(opts, (o) => this.raw.records.deleteRecords(req, o));
  }

  /** Copies every record of one turn into another, in one commit. */
  copyTurn(sourceTurnId: string, targetTurnId: string, opts?: CallOptions): Promise<CopyTurnResponse> {
    const req = create(CopyTurnRequestSchema, { namespace: this.ns(opts), sourceTurnId, targetTurnId });
    return this.call(opts, (o) => this.raw.records.copyTurn(req, o));
  }

  // ---- MemoryService ----
  // Long-term memory items at (namespace, path, key), as the LangGraph
  // store keeps them. Each takes the request's fields; the namespace, when
  // not given, is the call's or the client's. Every call is retried like the
  // others: PutItems and DeleteItems are idempotent, the rest are reads (a
  // refreshing read only moves expiries forward).

  /** Puts and deletes items in one commit, all or none; the later write of an item wins. */
  putItems(input: MemoryInit<typeof PutItemsRequestSchema>, opts?: CallOptions): Promise<PutItemsResponse> {
    const req = create(PutItemsRequestSchema, { ...input, namespace: input.namespace ?? this.ns(opts) });
    return this.call(opts, (o) => this.raw.memory.putItems(req, o));
  }

  /** The items found (not expired) at the addresses, each once, in the order of its first address. */
  getItems(input: MemoryInit<typeof GetItemsRequestSchema>, opts?: CallOptions): Promise<GetItemsResponse> {
    const req = create(GetItemsRequestSchema, { ...input, namespace: input.namespace ?? this.ns(opts) });
    return this.call(opts, (o) => this.raw.memory.getItems(req, o));
  }

  /** One page of the items under a path prefix matching a filter, nearest to a query vector first when one is given. */
  searchItems(input: MemoryInit<typeof SearchItemsRequestSchema>, opts?: CallOptions): Promise<SearchItemsResponse> {
    const req = create(SearchItemsRequestSchema, { ...input, namespace: input.namespace ?? this.ns(opts) });
    return this.call(opts, (o) => this.raw.memory.searchItems(req, o));
  }

  /** One page of the distinct paths holding items, matched by prefix and suffix, in label order. */
  listPaths(input: MemoryInit<typeof ListPathsRequestSchema>, opts?: CallOptions): Promise<ListPathsResponse> {
    const req = create(ListPathsRequestSchema, { ...input, namespace: input.namespace ?? this.ns(opts) });
    return this.call(opts, (o) => this.raw.memory.listPaths(req, o));
  }

  /** Deletes every item under a path prefix (empty: the namespace's whole memory); `deleted` is how many. */
  deleteItems(input: MemoryInit<typeof DeleteItemsRequestSchema>, opts?: CallOptions): Promise<DeleteItemsResponse> {
    const req = create(DeleteItemsRequestSchema, { ...input, namespace: input.namespace ?? this.ns(opts) });
    return this.call(opts, (o) => this.raw.memory.deleteItems(req, o));
  }

  // ---- WaitService ----

  /**
   * Creates a PENDING wait of a turn, or returns the one that exists
   * (`created` false): the first creation stands, whatever a repeat asks, so
   * a replayed run finds the wait and the timer it made before.
   */
  createWait(turnId: string, opts: CreateWaitOptions = {}): Promise<CreateWaitResponse> {
    const req = create(CreateWaitRequestSchema, {
      namespace: this.ns(opts),
      turnId,
      name: opts.name ?? "",
      metadata: metadataBytes(opts.metadata),
      expireAt: opts.expireAt === undefined ? undefined : toTimestamp(opts.expireAt),
      resolveAt: opts.resolveAt === undefined ? undefined : toTimestamp(opts.resolveAt),
    });
    return this.call(opts, (o) => this.raw.waits.createWait(req, o));
  }

  /**
   * Resolves a wait with a payload (the Signal RPC). `settled` is true when
   * this call settled it, false when it repeated the winning signal; a
   * different signal of a settled wait throws WaitSettled with the winner.
   * A wait nobody created yet is created resolved.
   */
  signalWait(ref: WaitRef, opts: SignalWaitOptions = {}): Promise<SignalResponse> {
    const req = create(SignalRequestSchema, {
      namespace: this.ns(opts),
      ...refFields(ref),
      payload: toBytes(opts.payload),
      contentType: opts.contentType ?? "",
      fence: fenceMessage(opts.fence),
    });
    return this.withWinner(opts, this.call(opts, (o) => this.raw.waits.signal(req, o)));
  }

  /**
   * One long-poll (the Await RPC): the wait once it is settled, or still
   * PENDING after `waitMs`. Unknown wait: WaitNotFound.
   */
  awaitWait(ref: WaitRef, opts: AwaitWaitOptions = {}): Promise<AwaitResponse> {
    const req = create(AwaitRequestSchema, {
      namespace: this.ns(opts),
      ...refFields(ref),
      timeout: opts.waitMs === undefined ? undefined : msToDuration(Math.max(1, Math.ceil(opts.waitMs))),
    });
    // The call outlives the long-poll by the client's own deadline, so a pending answer is never cut off.
    const timeoutMs = opts.timeoutMs ?? (opts.waitMs ?? AWAIT_SLICE_MS) + this.timeoutMs;
    return this.call({ ...opts, timeoutMs }, (o) => this.raw.waits.await(req, o));
  }

  /** Reads a wait. Unknown wait: WaitNotFound. */
  getWait(ref: WaitRef, opts?: CallOptions): Promise<GetWaitResponse> {
    const req = create(GetWaitRequestSchema, { namespace: this.ns(opts), ...refFields(ref) });
    return this.call(opts, (o) => this.raw.waits.getWait(req, o));
  }

  /** One page of a namespace's waits, ordered by (turnId, name). */
  listWaits(input: ListWaitsInput = {}): Promise<ListWaitsResponse> {
    const req = create(ListWaitsRequestSchema, {
      namespace: this.ns(input),
      turnId: input.turnId ?? "",
      status: input.status ?? WaitStatus.UNSPECIFIED,
      resolveBefore: input.resolveBefore === undefined ? undefined : toTimestamp(input.resolveBefore),
      pageSize: input.pageSize ?? 0,
      pageToken: input.pageToken ?? "",
    });
    return this.call(input, (o) => this.raw.waits.listWaits(req, o));
  }

  /** Every wait matching the filters (all pages). */
  async *allWaits(input: Omit<ListWaitsInput, "pageToken"> = {}): AsyncGenerator<Wait> {
    let pageToken = "";
    do {
      const page = await this.listWaits({ ...input, pageToken });
      yield* page.waits;
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
  }

  /**
   * Settles a wait CANCELLED. `cancelled` is false when it was cancelled
   * already; a wait settled otherwise throws WaitSettled with how it was.
   */
  cancelWait(ref: WaitRef, opts?: CallOptions): Promise<CancelWaitResponse> {
    const req = create(CancelWaitRequestSchema, { namespace: this.ns(opts), ...refFields(ref) });
    return this.withWinner(opts, this.call(opts, (o) => this.raw.waits.cancelWait(req, o)));
  }

  /**
   * Completes a WaitSettled whose winner's payload the sidecar left out (to
   * keep the error's trailers small) by reading the wait, so callers always
   * see the winning payload.
   */
  private async withWinner<T>(opts: CallOptions | undefined, p: Promise<T>): Promise<T> {
    try {
      return await p;
    } catch (err) {
      if (!(err instanceof WaitSettled) || !err.payloadOmitted) throw err;
      const w = err.wait;
      const full = await this.getWait({ turnId: w.turnId, name: w.name }, { ...opts, namespace: w.namespace || this.ns(opts) });
      const { grpcCode, reason, domain, fieldViolations, metadata, cause } = err;
      throw new WaitSettled(err.message, { grpcCode, reason, domain, fieldViolations, metadata, cause, wait: full.wait ?? w, payloadOmitted: false });
    }
  }

  /**
   * Signals the wait `name` of a turn with a payload (a string is sent as
   * UTF-8): true when this call settled it, false when it repeated the
   * winning signal (same payload and content type). A signal that comes
   * before its wait is kept: the wait is created resolved. Throws WaitSettled,
   * carrying the winner, when the wait was settled otherwise. A call retried
   * after a lost answer may find its own signal stored, and return false.
   */
  async signal(
    turnId: string,
    name: string,
    payload: Uint8Array | string = new Uint8Array(0),
    opts: Omit<SignalWaitOptions, "payload"> = {},
  ): Promise<boolean> {
    const r = await this.signalWait({ turnId, name }, { ...opts, payload });
    return r.settled;
  }

  /**
   * Waits for the signal of the wait `name` of a turn and returns its
   * payload. Creates the wait if needed (idempotent, so a resumed run finds
   * the wait, and a signal that came meanwhile), then long-polls it, each
   * Await at most 60 s, each retried while the sidecar is unavailable.
   * Throws WaitExpired or WaitCancelled when the wait ended so, and
   * WaitTimeout, the wait still pending, when `timeoutMs` passed.
   */
  async waitForSignal(turnId: string, name: string, opts: WaitForSignalOptions = {}): Promise<Uint8Array> {
    const deadline = opts.timeoutMs === undefined ? Infinity : Date.now() + opts.timeoutMs;
    const { wait } = await this.createWait(turnId, { ...opts, name, timeoutMs: undefined });
    const settled = await this.settledWait(wait!, opts, deadline, opts.timeoutMs ?? Infinity);
    const err = unresolvedError(settled);
    if (err) throw err;
    return settled.payload;
  }

  /**
   * A durable sleep: creates the wait `name` with a timer at `when` (the
   * first creation stands, so a resumed run keeps the original time) and
   * returns once the wait resolves, by its timer or by a signal that wakes
   * it early. A run that resumes after the timer fired returns at once; one
   * that resumes before it waits only the rest. Throws WaitCancelled when the
   * wait was cancelled.
   */
  async sleepUntil(turnId: string, name: string, when: TimeLike, opts: WaitForOptions = {}): Promise<void> {
    const { wait } = await this.createWait(turnId, { ...opts, name, resolveAt: when });
    const err = unresolvedError(await this.settledWait(wait!, opts, Infinity, Infinity));
    if (err) throw err;
  }

  /** Long-polls a wait until it is settled, or throws WaitTimeout at the deadline. */
  private async settledWait(wait: Wait, opts: WaitForOptions, deadline: number, timeoutMs: number): Promise<Wait> {
    const ref = { turnId: wait.turnId, name: wait.name };
    const callOpts = { namespace: opts.namespace, signal: opts.signal };
    let down = 0;
    while (wait.status === WaitStatus.PENDING) {
      const remaining = deadline - Date.now();
      if (remaining <= 0) throw timeoutError(wait, timeoutMs);
      let r;
      try {
        r = await this.awaitWait(ref, { ...callOpts, waitMs: Math.min(remaining, AWAIT_SLICE_MS) });
      } catch (err) {
        // The wait is in the store, not in the sidecar: a run waits through a
        // sidecar that is down or restarting for as long as its own timeout
        // allows, not only as long as one call's retries do.
        if (!(err instanceof Unavailable)) throw err;
        down = Math.min(down + 1, 16);
        const backoff = Math.min(this.initialBackoffMs * 2 ** down, this.maxBackoffMs);
        await sleep(Math.min(backoff, remaining), opts.signal);
        continue;
      }
      down = 0;
      wait = r.wait!;
    }
    return wait;
  }

  // ---- IdempotencyService ----

  /** Asks to perform the operation named by key: ACQUIRED, COMPLETED, IN_PROGRESS or FAILED. */
  begin(key: string, opts: BeginOptions = {}): Promise<BeginResponse> {
    const req = create(BeginRequestSchema, {
      namespace: this.ns(opts),
      key,
      fingerprint: toBytes(opts.fingerprint),
      lease: opts.leaseMs === undefined ? undefined : msToDuration(opts.leaseMs),
      retention: opts.retentionMs === undefined ? undefined : msToDuration(opts.retentionMs),
    });
    return this.call(opts, (o) => this.raw.idempotency.begin(req, o));
  }

  /** Records the result of an acquired operation (a string is sent as UTF-8). */
  complete(key: string, leaseToken: bigint | number | string, result: Uint8Array | string, opts?: CallOptions): Promise<CompleteResponse> {
    const req = create(CompleteRequestSchema, {
      namespace: this.ns(opts),
      key,
      leaseToken: BigInt(leaseToken),
      result: toBytes(result),
    });
    return this.call(opts, (o) => this.raw.idempotency.complete(req, o));
  }

  /** Gives up a lease: for a new attempt, or (permanent) records FAILED with the error. */
  release(
    key: string,
    leaseToken: bigint | number | string,
    opts: CallOptions & { error?: string; permanent?: boolean } = {},
  ): Promise<ReleaseResponse> {
    const req = create(ReleaseRequestSchema, {
      namespace: this.ns(opts),
      key,
      leaseToken: BigInt(leaseToken),
      error: opts.error ?? "",
      permanent: opts.permanent ?? false,
    });
    return this.call(opts, (o) => this.raw.idempotency.release(req, o));
  }

  /** Moves a held lease's expiry to now + leaseMs (unset: the server default). */
  extend(key: string, leaseToken: bigint | number | string, leaseMs?: number, opts?: CallOptions): Promise<ExtendResponse> {
    const req = create(ExtendRequestSchema, {
      namespace: this.ns(opts),
      key,
      leaseToken: BigInt(leaseToken),
      lease: leaseMs === undefined ? undefined : msToDuration(leaseMs),
    });
    return this.call(opts, (o) => this.raw.idempotency.extend(req, o));
  }

  /** Reads a record without acquiring anything. Unknown key: KeyNotFound. */
  get(key: string, opts?: CallOptions): Promise<GetResponse> {
    const req = create(GetRequestSchema, { namespace: this.ns(opts), key });
    return this.call(opts, (o) => this.raw.idempotency.get(req, o));
  }

  /**
   * Runs fn at most once to completion for key: ACQUIRED runs fn (renewing
   * the lease every leaseMs/3) and records its JSON-serialized result;
   * COMPLETED returns the recorded result without calling fn; IN_PROGRESS
   * waits (at most waitTimeoutMs) and asks again; FAILED throws
   * OperationFailed. If fn throws, the lease is released (not permanently)
   * and the error is rethrown. A holder with fn's result retries Complete
   * while the sidecar is unavailable, for as long as its lease lasts (see
   * completeWithinLease), so a sidecar restart shorter than the lease does
   * not run fn again.
   */
  async once<T>(key: string, fn: (ctx: OnceContext) => T | Promise<T>, opts: OnceOptions = {}): Promise<T> {
    const leaseMs = opts.leaseMs ?? 30_000;
    const waitTimeoutMs = opts.waitTimeoutMs ?? 60_000;
    const deadline = Date.now() + waitTimeoutMs;
    let poll = 25;
    let waited = false;
    for (;;) {
      const sentAt = performance.now();
      const r = await this.begin(key, { ...opts, leaseMs });
      switch (r.outcome) {
        case BeginOutcome.COMPLETED:
          return parseJsonBytes(r.result) as T;
        case BeginOutcome.FAILED:
          throw new OperationFailed(r.error, {
            grpcCode: Code.FailedPrecondition,
            reason: "OPERATION_FAILED",
            metadata: { key },
          });
        case BeginOutcome.ACQUIRED:
          return this.runAcquired(key, r, fn, { endsAt: sentAt + leaseMs, leaseMs }, opts);
        case BeginOutcome.IN_PROGRESS:
          if (!waited) opts.onInProgress?.({ key, leaseExpiresAt: r.leaseExpiresAt ? timestampToDate(r.leaseExpiresAt) : undefined });
          waited = true;
          await this.waitInProgress(key, r, poll, deadline, waitTimeoutMs, opts.signal);
          poll = Math.min(poll * 2, 1000);
          break;
        default:
          throw new StepwellError(`unexpected Begin outcome ${r.outcome}`, { grpcCode: Code.Internal });
      }
    }
  }

  /** Waits before once() asks again about a key another holder has: until its lease may have run out, at most `poll` ms. */
  private async waitInProgress(key: string, r: BeginResponse, poll: number, deadline: number, waitTimeoutMs: number, signal?: AbortSignal): Promise<void> {
    const now = Date.now();
    if (now >= deadline) {
      throw new StepwellError(`once(${JSON.stringify(key)}): still in progress after ${waitTimeoutMs} ms`, {
        grpcCode: Code.DeadlineExceeded,
        reason: "WAIT_TIMEOUT",
        metadata: { key },
      });
    }
    const untilExpiry = r.leaseExpiresAt ? Number(r.leaseExpiresAt.seconds) * 1000 + r.leaseExpiresAt.nanos / 1e6 - now : poll;
    await sleep(Math.max(5, Math.min(poll, untilExpiry + 5, deadline - now)), signal);
  }

  private async runAcquired<T>(
    key: string,
    r: BeginResponse,
    fn: (ctx: OnceContext) => T | Promise<T>,
    lease: HeldLease,
    opts: CallOptions,
  ): Promise<T> {
    const token = r.leaseToken;
    const lost = new AbortController();
    const stopHeartbeat = this.heartbeat(key, token, lease, lost, opts);
    let value: T;
    try {
      value = await fn({
        key,
        leaseToken: token,
        attempt: r.attempt,
        previousLeaseExpired: r.previousLeaseExpired,
        signal: lost.signal,
      });
    } catch (err) {
      stopHeartbeat();
      try {
        await this.release(key, token, { ...opts, error: String(err instanceof Error ? err.message : err).slice(0, 16_000), permanent: false });
      } catch {
        // the lease may be lost already; the original error matters more
      }
      throw err;
    }
    // The heartbeat goes on while Complete is retried: the lease is what lets this holder record the result.
    try {
      await this.completeWithinLease(key, token, jsonBytes(value), lease, opts);
    } finally {
      stopHeartbeat();
    }
    return value;
  }

  /**
   * Extends a held lease every leaseMs/3 until the returned function is
   * called. Each Extend that succeeds moves `lease.endsAt` to when it was
   * sent plus leaseMs (never later than the sidecar's own expiry); one
   * answered LEASE_LOST or NOT_ACQUIRED aborts `lost`.
   */
  private heartbeat(key: string, token: bigint, lease: HeldLease, lost: AbortController, opts: CallOptions): () => void {
    const timer = setInterval(() => {
      const sentAt = performance.now();
      this.extend(key, token, lease.leaseMs, opts).then(
        () => {
          lease.endsAt = Math.max(lease.endsAt, sentAt + lease.leaseMs);
        },
        (err: unknown) => {
          const e = toStepwellError(err);
          if (e instanceof LeaseLost || e.reason === "NOT_ACQUIRED") lost.abort(e);
        },
      );
    }, Math.max(10, Math.floor(lease.leaseMs / 3)));
    timer.unref?.();
    return () => clearInterval(timer);
  }

  /**
   * Records a holder's result with Complete. Only the holder may record it,
   * and once its lease runs out the next caller runs the effect again, so
   * a Complete that finds the sidecar unavailable, overloaded or too slow
   * (its deadline passed) is sent again, with backoff, for as long as the
   * lease lasts: through a sidecar restart shorter than the lease, the
   * effect is recorded, not repeated. Repeating a Complete with the same
   * token and result is answered OK, so an attempt whose answer was lost
   * does no harm. The caller's signal stops the retries; when the lease
   * runs out first, the last error is thrown, naming the key.
   */
  private async completeWithinLease(key: string, token: bigint, result: Uint8Array, lease: HeldLease, opts: CallOptions): Promise<void> {
    let backoff = this.initialBackoffMs;
    for (;;) {
      const remaining = lease.endsAt - performance.now();
      const attemptMs = Math.min(opts.timeoutMs ?? this.timeoutMs, remaining > 0 ? Math.ceil(remaining) : Infinity);
      try {
        await this.complete(key, token, result, { ...opts, maxAttempts: 1, timeoutMs: attemptMs });
        return;
      } catch (err) {
        const e = toStepwellError(err);
        // The caller gave up while an attempt failed: its reason, not the attempt's error.
        if (opts.signal?.aborted) throw opts.signal.reason;
        if (!(isRetryable(e) || e.grpcCode === Code.DeadlineExceeded)) throw e;
        const left = lease.endsAt - performance.now();
        if (left <= 0) throw leaseRanOut(key, e);
        await sleep(Math.min(backoff / 2 + Math.random() * (backoff / 2), left), opts.signal);
        backoff = Math.min(backoff * 2, this.maxBackoffMs);
      }
    }
  }
}

/** What once() knows of the lease it holds: when it ends at the latest (performance.now() ms), and its length. */
interface HeldLease {
  endsAt: number;
  leaseMs: number;
}

/** The error of a Complete given up when the lease ran out: the last attempt's, of the same class, naming the key. */
function leaseRanOut(key: string, e: StepwellError): StepwellError {
  const cls = e.constructor as new (message: string, init: ConstructorParameters<typeof StepwellError>[1]) => StepwellError;
  const message = `once(${JSON.stringify(key)}): the result was not recorded before the lease ran out (the effect ran; the next caller runs it again): ${e.message}`;
  return new cls(message, { grpcCode: e.grpcCode, reason: e.reason, domain: e.domain, fieldViolations: e.fieldViolations, metadata: { ...e.metadata, key }, cause: e });
}
