// StepwellSaver: LangGraph.js's BaseCheckpointSaver on stepwell's
// RecordService. Each method is one RPC (plus, when fenced, the lease's
// Begin or Extend), unless what it carries does not fit one message: reads
// ask for the next page when the sidecar's byte budget cut one short, and a
// put whose records add up to more than requestBytesMax is sent in several
// PutRecords, the checkpoint last. records.ts has the layout; lease.ts the
// fencing.
import type { RunnableConfig } from "@langchain/core/runnables";
import {
  BaseCheckpointSaver,
  type ChannelVersions,
  type Checkpoint,
  type CheckpointListOptions,
  type CheckpointMetadata,
  type CheckpointTuple,
  type DeltaChannelHistory,
  type PendingWrite,
  type SerializerProtocol,
} from "@langchain/langgraph-checkpoint";
import { randomUUID } from "node:crypto";
import { StepwellClient, type StepwellClientOptions } from "../client.js";
import { LeaseLost, NotAcquired } from "../errors.js";
import type { CallOptions } from "../options.js";
import { PutCoalescer } from "./coalesce.js";
import { deltaHistory } from "./history.js";
import { Leases, type ThreadLease } from "./lease.js";
import {
  BLOB_KIND,
  CHECKPOINT_KIND,
  Codec,
  PAGE_SIZE_MAX,
  Pieces,
  REQUEST_BYTES_MAX,
  WRITE_KIND,
  batches,
  chunks,
  jsonText,
  recordBytes,
  needsSendsMigration,
  threadOf,
  type Entry,
  type RecordInit,
} from "./records.js";

export interface StepwellSaverOptions {
  /** The stepwell namespace of the checkpoints; default the client's. */
  namespace?: string;
  /** LangGraph's serializer; default JsonPlusSerializer. */
  serde?: SerializerProtocol;
  /** Take a lease on each thread before putting to it, and fence every put with it. Default false. */
  fenced?: boolean;
  /** The lease, in ms, when fenced or in threadLease(). Default 30000. */
  leaseMs?: number;
  /** Deadline of each call, in ms; default the client's. */
  timeoutMs?: number;
  /** The most one PutRecords carries (default 4 MiB less 64 KiB, for the sidecar's default --message-bytes-max). */
  requestBytesMax?: number;
  /** The most records one PutRecords carries (default 1000, the sidecar's default --records-per-request-max). */
  requestRecordsMax?: number;
  /**
   * The most PutRecords of this saver out at once (default 2): puts that
   * come while as many are out wait, and go together in the next one.
   */
  putsInFlightMax?: number;
}

export type PruneStrategy = "keep_latest" | "delete";

type ListInput = Parameters<StepwellClient["listRecords"]>[0];

/** A LangGraph.js checkpoint saver on a stepwell sidecar. */
export class StepwellSaver extends BaseCheckpointSaver {
  readonly client: StepwellClient;
  readonly namespace: string;
  readonly fenced: boolean;
  readonly leaseMs: number;
  private readonly requestBytesMax: number;
  private readonly requestRecordsMax: number;
  private readonly opts: CallOptions;
  private readonly codec: Codec;
  private readonly leases: Leases;
  private readonly puts: PutCoalescer;
  private ownsClient = false;

