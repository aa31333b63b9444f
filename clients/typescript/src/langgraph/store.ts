// StepwellStore: LangGraph.js's BaseStore on stepwell's MemoryService. A
// namespace tuple is an item's path, the store's namespace is stepwell's.
// batch() answers its reads first (one GetItems for every get, one
// SearchItems per search, ListPaths per listing), then commits all its puts
// and deletes in ONE PutItems, the last write of an address winning: the
// reads of a batch do not see its writes, as in InMemoryStore. Vectors are
// computed here with the index's embeddings (the texts exactly as
// InMemoryStore extracts them); filters, scores and orders are the
// sidecar's (memory.proto).
import {
  BaseStore,
  validateNamespace,
  type GetOperation,
  type IndexConfig,
  type Item,
  type ListNamespacesOperation,
  type Operation,
  type OperationResults,
  type PutOperation,
  type SearchItem,
  type SearchOperation,
} from "@langchain/langgraph-checkpoint";
import type { Duration } from "@bufbuild/protobuf/wkt";
import { StepwellClient, type StepwellClientOptions } from "../client.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { PathMatch_End, type MemoryItem, type MemoryWriteSchema } from "../gen/stepwell/v1/memory_pb.js";

type WriteInit = MessageInitShape<typeof MemoryWriteSchema>;
type VectorInit = { field: string; values: number[] };
import type { CallOptions } from "../options.js";
import { msToDuration, timestampToDate } from "../time.js";

/** Times to live, as LangGraph's TTLConfig: minutes, refreshed on reads by default. */
export interface StoreTtlConfig {
  /** Minutes an item lives after its put (and after each refreshing read); unset: items never expire. */
  defaultTtl?: number;
  /** Reads (get, search) move the expiry of the items they return. Default true. */
  refreshOnRead?: boolean;
}

export interface StepwellStoreOptions {
  /** The stepwell namespace of the items; default the client's. */
  namespace?: string;
  /** Semantic search: `{ dims, embeddings, fields? }` (fields default ["$"], the whole value). */
  index?: IndexConfig;
  /** Times to live of the items. */
  ttl?: StoreTtlConfig;
  /** Deadline of each call, in ms; default the client's. */
  timeoutMs?: number;
}

/** The sidecar's default --memory-items-per-request-max and --memory-search-results-max. */
const ADDRESSES_PER_GET_MAX = 1000;
const PAGE_MAX = 1000;

type TokenizedField = [string, string[]];

/**
 * A LangGraph.js store on a stepwell sidecar: items at (namespace tuple,
 * key) in a stepwell namespace, with filters, semantic search over the
 * index's fields and times to live.
 */
export class StepwellStore extends BaseStore {
  readonly client: StepwellClient;
  readonly namespace: string;
  readonly ttlConfig?: StoreTtlConfig;
  private readonly _indexConfig?: IndexConfig;
  private readonly fields: TokenizedField[];
  private readonly opts: CallOptions;
  private ownsClient = false;

  constructor(client: StepwellClient, options: StepwellStoreOptions = {}) {
    super();
    this.client = client;
    this.namespace = options.namespace ?? client.namespace;
    this.opts = { namespace: this.namespace, ...(options.timeoutMs === undefined ? {} : { timeoutMs: options.timeoutMs }) };
    if (options.index) {
      if (!options.index.embeddings) throw new TypeError("index needs embeddings");
      this._indexConfig = options.index;
    }
    this.fields = (options.index?.fields ?? ["$"]).map((p): TokenizedField => [p, p === "$" ? [p] : tokenizePath(p)]);
    if (options.ttl) {
      const d = options.ttl.defaultTtl;
      if (d !== undefined && d !== null && !(d > 0)) throw new RangeError("ttl.defaultTtl must be a positive number of minutes");
      this.ttlConfig = { ...options.ttl };
    }
  }

  /**
   * A store with a client of its own to `address` ("host:port",
   * "unix:/path"); the client options (token, tls, ...) go to the client.
   * close() (or stop()) closes the client.
   */
  static fromAddress(address: string, options: StepwellStoreOptions & Omit<StepwellClientOptions, "target" | "namespace"> = {}): StepwellStore {
    const { namespace, index, ttl, timeoutMs, ...clientOptions } = options;
    const client = new StepwellClient({ ...clientOptions, target: address, namespace: namespace ?? "", timeoutMs });
    const store = new StepwellStore(client, { namespace, index, ttl });
    store.ownsClient = true;
    return store;
  }

