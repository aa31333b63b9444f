// How LangGraph's model maps onto stepwell's records, the same way the Python
// saver (stepwell.langgraph) maps it, so both languages' threads share one
// layout in one store:
// - a checkpoint is a record of kind "checkpoint" in turn = thread_id and
//   scope = checkpoint_ns: its id, its parent's id, the serialized checkpoint
//   without channel_values, metadata as JSON, and refs naming the blob of
//   each channel version it uses;
// - a blob (kind "blob") is one channel's value at one version, id
//   `["channel", "version"]` as Python's json.dumps writes it, stored once;
// - a pending write (kind "write") is a child of its checkpoint, its id
//   `checkpoint \x1f task_path \x1f task_id \x1f idx+2^31`, so the sidecar's
//   bytewise order of children is LangGraph's writesSortKey order.
// This file builds the records and requests and turns answers back into
// CheckpointTuples; saver.ts sends them.
import type { RunnableConfig } from "@langchain/core/runnables";
import {
  TASKS,
  WRITES_IDX_MAP,
  maxChannelVersion,
  type Checkpoint,
  type CheckpointMetadata,
  type CheckpointPendingWrite,
  type CheckpointTuple,
  type ChannelVersions,
  type PendingWrite,
  type SerializerProtocol,
} from "@langchain/langgraph-checkpoint";
import { PutMode, type ListRecordsResponse, type Record as StepRecord } from "../gen/stepwell/v1/records_pb.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { RecordSchema } from "../gen/stepwell/v1/records_pb.js";
import { StepwellError } from "../errors.js";

export const CHECKPOINT_KIND = "checkpoint";
export const BLOB_KIND = "blob";
export const WRITE_KIND = "write";
/** The content type of a blob of a channel that has no value at its version. */
export const EMPTY = "empty";
/** Separates the parts of a write's id; below every printable character. */
const SEP = "\x1f";
const IDX_OFFSET = 2 ** 31;
/** The most turns, or metadata filters, one DeleteRecords carries. */
export const DELETE_BATCH_MAX = 1000;
/** The sidecar's default --page-size-max: a list limit above it is paged. */
export const PAGE_SIZE_MAX = 10_000;
/**
 * What one PutRecords carries at most by default: the sidecar's default
 * --message-bytes-max (4 MiB) less room for the request's own fields.
 */
export const REQUEST_BYTES_MAX = (4 << 20) - (64 << 10);

export type RecordInit = MessageInitShape<typeof RecordSchema>;

/** A checkpoint record with its write children and blob refs, its pieces joined. */
export type Entry = { record: StepRecord; children: StepRecord[]; refs: StepRecord[] };

/** A string as Python's json.dumps writes it (ASCII only), so both savers name a blob alike. */
function pyJsonString(s: string): string {
  return JSON.stringify(s).replace(/[\u007f-\uffff]/g, (c) => (c === "\u007f" ? c : `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`));
}

export function blobId(channel: string, version: unknown): string {
  return `[${pyJsonString(channel)}, ${pyJsonString(String(version))}]`;
}

export function writeId(checkpointId: string, taskPath: string, taskId: string, idx: number): string {
  return [checkpointId, taskPath, taskId, String(idx + IDX_OFFSET).padStart(10, "0")].join(SEP);
}

/** The parts of a config a saver reads, with LangGraph's defaults. */
export function threadOf(config: RunnableConfig): { threadId: string; ns: string; checkpointId: string } {
  const conf = config.configurable;
  if (conf === undefined || conf.thread_id === undefined || conf.thread_id === null) {
    throw new Error(`Missing "thread_id" field in "config.configurable"`);
  }
  return { threadId: String(conf.thread_id), ns: String(conf.checkpoint_ns ?? ""), checkpointId: String(conf.checkpoint_id ?? "") };
}

/** An upper bound of a record's encoded size inside a PutRecordsRequest. */
export function recordBytes(r: RecordInit): number {
  const text = (s?: string) => (s === undefined ? 0 : Buffer.byteLength(s) + 6);
  const bytes = (b?: Uint8Array) => (b === undefined ? 0 : b.length + 6);
  let n = 16 + text(r.turnId) + text(r.scope) + text(r.kind) + text(r.id) + text(r.parentId) + text(r.contentType);
  n += bytes(r.payload) + bytes(r.metadata);
  for (const ref of r.refs ?? []) n += text(ref);
  return n;
}