  constructor(client: StepwellClient, options: StepwellSaverOptions = {}) {
    super(options.serde);
    const leaseMs = options.leaseMs ?? 30_000;
    const requestBytesMax = options.requestBytesMax ?? REQUEST_BYTES_MAX;
    if (!(leaseMs > 0)) throw new RangeError("leaseMs must be positive");
    if (!(requestBytesMax > 0)) throw new RangeError("requestBytesMax must be positive");
    this.client = client;
    this.namespace = options.namespace ?? client.namespace;
    this.fenced = options.fenced ?? false;
    this.leaseMs = leaseMs;
    this.requestBytesMax = requestBytesMax;
    this.opts = { namespace: this.namespace, ...(options.timeoutMs === undefined ? {} : { timeoutMs: options.timeoutMs }) };
    this.codec = new Codec(this.serde);
    this.leases = new Leases(client, this.fenced, leaseMs, this.opts);
    const recordsMax = options.requestRecordsMax ?? 1000;
    this.requestRecordsMax = recordsMax;
    const inFlightMax = options.putsInFlightMax ?? 2;
    if (!(recordsMax >= 1) || !(inFlightMax >= 1)) throw new RangeError("requestRecordsMax and putsInFlightMax must be at least 1");
    const send = async (records: RecordInit[], fence?: { key: string; leaseToken: bigint }) => {
      await this.client.putRecords({ records, fence }, this.opts);
    };
    this.puts = new PutCoalescer(send, requestBytesMax, recordsMax, inFlightMax);
  }

  /**
   * A saver with a client of its own to `address` ("host:port",
   * "unix:/path"); the client options (token, tls, ...) go to the client.
   * close() releases its leases and closes the client.
   */
  static fromAddress(address: string, options: StepwellSaverOptions & Omit<StepwellClientOptions, "target" | "namespace"> = {}): StepwellSaver {
    const { namespace, serde, fenced, leaseMs, timeoutMs, requestBytesMax, requestRecordsMax, putsInFlightMax, ...clientOptions } = options;
    const client = new StepwellClient({ ...clientOptions, target: address, namespace: namespace ?? "", timeoutMs });
    const saver = new StepwellSaver(client, { namespace, serde, fenced, leaseMs, requestBytesMax, requestRecordsMax, putsInFlightMax });
    saver.ownsClient = true;
    return saver;
  }

  /** Releases the leases this saver holds; closes the client if the saver made it. */
  async close(): Promise<void> {
    await this.leases.releaseAll();
    if (this.ownsClient) this.client.close();
  }

  // ---- reads ----

  async getTuple(config: RunnableConfig): Promise<CheckpointTuple | undefined> {
    const conf = config.configurable ?? {};
    if (conf.thread_id === undefined || conf.thread_id === null) return undefined;
    const { threadId, ns, checkpointId } = threadOf(config);
    const req: ListInput = {
      turnId: threadId,
      scope: ns,
      hasScope: true,
      kind: CHECKPOINT_KIND,
      id: checkpointId,
      pageSize: 1,
      childrenKind: WRITE_KIND,
      refsKind: BLOB_KIND,
      splitEntries: true,
    };
    for await (const entries of this.pages(req)) {
      if (entries.length > 0) return (await this.tuples(entries))[0];
    }
    return undefined;
  }

  async *list(config: RunnableConfig, options: CheckpointListOptions = {}): AsyncGenerator<CheckpointTuple> {
    const { filter, before, limit } = options;
    const conf = config?.configurable ?? {};
    const req: ListInput = {
      kind: CHECKPOINT_KIND,
      childrenKind: WRITE_KIND,
      refsKind: BLOB_KIND,
      pageSize: limit ? Math.min(limit, PAGE_SIZE_MAX) : 0,
      splitEntries: true,
    };
    if (conf.thread_id !== undefined && conf.thread_id !== null && conf.thread_id !== "") req.turnId = String(conf.thread_id);
    if (conf.checkpoint_ns !== undefined && conf.checkpoint_ns !== null) Object.assign(req, { scope: String(conf.checkpoint_ns), hasScope: true });
    if (conf.checkpoint_id) req.id = String(conf.checkpoint_id);
    if (filter && Object.keys(filter).length > 0) req.metadataContains = jsonText(filter);
    const beforeId = before?.configurable?.checkpoint_id;
    if (beforeId) req.beforeId = String(beforeId);
    let remaining = limit ? limit : Infinity;
    for await (const entries of this.pages(req)) {
      for (const tuple of await this.tuples(entries)) {
        yield tuple;
        if (--remaining <= 0) return;
      }
    }
  }