  /** The index configuration given, as InMemoryStore's indexConfig. */
  get indexConfig(): IndexConfig | undefined {
    return this._indexConfig;
  }

  /** Closes the client when the store made it (fromAddress). */
  close(): void {
    if (this.ownsClient) this.client.close();
  }

  override stop(): void {
    this.close();
  }

  /**
   * Stores or updates an item, as BaseStore's put, plus a time to live in
   * minutes: undefined for the store's default, null for none.
   */
  override async put(
    namespace: string[],
    key: string,
    value: Record<string, any>,
    index?: false | string[],
    options: { ttl?: number | null } = {},
  ): Promise<void> {
    validateNamespace(namespace);
    const op: PutOperation & { ttl?: number | null } = { namespace, key, value, index };
    if (options.ttl !== undefined) op.ttl = options.ttl;
    await this.batch([op]);
  }

  async batch<Op extends Operation[]>(operations: Op): Promise<OperationResults<Op>> {
    const results: unknown[] = new Array(operations.length).fill(null);
    const gets: [number, GetOperation][] = [];
    const searches: [number, SearchOperation][] = [];
    const lists: [number, ListNamespacesOperation][] = [];
    // The last write of an address wins; the Map keeps the place of its first.
    const puts = new Map<string, PutOperation & { ttl?: number | null }>();
    operations.forEach((op, i) => {
      // InMemoryStore's checks of a batch: no empty namespace, no '.', ':',
      // NUL or empty label (the reserved root is allowed here).
      if ("namespace" in op) validateNamespace(op.namespace, { allowReservedRoot: true });
      if ("key" in op && "namespace" in op && !("value" in op)) gets.push([i, op as GetOperation]);
      else if ("namespacePrefix" in op) {
        const s = op as SearchOperation;
        if (s.namespacePrefix.length > 0) validateNamespace(s.namespacePrefix, { allowReservedRoot: true });
        searches.push([i, s]);
      } else if ("value" in op) {
        const p = op as PutOperation;
        puts.set(JSON.stringify([p.namespace, p.key]), p);
      } else if ("matchConditions" in op) lists.push([i, op as ListNamespacesOperation]);
    });

    const reads: Promise<void>[] = [];
    if (gets.length) {
      reads.push(
        this.getAll(gets.map(([, op]) => op)).then((found) => {
          for (const [i, op] of gets) results[i] = found.get(JSON.stringify([op.namespace, op.key])) ?? null;
        }),
      );
    }
    if (searches.length) {
      const queries = new Map<string, Promise<number[]>>();
      for (const [, op] of searches) {
        if (op.query && this._indexConfig && !queries.has(op.query)) queries.set(op.query, this._indexConfig.embeddings.embedQuery(op.query));
      }
      for (const [i, op] of searches) {
        const q = op.query && this._indexConfig ? queries.get(op.query) : undefined;
        reads.push((q ?? Promise.resolve(undefined)).then((vector) => this.searchOp(op, vector).then((r) => void (results[i] = r))));
      }
    }
    for (const [i, op] of lists) reads.push(this.listOp(op).then((r) => void (results[i] = r)));
    await Promise.all(reads);

    if (puts.size) await this.writeAll([...puts.values()]);
    return results as OperationResults<Op>;
  }

  // ---- reads ----

  private refresh(): boolean {
    return this.ttlConfig ? (this.ttlConfig.refreshOnRead ?? true) : false;
  }

  private async getAll(ops: GetOperation[]): Promise<Map<string, Item>> {
    const found = new Map<string, Item>();
    const addresses = new Map<string, { path: string[]; key: string }>();
    for (const op of ops) addresses.set(JSON.stringify([op.namespace, op.key]), { path: op.namespace, key: op.key });
    const all = [...addresses.values()];
    for (let at = 0; at < all.length; at += ADDRESSES_PER_GET_MAX) {
      const res = await this.client.getItems({ items: all.slice(at, at + ADDRESSES_PER_GET_MAX), refreshTtl: this.refresh() }, this.opts);
      for (const it of res.items) found.set(JSON.stringify([it.path, it.key]), toItem(it));
    }
    return found;
  }

