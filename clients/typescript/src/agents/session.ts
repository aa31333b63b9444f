// StepwellSession: the OpenAI Agents SDK's Session interface on stepwell's
// RecordService, so a conversation's history outlives the process, is shared
// by every process (and language) that names the same session, and lives in
// the store that already holds the application's checkpoints and threads.
//
// The layout is shared with the Python client to the byte, so either language
// continues a session the other wrote: one record per item, in the namespace
// of the session, turn_id the session id, scope "", kind "agent-item", id the
// item's sequence number as 20 zero-padded decimal digits (so the sidecar's
// bytewise id order is the conversation's order), payload the item as UTF-8
// JSON, metadata {"u": a random 32-hex id} so that a pop deletes exactly the
// record it read. Appends claim their ids with PUT_MODE_CREATE: of two racing
// writers one wins and the other learns it, and writes after it.
import type { AgentInputItem, Session } from "@openai/agents-core";
import { randomUUID } from "node:crypto";
import { StepwellClient, jsonBytes, parseJsonBytes, type StepwellClientOptions } from "../client.js";
import { RecordExists } from "../errors.js";
import { PutMode, type Record as StoredRecord } from "../gen/stepwell/v1/records_pb.js";
import type { CallOptions } from "../options.js";

/** The record kind of a session's items. */
export const ITEM_KIND = "agent-item";
/** The most records one PutRecords carries: the sidecar's default --records-per-request-max. */
export const REQUEST_RECORDS_MAX = 1000;
/** The most bytes of records one PutRecords carries: the sidecar's default --message-bytes-max less 64 KiB for the rest. */
export const REQUEST_BYTES_MAX = 4 * 1024 * 1024 - 64 * 1024;
/** The largest page a read asks for: the sidecar's default page size. */
const PAGE_SIZE_MAX = 1000;
const ID_DIGITS = 20;

export interface StepwellSessionOptions {
  /** The session's id: the turn its items are stored under. 1..256 bytes of UTF-8 without control characters. */
  sessionId: string;
  /** The stepwell namespace of the session; default "default" (the sidecar's default namespace). */
  namespace?: string;
  /** Deadline of each call, in ms; default the client's. */
  timeoutMs?: number;
}

/** What fromAddress() takes: the session's options and the client's connection options (token, tls, ...). */
export type StepwellSessionAddressOptions = StepwellSessionOptions & Omit<StepwellClientOptions, "target" | "namespace">;

/**
 * Checks a session id as the sidecar checks a turn id, so a bad one fails
 * here, naming the session id, rather than as a store error on first use.
 */
export function checkSessionId(sessionId: unknown): string {
  if (typeof sessionId !== "string") throw new TypeError(`sessionId must be a string, got ${typeof sessionId}`);
  const bytes = Buffer.byteLength(sessionId, "utf8");
  if (bytes < 1 || bytes > 256) throw new TypeError(`sessionId must be 1..256 bytes of UTF-8, got ${bytes} bytes`);
  if (/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(sessionId)) throw new TypeError(`sessionId ${JSON.stringify(sessionId)} is not valid UTF-8 (a lone surrogate)`);
  if (/[\u0000-\u001f\u007f-\u009f]/.test(sessionId)) throw new TypeError(`sessionId ${JSON.stringify(sessionId)} must not contain control characters`);
  return sessionId;
}

/** The record id of sequence number n. */
export function itemId(n: bigint): string {
  return n.toString().padStart(ID_DIGITS, "0");
}

/** The sequence number of a record id of this layout. */
function sequenceOf(id: string): bigint {
  if (!/^[0-9]{20}$/.test(id)) throw new Error(`agent-item record id ${JSON.stringify(id)} is not 20 decimal digits`);
  return BigInt(id);
}

/** How many items a limit asks for, as the SDK's MemorySession slices: undefined, NaN and Infinity all; a fraction rounded up; <= 0 none. */
function wanted(limit: number | undefined): number {
  if (limit === undefined || Number.isNaN(limit) || limit === Infinity) return Infinity;
  return limit <= 0 ? 0 : Math.ceil(limit);
}

