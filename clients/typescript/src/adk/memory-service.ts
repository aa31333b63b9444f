// StepwellMemoryService: Google ADK's BaseMemoryService on stepwell's
// MemoryService, so what a user's past sessions said outlives the process
// and is shared by every process, and by the Python client's
// stepwell.adk.StepwellMemoryService, in the layout of
// docs/decisions/0047-adk-memory-layout.md: a session's memories (its
// events with content) at ("adk", app, user, "s", session), keyed by event
// id, names percent-encoded as layout.ts's quoteName; ids Python deleted
// are tombstoned at ("adk-deleted", app, user) and never come back. Adding
// a session is one PutItems that replaces that session's memories.
// searchMemory answers as ADK's InMemoryMemoryService does (the query split
// on white space, an event's [A-Za-z]+ words, any word matches, every match
// in memory order), scoped by (app, user) without its "app/user" key
// collisions and with sessions in the order they were first added (the
// in-memory service lists integer-like session ids first, an artifact of
// JavaScript objects not copied here). Where it differs, as the Python
// service does: an event id is kept once per session (its first
// occurrence), and a session with nothing to keep stores nothing, so it
// takes its place in the order when it first has a memory. With an
// embedder, every memory with text has a vector (re-embedded at each add),
// and searchMemory finds memories by meaning in the sidecar, best first.
import type { BaseMemoryService, Event, MemoryEntry, SearchMemoryRequest, SearchMemoryResponse, Session } from "@google/adk";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { StepwellClient, jsonBytes, parseJsonBytes, type StepwellClientOptions } from "../client.js";
import type { MemoryItem, MemoryWriteSchema } from "../gen/stepwell/v1/memory_pb.js";
import type { CallOptions } from "../options.js";
import { msToDuration } from "../time.js";
import { msOf, quoteName } from "./layout.js";

type WriteInit = MessageInitShape<typeof MemoryWriteSchema>;

/** The root label of memories, and that of Python's tombstones of deleted memory ids. */
export const MEMORY_ROOT = "adk";
export const TOMBSTONE_ROOT = "adk-deleted";
/** The label of the sessions' memories under a user, and that of direct memories (Python's add_memory). */
export const SESSIONS_LABEL = "s";
export const DIRECT_LABEL = "m";
/** MemoryService's limits on a label and a key, in bytes of UTF-8. */
export const LABEL_BYTES_MAX = 256;
export const KEY_BYTES_MAX = 1024;
/** The sidecar's default --memory-items-per-request-max and --memory-search-results-max. */
const WRITES_PER_REQUEST_MAX = 1000;
const PAGE_MAX = 1000;
/** At most this many memories a search by meaning answers, unless the limit option says otherwise. */
const MEANING_LIMIT_DEFAULT = 10;
/** The filter of memories with text: those without never match a word, nor have a vector. */
const WITH_TEXT = jsonBytes({ text: { $ne: "" } });

/** Texts to their embeddings, one vector per text, in order. */
export type MemoryEmbedder = (texts: string[]) => number[][] | Promise<number[][]>;

export interface StepwellMemoryServiceOptions {
  /** The stepwell namespace of the memories; default "default". */
  namespace?: string;
  /** Deadline of each call, in ms; default the client's. */
  timeoutMs?: number;
  /** Embeds memories' texts and queries: searchMemory then searches by meaning in the sidecar. */
  embed?: MemoryEmbedder;
  /** At most this many memories a search answers; default every match (words), 10 (meaning). */
  limit?: number;
  /** Memories added expire this many seconds after they were (last) added; default never. */
  ttlSeconds?: number;
}

/** What fromAddress() takes: the service's options and the client's connection options (token, tls, ...). */
export type StepwellMemoryServiceAddressOptions = StepwellMemoryServiceOptions & Omit<StepwellClientOptions, "target" | "namespace">;