  private async searchOp(op: SearchOperation, queryVector: number[] | undefined): Promise<SearchItem[]> {
    const limit = op.limit ?? 10;
    let offset = op.offset ?? 0;
    if (!(limit > 0)) return [];
    const filter = op.filter === undefined || op.filter === null ? new Uint8Array() : utf8(JSON.stringify(op.filter));
    const out: SearchItem[] = [];
    // Pages of the sidecar's most, for a limit beyond it.
    while (out.length < limit) {
      const want = Math.min(PAGE_MAX, limit - out.length);
      const res = await this.client.searchItems(
        { pathPrefix: op.namespacePrefix, filter, queryVector: queryVector ?? [], limit: want, offset, refreshTtl: this.refresh() },
        this.opts,
      );
      for (const hit of res.hits) out.push({ ...toItem(hit.item!), score: hit.score });
      if (res.hits.length < want) break;
      offset += want;
    }
    return out;
  }

  private async listOp(op: ListNamespacesOperation): Promise<string[][]> {
    const limit = op.limit ?? Infinity;
    let offset = op.offset ?? 0;
    if (!(limit > 0)) return [];
    const matches = (op.matchConditions ?? [])
      // An empty path matches every namespace (and the sidecar wants 1+ labels).
      .filter((c) => c.path.length > 0)
      .map((c) => {
        if (c.matchType !== "prefix" && c.matchType !== "suffix") throw new Error(`Unsupported match type: ${String(c.matchType)}`);
        return { end: c.matchType === "prefix" ? PathMatch_End.PREFIX : PathMatch_End.SUFFIX, labels: c.path };
      });
    const out: string[][] = [];
    while (out.length < limit) {
      const want = Math.min(PAGE_MAX, limit - out.length);
      const res = await this.client.listPaths({ matches, maxDepth: op.maxDepth ?? 0, limit: want, offset }, this.opts);
      for (const p of res.paths) out.push(p.labels);
      if (res.paths.length < want) break;
      offset += want;
    }
    return out;
  }

  // ---- writes ----

  private async writeAll(ops: (PutOperation & { ttl?: number | null })[]): Promise<void> {
    // The texts to embed, each once, and where each vector goes (InMemoryStore's extractTexts).
    const toEmbed = new Map<string, [number, string][]>();
    if (this._indexConfig) {
      ops.forEach((op, n) => {
        if (op.value === null || op.value === undefined || op.index === false) return;
        const paths: TokenizedField[] = op.index === null || op.index === undefined ? this.fields : op.index.map((ix): TokenizedField => [ix, tokenizePath(ix)]);
        for (const [path, field] of paths) {
          const texts = getTextAtPath(op.value, field);
          if (texts.length > 1) texts.forEach((text, i) => push(toEmbed, text, [n, `${path}.${i}`]));
          else if (texts.length === 1) push(toEmbed, texts[0]!, [n, path]);
        }
      });
    }
    const vectors: VectorInit[][] = ops.map(() => []);
    if (toEmbed.size) {
      const texts = [...toEmbed.keys()];
      const embeddings = await this._indexConfig!.embeddings.embedDocuments(texts);
      texts.forEach((text, t) => {
        const embedding = embeddings[t];
        if (!embedding) throw new Error(`No embedding found for text: ${text}`);
        for (const [n, field] of toEmbed.get(text)!) {
          // One vector per field: a later text of the same field replaces it, as InMemoryStore's Map.
          const list = vectors[n]!;
          const at = list.findIndex((v) => v.field === field);
          const v = { field, values: embedding };
          if (at >= 0) list[at] = v;
          else list.push(v);
        }
      });
    }
    const writes = ops.map((op, n): WriteInit => {
      if (op.value === null || op.value === undefined) return { path: op.namespace, key: op.key, delete: true };
      const ttl = this.ttlOf(op.ttl);
      return { path: op.namespace, key: op.key, value: utf8(JSON.stringify(op.value)), vectors: vectors[n]!, ...(ttl ? { ttl } : {}) };
    });
    await this.client.putItems({ writes }, this.opts);
  }

  private ttlOf(minutes: number | null | undefined): Duration | undefined {
    const m = minutes === undefined ? this.ttlConfig?.defaultTtl : minutes;
    if (m === undefined || m === null) return undefined;
    if (!(m > 0)) throw new RangeError("ttl must be a positive number of minutes");
    return msToDuration(Math.max(1, Math.round(m * 60_000)));
  }
}