/** One item as it is written: its payload and the id that marks its record. */
interface Pending {
  payload: Uint8Array;
  u: string;
}

/**
 * Splits records into runs that each fit one PutRecords (an item larger than
 * that goes alone, for the sidecar to refuse). A record counts its payload,
 * its turn id and 128 bytes for its other fields (kind, id, content type,
 * mark, mode) and their framing.
 */
function requests(items: Pending[], turnIdBytes: number): Pending[][] {
  const out: Pending[][] = [];
  let run: Pending[] = [];
  let bytes = 0;
  for (const p of items) {
    const size = p.payload.length + turnIdBytes + 128;
    if (run.length > 0 && (run.length >= REQUEST_RECORDS_MAX || bytes + size > REQUEST_BYTES_MAX)) {
      out.push(run);
      run = [];
      bytes = 0;
    }
    run.push(p);
    bytes += size;
  }
  if (run.length > 0) out.push(run);
  return out;
}

/**
 * An OpenAI Agents SDK session kept in stepwell. Methods keep the semantics
 * of the SDK's MemorySession: items in order; getItems(limit) the newest
 * `limit` in chronological order; popItem() removes the newest exactly once;
 * clearSession() empties the session. It is safe under concurrency, across
 * session objects, processes and languages: two addItems racing keep both
 * batches whole and one after the other (a batch larger than one request,
 * over 1000 items or about 4 MiB, is written in several requests, each whole
 * and in order, and another writer's batch may fall between them), and two
 * popItem() never return the same item.
 *
 * Items are stored as JSON: what JSON cannot carry (undefined properties,
 * Uint8Array contents) does not come back as it was.
 *
 * The SDK's optional methods (applyHistoryMutations, applyHistoryTransaction,
 * replaceHistoryWithCompaction) are left out: the store offers no
 * compare-and-swap over a stored suffix, so they could not be atomic against
 * another writer; the runner falls back to the required methods.
 */
export class StepwellSession implements Session {
  readonly client: StepwellClient;
  readonly sessionId: string;
  readonly namespace: string;
  private readonly ownsClient: boolean;
  private readonly opts: CallOptions;

  constructor(client: StepwellClient, options: StepwellSessionOptions, ownsClient = false) {
    this.client = client;
    this.sessionId = checkSessionId(options.sessionId);
    this.namespace = options.namespace ?? "default";
    this.ownsClient = ownsClient;
    this.opts = { namespace: this.namespace, ...(options.timeoutMs === undefined ? {} : { timeoutMs: options.timeoutMs }) };
  }

  /** A session on a client of its own to `address` (close() closes it), with the client's token, TLS and other options. */
  static fromAddress(address: string, options: StepwellSessionAddressOptions): StepwellSession {
    const { sessionId, namespace, timeoutMs, ...clientOptions } = options;
    checkSessionId(sessionId);
    const client = new StepwellClient({ ...clientOptions, target: address, ...(timeoutMs === undefined ? {} : { timeoutMs }) });
    return new StepwellSession(client, { sessionId, namespace, timeoutMs }, true);
  }

  async getSessionId(): Promise<string> {
    return this.sessionId;
  }

  /** The newest `limit` items (every item when undefined), oldest first; none for limit <= 0. */
  async getItems(limit?: number): Promise<AgentInputItem[]> {
    const want = wanted(limit);
    if (want === 0) return [];
    const newestFirst: StoredRecord[] = [];
    let pageToken = "";
    do {
      const pageSize = Math.min(want - newestFirst.length, PAGE_SIZE_MAX);
      const page = await this.list(pageSize, pageToken);
      for (const e of page.entries) if (e.record && newestFirst.length < want) newestFirst.push(e.record);
      pageToken = page.nextPageToken;
    } while (pageToken !== "" && newestFirst.length < want);
    return newestFirst.reverse().map((r) => parseJsonBytes(r.payload) as AgentInputItem);
  }