/** A stored memory's value (docs/decisions/0047-adk-memory-layout.md). */
export interface MemoryValue {
  id: string;
  author?: string;
  /** Seconds since the epoch. */
  timestamp?: number;
  content: Record<string, unknown>;
  text: string;
  place: number;
  session?: string;
  custom_metadata?: Record<string, unknown>;
}

/** `name` as a label (or key, at most `max` bytes) of the layout: quoteName's encoding, the empty name "%"; too long a name is refused. */
export function memoryLabel(name: string, what: string, max = LABEL_BYTES_MAX): string {
  const label = name === "" ? "%" : quoteName(name);
  const bytes = Buffer.byteLength(label, "utf8");
  if (bytes > max) {
    throw new RangeError(`${what} ${JSON.stringify(name)} is too long for stepwell memory: ${bytes} bytes percent-encoded, at most ${max}`);
  }
  return label;
}

/** The path of a user's memories, the prefix every search reads. */
export const userPath = (app: string, user: string): string[] => [MEMORY_ROOT, memoryLabel(app, "app name"), memoryLabel(user, "user id")];
/** The path of one session's memories. */
export const sessionPath = (app: string, user: string, session: string): string[] => [...userPath(app, user), SESSIONS_LABEL, memoryLabel(session, "session id")];
/** The path of a user's tombstones. */
export const tombstonePath = (app: string, user: string): string[] => [TOMBSTONE_ROOT, memoryLabel(app, "app name"), memoryLabel(user, "user id")];

/** The text parts of `content` joined with " ", as ADK's in-memory services join them. */
export function textOf(content: { parts?: { text?: string }[] } | undefined): string {
  return (content?.parts ?? []).map((p) => p.text).filter((t) => !!t).join(" ");
}

/** The value stored for event number `place` of session `session`. */
export function memoryValue(event: Event, place: number, session: string): MemoryValue {
  const content = JSON.parse(JSON.stringify(event.content)) as Record<string, unknown>;
  const value: MemoryValue = { id: event.id, content, text: textOf(event.content), place, session };
  if (event.author !== undefined) value.author = event.author;
  if (typeof event.timestamp === "number") value.timestamp = event.timestamp / 1000;
  return value;
}

/** Whether a memory's text matches `query` exactly as ADK's (TypeScript) InMemoryMemoryService matches them. */
export function wordsMatch(query: string, text: string): boolean {
  const words = new Set([...text.matchAll(/[A-Za-z]+/g)].map((m) => m[0].toLowerCase()));
  if (words.size === 0) return false;
  return query.toLowerCase().split(/\s+/).some((w) => words.has(w));
}

/** The MemoryEntry ADK gets for a stored memory: its content, author and time (ISO 8601, UTC). */
export function memoryEntry(value: MemoryValue): MemoryEntry {
  const entry: MemoryEntry = { content: value.content as MemoryEntry["content"] };
  entry.author = value.author;
  entry.timestamp = typeof value.timestamp === "number" ? new Date(msOf(value.timestamp)).toISOString() : undefined;
  return entry;
}

/** An ADK memory service whose memories live in stepwell (see the module comment). */
export class StepwellMemoryService implements BaseMemoryService {
  readonly client: StepwellClient;
  readonly namespace: string;
  private readonly ownsClient: boolean;
  private readonly opts: CallOptions;
  private readonly embed?: MemoryEmbedder;
  private readonly limit?: number;
  private readonly ttlSeconds?: number;

  /** A service on `client`, which stays the caller's (close() leaves it open). */
  constructor(client: StepwellClient, options: StepwellMemoryServiceOptions = {}, ownsClient = false) {
    const { limit, ttlSeconds } = options;
    if (limit !== undefined && !(Number.isInteger(limit) && limit > 0)) throw new RangeError(`limit must be a positive integer, not ${limit}`);
    if (ttlSeconds !== undefined && !(ttlSeconds >= 0.001)) throw new RangeError(`ttlSeconds must be at least 0.001, not ${ttlSeconds}`);
    this.client = client;
    this.namespace = options.namespace ?? "default";
    this.ownsClient = ownsClient;
    this.opts = { namespace: this.namespace, ...(options.timeoutMs === undefined ? {} : { timeoutMs: options.timeoutMs }) };
    this.embed = options.embed;
    this.limit = limit;
    this.ttlSeconds = ttlSeconds;
  }