function push<K, V>(m: Map<K, V[]>, k: K, v: V): void {
  const list = m.get(k);
  if (list) list.push(v);
  else m.set(k, [v]);
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();
function utf8(s: string): Uint8Array {
  return encoder.encode(s);
}

function toItem(it: MemoryItem): Item {
  return {
    value: JSON.parse(decoder.decode(it.value)) as Record<string, any>,
    key: it.key,
    namespace: it.path,
    createdAt: timestampToDate(it.createdAt!),
    updatedAt: timestampToDate(it.updatedAt!),
  };
}

// ---- the texts of a value to embed ----
// @langchain/langgraph-checkpoint exports a tokenizePath and getTextAtPath
// from its store base module, but InMemoryStore uses the richer ones of its
// (unexported) store utils: these are those, faithfully ("$" is the whole
// value as JSON.stringify(value, null, 2); [i], [-i], [*], *, {a,b.c}).

/** Splits a field path into tokens: "a.b[*].c" → ["a", "b", "[*]", "c"]. */
export function tokenizePath(path: string): string[] {
  if (!path) return [];
  const tokens: string[] = [];
  let current: string[] = [];
  let i = 0;
  while (i < path.length) {
    const char = path[i]!;
    if (char === "[" || char === "{") {
      const close = char === "[" ? "]" : "}";
      if (current.length) {
        tokens.push(current.join(""));
        current = [];
      }
      let depth = 1;
      const chars = [char];
      i += 1;
      while (i < path.length && depth > 0) {
        if (path[i] === char) depth += 1;
        else if (path[i] === close) depth -= 1;
        chars.push(path[i]!);
        i += 1;
      }
      tokens.push(chars.join(""));
      continue;
    } else if (char === ".") {
      if (current.length) {
        tokens.push(current.join(""));
        current = [];
      }
    } else current.push(char);
    i += 1;
  }
  if (current.length) tokens.push(current.join(""));
  return tokens;
}

const isScalar = (v: unknown): v is string | number | boolean => typeof v === "string" || typeof v === "number" || typeof v === "boolean";
const pretty = (v: unknown): string => JSON.stringify(v, null, 2);

/** The texts of a value at a field path (or its tokens), as InMemoryStore embeds them. */
export function getTextAtPath(obj: unknown, path: string | string[]): string[] {
  if (!path || path === "$") return [pretty(obj)];
  const tokens = Array.isArray(path) ? path : tokenizePath(path);
  const extract = (o: any, pos: number): string[] => {
    if (pos >= tokens.length) {
      if (isScalar(o)) return [String(o)];
      if (o === null || o === undefined) return [];
      if (typeof o === "object") return [pretty(o)];
      return [];
    }
    const token = tokens[pos]!;
    const results: string[] = [];
    if (pos === 0 && token === "$") results.push(pretty(o));
    if (token.startsWith("[") && token.endsWith("]")) {
      if (!Array.isArray(o)) return [];
      const index = token.slice(1, -1);
      if (index === "*") for (const item of o) results.push(...extract(item, pos + 1));
      else {
        let idx = parseInt(index, 10);
        if (idx < 0) idx = o.length + idx;
        if (idx >= 0 && idx < o.length) results.push(...extract(o[idx], pos + 1));
      }
    } else if (token.startsWith("{") && token.endsWith("}")) {
      if (typeof o !== "object" || o === null) return [];
      for (const field of token.slice(1, -1).split(",").map((f) => f.trim())) {
        const nested = tokenizePath(field);
        if (!nested.length) continue;
        let cur: any = o;
        for (const t of nested) {
          if (cur && typeof cur === "object" && t in cur) cur = cur[t];
          else {
            cur = undefined;
            break;
          }
        }
        if (cur !== undefined) {
          if (isScalar(cur)) results.push(String(cur));
          else if (typeof cur === "object") results.push(pretty(cur));
        }
      }
    } else if (token === "*") {
      if (Array.isArray(o)) for (const item of o) results.push(...extract(item, pos + 1));
      else if (typeof o === "object" && o !== null) for (const v of Object.values(o)) results.push(...extract(v, pos + 1));
    } else if (typeof o === "object" && o !== null && token in o) results.push(...extract(o[token], pos + 1));
    return results;
  };
  return extract(obj, 0);
}