  /** Appends items, in order, after every item stored before; an empty list makes no call. */
  async addItems(items: AgentInputItem[]): Promise<void> {
    if (items.length === 0) return;
    const pending = items.map((item) => ({ payload: jsonBytes(item), u: randomUUID().replaceAll("-", "") }));
    for (const run of requests(pending, Buffer.byteLength(this.sessionId, "utf8"))) await this.append(run);
  }

  /** Removes and returns the newest item, or undefined when there is none; two concurrent pops never return the same item. */
  async popItem(): Promise<AgentInputItem | undefined> {
    for (;;) {
      const newest = (await this.list(1, "")).entries[0]?.record;
      if (newest === undefined) return undefined;
      const u = markOf(newest);
      const { deleted } = await this.client.deleteRecords(
        { turnIds: [this.sessionId], kind: ITEM_KIND, metadataAny: [jsonBytes({ u })] },
        this.opts,
      );
      // Zero: another pop took this item first; the next newest is this pop's.
      if (deleted === 1n) return parseJsonBytes(newest.payload) as AgentInputItem;
    }
  }

  /** Deletes every item of the session (only its items: other records of the same turn id stay). */
  async clearSession(): Promise<void> {
    await this.client.deleteRecords({ turnIds: [this.sessionId], kind: ITEM_KIND }, this.opts);
  }

  /** Closes the client if the session made it (fromAddress); a client passed in stays open. */
  close(): void {
    if (this.ownsClient) this.client.close();
  }

  /** One page of the session's items, newest first. */
  private list(pageSize: number, pageToken: string) {
    return this.client.listRecords(
      { turnId: this.sessionId, hasScope: true, scope: "", kind: ITEM_KIND, pageSize, pageToken },
      this.opts,
    );
  }

  /** The sequence number after the newest stored item (1 for an empty session). */
  private async newestNext(): Promise<bigint> {
    const newest = (await this.list(1, "")).entries[0]?.record;
    return newest === undefined ? 1n : sequenceOf(newest.id) + 1n;
  }

  /**
   * Writes one request's items at the ids after the newest stored one, read
   * first (a remembered id could, after a clear, lie in a gap below items
   * written since), claiming them with PUT_MODE_CREATE. A refusal means
   * another writer took some of the ids: read the newest again and claim
   * past it. A refusal of a request whose
   * answer was lost and which the client sent again is recognised by the
   * first record's mark, and is success.
   */
  private async append(run: Pending[]): Promise<void> {
    for (;;) {
      const first = await this.newestNext();
      const records = run.map((p, i) => ({
        turnId: this.sessionId,
        scope: "",
        kind: ITEM_KIND,
        id: itemId(first + BigInt(i)),
        payload: p.payload,
        contentType: "application/json",
        metadata: jsonBytes({ u: p.u }),
        mode: PutMode.CREATE,
      }));
      try {
        await this.client.putRecords({ records }, this.opts);
      } catch (err) {
        if (!(err instanceof RecordExists)) throw err;
        if (!(await this.isOurs(records[0]!.id, run[0]!.u))) continue;
      }
      return;
    }
  }

  /** Whether the record at `id` is the one marked `u` (this writer's own, written by an earlier attempt). */
  private async isOurs(id: string, u: string): Promise<boolean> {
    const page = await this.client.listRecords(
      { turnId: this.sessionId, hasScope: true, scope: "", kind: ITEM_KIND, id, pageSize: 1 },
      this.opts,
    );
    const r = page.entries[0]?.record;
    return r !== undefined && markOf(r) === u;
  }
}

/** The mark ("u") of a stored item's record. */
function markOf(r: StoredRecord): string {
  const meta = r.metadata.length === 0 ? {} : (parseJsonBytes(r.metadata) as { u?: unknown });
  if (typeof meta.u !== "string") throw new Error(`agent-item record ${r.id} of session ${JSON.stringify(r.turnId)} has no "u" mark`);
  return meta.u;
}