  /** A service on a client of its own to `target` (close() closes it), with the client's token, TLS and other options. */
  static fromAddress(target: string, options: StepwellMemoryServiceAddressOptions = {}): StepwellMemoryService {
    const { namespace, timeoutMs, embed, limit, ttlSeconds, ...clientOptions } = options;
    const client = new StepwellClient({ ...clientOptions, target, ...(timeoutMs === undefined ? {} : { timeoutMs }) });
    return new StepwellMemoryService(client, { namespace, timeoutMs, embed, limit, ttlSeconds }, true);
  }

  /** Closes the client if the service made it (fromAddress); a client passed in stays open. */
  close(): void {
    if (this.ownsClient) this.client.close();
  }

  /**
   * Replaces the session's stored memories with its events that have
   * content (minus the ids Python's delete_memory tombstoned), in one
   * PutItems: its events put, with their vectors when the service embeds,
   * and the stored memories of events it no longer holds deleted.
   */
  async addSessionToMemory(session: Session): Promise<void> {
    const path = sessionPath(session.appName, session.userId, session.id);
    const keyed = rememberable(session.events);
    const [deleted, stored] = await Promise.all([this.tombstoned(session, keyed.map((e) => e.key)), this.keysUnder(path)]);
    const kept = keyed.filter((e) => !deleted.has(e.key));
    const values = kept.map(({ event, place }) => memoryValue(event, place, session.id));
    const vectors = await this.vectorsOf(values.map((v) => v.text));
    const ttl = this.ttlSeconds === undefined ? {} : { ttl: msToDuration(this.ttlSeconds * 1000) };
    const puts: WriteInit[] = kept.map(({ key }, n) => ({
      path, key, value: jsonBytes(values[n]), ...ttl,
      ...(vectors ? { vectors: vectors[n] ? [{ field: "text", values: vectors[n] }] : [], replaceVectors: true } : {}),
    }));
    const keep = new Set(kept.map((e) => e.key));
    const deletes: WriteInit[] = [...stored].filter((key) => !keep.has(key)).map((key) => ({ path, key, delete: true }));
    await this.write([...puts, ...deletes]);
  }

  /** The memories of (appName, userId) that match `query`: by words as ADK's in-memory service, or by meaning with an embedder. */
  async searchMemory({ appName, userId, query }: SearchMemoryRequest): Promise<SearchMemoryResponse> {
    const prefix = userPath(appName, userId);
    if (this.embed) return { memories: await this.searchByMeaning(prefix, query) };
    const memories: MemoryEntry[] = [];
    for (const value of ordered(await this.itemsUnder(prefix, WITH_TEXT))) {
      if (this.limit !== undefined && memories.length >= this.limit) break;
      if (wordsMatch(query, typeof value.text === "string" ? value.text : textOf(value.content))) memories.push(memoryEntry(value));
    }
    return { memories };
  }

  /** The query's embedding searched under `prefix` in the sidecar: the memories with a vector, best first, at most the limit. */
  private async searchByMeaning(prefix: string[], query: string): Promise<MemoryEntry[]> {
    if (query.trim() === "") return [];
    const [queryVector] = (await this.vectorsOf([query]))!;
    if (!queryVector) return [];
    const limit = this.limit ?? MEANING_LIMIT_DEFAULT;
    const got: MemoryEntry[] = [];
    for (let offset = 0; got.length < limit; offset += PAGE_MAX) {
      const want = Math.min(limit - got.length, PAGE_MAX);
      const res = await this.client.searchItems({ pathPrefix: prefix, filter: WITH_TEXT, queryVector, limit: want, offset }, this.opts);
      const scored = res.hits.filter((h) => h.score !== undefined);
      got.push(...scored.map((h) => memoryEntry(parseJsonBytes(h.item!.value) as MemoryValue)));
      if (scored.length < want) break;
    }
    return got;
  }