/** `records` in order, in runs that each fit `budget` bytes and `countMax` records (a record larger than `budget` makes a run of its own). */
export function batches(records: RecordInit[], budget: number, countMax = Infinity): RecordInit[][] {
  const runs: RecordInit[][] = [];
  let used = 0;
  for (const r of records) {
    const size = recordBytes(r);
    const last = runs[runs.length - 1];
    if (last === undefined || (last.length > 0 && (used + size > budget || last.length >= countMax))) {
      runs.push([]);
      used = 0;
    }
    runs[runs.length - 1].push(r);
    used += size;
  }
  return runs;
}

/**
 * Joins the pieces of the entries a ListRecords with split_entries cut
 * across pages: feed each page in turn; it answers the entries that page
 * completed.
 */
export class Pieces {
  open: Entry | undefined;

  feed(page: ListRecordsResponse): Entry[] {
    const done: Entry[] = [];
    for (const e of page.entries) {
      if (e.continued) {
        if (this.open === undefined) {
          throw new StepwellError("a continued entry without the entry it continues", { grpcCode: 13, reason: "PROTOCOL" });
        }
        this.open.children.push(...e.children);
        this.open.refs.push(...e.refs);
      } else {
        this.open = { record: e.record!, children: [...e.children], refs: [...e.refs] };
      }
      if (!e.cut) {
        done.push(this.open);
        this.open = undefined;
      }
    }
    return done;
  }
}

/** Encodes and decodes a saver's records with its serializer. */
export class Codec {
  constructor(private readonly serde: SerializerProtocol) {}

  /** The checkpoint record of a put (without channel values; refs to every channel version's blob). */
  async checkpoint(
    threadId: string,
    ns: string,
    parentId: string,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
  ): Promise<RecordInit> {
    const { channel_values: _values, ...stored } = checkpoint;
    const [contentType, payload] = await this.serde.dumpsTyped(stored);
    return {
      turnId: threadId,
      scope: ns,
      kind: CHECKPOINT_KIND,
      id: checkpoint.id,
      parentId,
      payload,
      contentType,
      metadata: await this.metadataBytes(metadata),
      refs: Object.entries(checkpoint.channel_versions).map(([ch, v]) => blobId(ch, v)),
      mode: PutMode.UPSERT,
    };
  }

  /** Metadata as JSON text, through the serializer when it writes JSON (as LangGraph's Postgres saver does). */
  private async metadataBytes(metadata: CheckpointMetadata): Promise<Uint8Array> {
    const [type, bytes] = await this.serde.dumpsTyped(metadata);
    return type === "json" ? bytes : new TextEncoder().encode(JSON.stringify(metadata));
  }

  /** The blobs of a put's new versions: each channel's value, or an empty blob. */
  async blobs(threadId: string, ns: string, values: Record<string, unknown>, versions: ChannelVersions): Promise<RecordInit[]> {
    return Promise.all(
      Object.entries(versions).map(async ([channel, version]) => {
        const [contentType, payload] = channel in values ? await this.serde.dumpsTyped(values[channel]) : [EMPTY, new Uint8Array()];
        return {
          turnId: threadId,
          scope: ns,
          kind: BLOB_KIND,
          id: blobId(channel, version),
          payload,
          contentType,
          mode: PutMode.INSERT_IF_ABSENT,
        };
      }),
    );
  }

  /**
   * The write records of a putWrites. With `group` set, its regular writes
   * name the group and how many writes it has: a reader counts them only
   * once all are stored (a putWrites sent in several requests).
   */
  async writes(
    threadId: string,
    ns: string,
    checkpointId: string,
    writes: PendingWrite[],
    taskId: string,
    taskPath: string,
  ): Promise<(group?: string) => RecordInit[]> {
    const encoded = await Promise.all(
      writes.map(async ([channel, value], i) => ({ channel, idx: WRITES_IDX_MAP[channel] ?? i, typed: await this.serde.dumpsTyped(value) })),
    );
    const regular = encoded.filter((w) => !(w.channel in WRITES_IDX_MAP)).length;
    return (group?: string) =>
      encoded.map(({ channel, idx, typed: [contentType, payload] }) => {
        const special = channel in WRITES_IDX_MAP;
        const meta: Record<string, unknown> = { task_id: taskId, task_path: taskPath, channel, idx };
        let id = writeId(checkpointId, taskPath, taskId, idx);
        if (group !== undefined && !special) {
          Object.assign(meta, { group, parts: regular });
          id += SEP + group;
        }
        return {
          turnId: threadId,
          scope: ns,
          kind: WRITE_KIND,
          id,
          parentId: checkpointId,
          payload,
          contentType,
          metadata: new TextEncoder().encode(JSON.stringify(meta)),
          mode: special ? PutMode.UPSERT : PutMode.INSERT_IF_ABSENT,
        };
      });
  }