  /**
   * The history a DeltaChannel rebuilds its value from: one ListRecords of
   * the thread's checkpoints up to the target, walked along the parent chain
   * here (more pages only when the byte budget cuts one).
   */
  async getDeltaChannelHistory(options: { config: RunnableConfig; channels: string[] }): Promise<Record<string, DeltaChannelHistory>> {
    if (options.channels.length === 0) return {};
    const { threadId, ns, checkpointId } = threadOf(options.config);
    const req: ListInput = {
      turnId: threadId,
      scope: ns,
      hasScope: true,
      kind: CHECKPOINT_KIND,
      // Ids up to and including the target's: ids hold no NUL, so nothing
      // sorts between an id and itself followed by \u0001.
      beforeId: checkpointId ? checkpointId + "\u0001" : "",
      childrenKind: WRITE_KIND,
      refsKind: BLOB_KIND,
      splitEntries: true,
    };
    return deltaHistory(this.pages(req), this.codec, options.channels, checkpointId);
  }

  /** The pages of a ListRecords, each as the entries it completed. */
  private async *pages(req: ListInput): AsyncGenerator<Entry[]> {
    const pieces = new Pieces();
    let pageToken = "";
    do {
      const page = await this.client.listRecords({ ...req, pageToken }, this.opts);
      yield pieces.feed(page);
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
  }

  /** Entries as tuples, checkpoints of format v < 4 given their parents' pending sends. */
  private async tuples(entries: Entry[]): Promise<CheckpointTuple[]> {
    const tuples = await Promise.all(entries.map((e) => this.codec.tuple(e)));
    for (const tuple of tuples) {
      if (!needsSendsMigration(tuple)) continue;
      const parent = tuple.parentConfig!.configurable!;
      const inPage = entries.find((e) => e.record.id === parent.checkpoint_id && e.record.turnId === parent.thread_id && e.record.scope === parent.checkpoint_ns);
      const writes = inPage?.children ?? (await this.childrenOf(parent.thread_id, parent.checkpoint_ns, parent.checkpoint_id));
      await this.codec.migratePendingSends(tuple, writes, () => this.getNextVersion(undefined));
    }
    return tuples;
  }

  /** A checkpoint's writes, without its blobs (for the pending sends of an old checkpoint's child). */
  private async childrenOf(threadId: string, ns: string, id: string): Promise<Entry["children"]> {
    const req: ListInput = { turnId: threadId, scope: ns, hasScope: true, kind: CHECKPOINT_KIND, id, pageSize: 1, childrenKind: WRITE_KIND, splitEntries: true };
    for await (const entries of this.pages(req)) if (entries.length > 0) return entries[0].children;
    return [];
  }

  // ---- writes ----

  async put(config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, newVersions: ChannelVersions): Promise<RunnableConfig> {
    if (config.configurable === undefined) throw new Error(`Missing "configurable" field in "config" param`);
    const { threadId, ns, checkpointId: parentId } = threadOf(config);
    const head = await this.codec.checkpoint(threadId, ns, parentId, checkpoint, metadata);
    const blobs = await this.codec.blobs(threadId, ns, checkpoint.channel_values ?? {}, newVersions);
    // Blobs first when they do not all fit one request: they are of versions
    // no stored checkpoint names yet, so the checkpoint appears last, with
    // every blob it uses already stored.
    let runs = batches([...blobs, head], this.requestBytesMax, this.requestRecordsMax);
    if (runs.length === 1) runs = [[head, ...blobs]];
    for (const records of runs) await this.putFenced(threadId, records);
    return { configurable: { thread_id: threadId, checkpoint_ns: ns, checkpoint_id: checkpoint.id } };
  }

  async putWrites(config: RunnableConfig, writes: PendingWrite[], taskId: string, taskPath = ""): Promise<void> {
    if (writes.length === 0) return;
    const { threadId, ns, checkpointId } = threadOf(config);
    if (!checkpointId) throw new Error(`Missing "checkpoint_id" field in "config.configurable": writes belong to a checkpoint`);
    const records = await this.codec.writes(threadId, ns, checkpointId, writes, taskId, taskPath);
    let runs = batches(records(), this.requestBytesMax, this.requestRecordsMax);
    // Several requests: the regular writes form a group a reader counts only once all are stored.
    if (runs.length > 1) runs = batches(records(randomUUID().replaceAll("-", "")), this.requestBytesMax, this.requestRecordsMax);
    for (const run of runs) await this.putFenced(threadId, run);
  }

  private async putFenced(threadId: string, records: RecordInit[]): Promise<void> {
    const lease = await this.leases.fence(threadId);
    try {
      const fence = lease ? { key: lease.key, leaseToken: lease.token } : undefined;
      await this.puts.put(records, fence, records.reduce((n, r) => n + recordBytes(r), 0));
    } catch (err) {
      if (lease && (err instanceof LeaseLost || err instanceof NotAcquired)) this.leases.refused(threadId, lease);
      throw err;
    }
  }

  /**
   * A channel's next version, as the Python saver makes it: the step count
   * zero-padded to 32 digits, then a random fraction. Blobs are stored once
   * per (channel, version), so a plain count would give a branch forked from
   * a past checkpoint the versions its original branch already used, and the
   * fork would read the original's values; the random part keeps every
   * branch's versions its own, and the padding keeps them in order.
   * LangGraph compares versions as strings when they are strings; the
   * method keeps the base class's numeric type so that graph.compile()
   * accepts the saver.
   */
  getNextVersion(current: number | undefined): number {
    const c = current as string | number | undefined;
    const count = c === undefined ? 0 : typeof c === "number" ? c : parseInt(c.split(".")[0], 10);
    return `${String(count + 1).padStart(32, "0")}.${String(Math.random()).padStart(16, "0")}` as unknown as number;
  }

  // ---- deletes and copies ----

  async deleteThread(threadId: string): Promise<void> {
    await this.client.deleteRecords({ turnIds: [String(threadId)] }, this.opts);
  }

  /** Deletes the checkpoints whose metadata names one of the runs, with their writes and the blobs no other uses. */
  async deleteForRuns(runIds: string[]): Promise<void> {
    for (const chunk of chunks(runIds.map(String))) {
      await this.client.deleteRecords(
        { kind: CHECKPOINT_KIND, metadataAny: chunk.map((r) => jsonText({ run_id: r })), childrenKind: WRITE_KIND, refsKind: BLOB_KIND },
        this.opts,
      );
    }
  }

  /** Copies every checkpoint, write and blob of one thread into another, in one commit. */
  async copyThread(sourceThreadId: string, targetThreadId: string): Promise<void> {
    await this.client.copyTurn(String(sourceThreadId), String(targetThreadId), this.opts);
  }

  /** keep_latest: keeps the newest checkpoint of each namespace of each thread; delete: deletes the threads. */
  async prune(threadIds: string[], options: { strategy?: PruneStrategy } = {}): Promise<void> {
    const strategy = options.strategy ?? "keep_latest";
    if (strategy !== "keep_latest" && strategy !== "delete") {
      throw new RangeError(`unknown prune strategy ${JSON.stringify(strategy)}: expected "keep_latest" or "delete"`);
    }
    for (const turnIds of chunks(threadIds.map(String))) {
      const req =
        strategy === "delete"
          ? { turnIds }
          : { turnIds, kind: CHECKPOINT_KIND, keepLatest: true, childrenKind: WRITE_KIND, refsKind: BLOB_KIND };
      await this.client.deleteRecords(req, this.opts);
    }
  }

  // ---- fencing ----

  /**
   * Holds the lease of a thread around fn: Begin now (ThreadBusy if another
   * worker holds it), extend it every leaseMs/3, fence every put of the
   * thread with it, and release it after, so another worker may continue the
   * thread at once. Works on any saver, fenced or not.
   */
  threadLease<T>(threadId: string, fn: (lease: ThreadLease) => Promise<T> | T): Promise<T> {
    return this.leases.hold(String(threadId), fn);
  }
}