  /** The embeddings of the non-empty texts (undefined for an empty text, and for an all-zero vector, which the sidecar refuses), or undefined without an embedder. */
  private async vectorsOf(texts: string[]): Promise<(number[] | undefined)[] | undefined> {
    if (!this.embed) return undefined;
    const wanted = texts.filter((t) => t !== "");
    const got = wanted.length > 0 ? await this.embed(wanted) : [];
    if (got.length !== wanted.length) throw new Error(`the embedder returned ${got.length} vectors for ${wanted.length} texts`);
    let n = 0;
    return texts.map((t) => {
      const v = t === "" ? undefined : got[n++];
      return v && v.some((x) => x !== 0) ? v : undefined;
    });
  }

  /** Commits `writes` in one PutItems, or, past the sidecar's default limit, in several: puts before deletions. */
  private async write(writes: WriteInit[]): Promise<void> {
    for (let at = 0; at < writes.length; at += WRITES_PER_REQUEST_MAX) {
      await this.client.putItems({ writes: writes.slice(at, at + WRITES_PER_REQUEST_MAX) }, this.opts);
    }
  }

  /** Which of `keys` (encoded event ids) Python's delete_memory tombstoned for the session's user. */
  private async tombstoned(session: Session, keys: string[]): Promise<Set<string>> {
    const path = tombstonePath(session.appName, session.userId);
    const found = new Set<string>();
    for (let at = 0; at < keys.length; at += WRITES_PER_REQUEST_MAX) {
      const items = keys.slice(at, at + WRITES_PER_REQUEST_MAX).map((key) => ({ path, key }));
      for (const item of (await this.client.getItems({ items }, this.opts)).items) found.add(item.key);
    }
    return found;
  }

  /** The keys of the items under `path`. */
  private async keysUnder(path: string[]): Promise<Set<string>> {
    return new Set((await this.itemsUnder(path)).map((item) => item.key));
  }

  /** Every item under `prefix` (that `filter` matches), in the sidecar's order (paths by first put). */
  private async itemsUnder(prefix: string[], filter?: Uint8Array): Promise<MemoryItem[]> {
    const items: MemoryItem[] = [];
    for (let offset = 0; ; offset += PAGE_MAX) {
      const res = await this.client.searchItems({ pathPrefix: prefix, limit: PAGE_MAX, offset, ...(filter ? { filter } : {}) }, this.opts);
      items.push(...res.hits.map((h) => h.item!));
      if (res.hits.length < PAGE_MAX) return items;
    }
  }
}

/** A session's events with content parts, with their index in the session and their key: each event id once, its first occurrence (as Python's service). */
function rememberable(events: Event[]): { event: Event; place: number; key: string }[] {
  const seen = new Set<string>();
  const out: { event: Event; place: number; key: string }[] = [];
  events.forEach((event, place) => {
    if ((event.content?.parts?.length ?? 0) === 0 || seen.has(event.id)) return;
    seen.add(event.id);
    out.push({ event, place, key: memoryLabel(event.id, "event id", KEY_BYTES_MAX) });
  });
  return out;
}

/** The memories' values in memory order: their paths as the sidecar orders them (by first put), then by place. */
function ordered(items: MemoryItem[]): MemoryValue[] {
  const rank = new Map<string, number>();
  const rows = items.map((item, n) => {
    const path = JSON.stringify(item.path);
    if (!rank.has(path)) rank.set(path, rank.size);
    const value = parseJsonBytes(item.value) as MemoryValue;
    return { value, path: rank.get(path)!, place: typeof value.place === "number" ? value.place : Number.MAX_SAFE_INTEGER, n };
  });
  rows.sort((a, b) => a.path - b.path || a.place - b.place || a.n - b.n);
  return rows.map((r) => r.value);
}