  /** A checkpoint's pending writes, in the stored (writesSortKey) order; a group's only once all are stored. */
  async pendingWrites(children: StepRecord[], keep: (channel: string) => boolean = () => true): Promise<CheckpointPendingWrite[]> {
    const writes = children.map((w) => ({ w, meta: JSON.parse(new TextDecoder().decode(w.metadata)) as WriteMeta }));
    const stored = new Map<string, number>();
    for (const { meta } of writes) {
      if (meta.group !== undefined) stored.set(`${meta.task_id}\x1f${meta.group}`, (stored.get(`${meta.task_id}\x1f${meta.group}`) ?? 0) + 1);
    }
    const complete = writes.filter(
      ({ meta }) => keep(meta.channel) && (meta.group === undefined || stored.get(`${meta.task_id}\x1f${meta.group}`) === meta.parts),
    );
    return Promise.all(
      complete.map(async ({ w, meta }): Promise<CheckpointPendingWrite> => [meta.task_id, meta.channel, await this.serde.loadsTyped(w.contentType, w.payload)]),
    );
  }

  /** A blob's value. */
  value(blob: StepRecord): Promise<unknown> {
    return this.serde.loadsTyped(blob.contentType, blob.payload);
  }

  /** An entry as LangGraph's CheckpointTuple. */
  async tuple(entry: Entry): Promise<CheckpointTuple> {
    const r = entry.record;
    const loaded = (await this.serde.loadsTyped(r.contentType, r.payload)) as Checkpoint;
    const values: Record<string, unknown> = {};
    for (const blob of entry.refs) {
      if (blob.contentType === EMPTY) continue;
      const [channel] = JSON.parse(blob.id) as [string, string];
      values[channel] = await this.value(blob);
    }
    const checkpoint: Checkpoint = {
      ...loaded,
      channel_versions: loaded.channel_versions ?? {},
      versions_seen: loaded.versions_seen ?? {},
      channel_values: values,
    };
    const at = (id: string): RunnableConfig => ({ configurable: { thread_id: r.turnId, checkpoint_ns: r.scope, checkpoint_id: id } });
    return {
      config: at(r.id),
      checkpoint,
      metadata: r.metadata.length > 0 ? ((await this.serde.loadsTyped("json", r.metadata)) as CheckpointMetadata) : undefined,
      parentConfig: r.parentId ? at(r.parentId) : undefined,
      pendingWrites: await this.pendingWrites(entry.children),
    };
  }

  /**
   * A checkpoint of format version < 4 keeps its pending sends in its
   * parent's writes to the TASKS channel: they become its TASKS value, as
   * LangGraph's own savers migrate them.
   */
  async migratePendingSends(tuple: CheckpointTuple, parentWrites: StepRecord[], firstVersion: () => number | string): Promise<void> {
    const sends = (await this.pendingWrites(parentWrites)).filter(([, channel]) => channel === TASKS).map(([, , value]) => value);
    if (sends.length === 0) return;
    const cp = tuple.checkpoint;
    cp.channel_values[TASKS] = sends;
    const versions = Object.values(cp.channel_versions);
    cp.channel_versions[TASKS] = versions.length > 0 ? maxChannelVersion(...versions) : firstVersion();
  }
}

type WriteMeta = { task_id: string; task_path?: string; channel: string; idx: number; group?: string; parts?: number };

/** Whether a stored checkpoint predates format version 4 and has a parent to migrate pending sends from. */
export function needsSendsMigration(tuple: CheckpointTuple): boolean {
  return (tuple.checkpoint.v ?? 4) < 4 && tuple.parentConfig !== undefined;
}

export function chunks<T>(items: T[], size = DELETE_BATCH_MAX): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}

/** A value as JSON bytes (a metadata filter, a run id match). */
export function jsonText(value: unknown): Uint8Array {
  return new TextEncoder().encode(JSON.stringify(value));
}
