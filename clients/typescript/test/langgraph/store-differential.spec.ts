// StepwellStore against LangGraph.js's InMemoryStore, the reference, on
// seeded random sequences of puts (the store's fields, a put's own, index
// false), gets, deletes, searches (filters, a query, limit and offset),
// namespace listings and mixed batches: every answer must be equal (keys,
// namespaces, values; scores within 1e-5; dates are not compared), on a
// sidecar on SQLite and on Postgres.
//
// STEPWELL_STORE_DIFF_SEED (default below, printed) seeds the run; sequence
// i uses seed + i, and STEPWELL_STORE_DIFF_ONLY=i runs that one alone.
// STEPWELL_STORE_DIFF_SEQUENCES sets how many (default 1000).
//
// The reference's documented artifacts are corrected, and nothing else:
// (a) InMemoryStore lists namespaces that deletes emptied; stepwell lists
//     only paths holding items: the reference's listings are computed over
//     its non-empty namespaces (its namespaces keep their place in the item
//     order, as stepwell's paths do, so its data map itself is kept).
// (b) With a query, InMemoryStore fills a page with unscored items ignoring
//     the offset; stepwell applies the offset to one ordering (scored by
//     score, ties in item order, then the unscored in item order): the
//     reference's answer is its whole ordering (offset 0, no limit), paged
//     here.
// (c) InMemoryStore's delete leaves the item's vectors, so an item put again
//     keeps them; stepwell's delete removes them. The sequences delete and
//     re-put items (also with index false, where it shows), and the
//     reference's vectors of an item are dropped when a delete wins.
// Two more, found by this test: (f) InMemoryStore's delete in a namespace
// it does not hold makes that namespace (empty), fixing its place in the
// item order before its first put (stepwell's delete of an item not stored
// changes nothing); (g) its batch answers a get with the live item, which a
// put of the same batch updates in place. See reference() and "batch".
// (d) InMemoryStore sorts listings by localeCompare of ':'-joined labels,
//     stepwell by labels as UTF-8 bytes: labels are lowercase letters of a
//     small alphabet, for which the two orders agree (checked first, over
//     every namespace the sequences can make).
// (e) InMemoryStore's filters never match nested objects or arrays and
//     support $in/$nin: the filters are scalar equality and the six
//     operators $eq $ne $gt $gte $lt $lte, on numeric fields every item has.
// Item order without a query is the same on both (namespace of first put,
// then key of first put; an update keeps its place, a put after a delete
// goes last) and is compared exactly. Two items whose reference scores are
// equal within 1e-9 may come in either order (the sidecar scores float32
// vectors in float64, the reference float64 vectors): that is counted and
// printed.
import { InMemoryStore, type BaseStore, type IndexConfig, type Item, type Operation, type SearchItem } from "@langchain/langgraph-checkpoint";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { StepwellClient } from "../../src/index.js";
import { StepwellStore } from "../../src/langgraph/index.js";
import { freshNamespace, type Sidecar } from "../sidecar.js";
import { BACKENDS, startBackend } from "./backends.js";
import { CharacterEmbeddings, Rng } from "./store-fixtures.js";

const DEFAULT_SEED = 20261204;
const SEED = Number(process.env.STEPWELL_STORE_DIFF_SEED ?? DEFAULT_SEED);
const SEQUENCES = Number(process.env.STEPWELL_STORE_DIFF_SEQUENCES ?? 1000);
const ONLY = process.env.STEPWELL_STORE_DIFF_ONLY === undefined ? undefined : Number(process.env.STEPWELL_STORE_DIFF_ONLY);
// Sequences run side by side, each in a namespace of its own: the sidecar's
// group commit then carries several sequences' writes in one transaction.
const CONCURRENCY = Number(process.env.STEPWELL_STORE_DIFF_CONCURRENCY ?? 32);
const DIMS = 16;

const LABELS = ["a", "b", "c", "ab", "ba", "abc"];
const KEYS = ["k1", "k2", "k3", "k4"];
const WORD_CHARS = "abcdexyz";
const COLORS = ["red", "blue", "green"];
const FIELD_SETS = [["text"], ["text", "tags[*]"], ["$"], ["tags[*]"], ["text", "color"]];
const PUT_INDEXES = [["text"], ["tags[*]"], ["color"], ["$"], ["text", "tags[*]"]];
const OPS = ["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"] as const;

const embeddings = new CharacterEmbeddings(DIMS);

function universe(): string[][] {
  const out: string[][] = [];
  const grow = (ns: string[]) => {
    if (ns.length) out.push(ns);
    if (ns.length < 3) for (const l of LABELS) grow([...ns, l]);
  };
  grow([]);
  return out;
}

function byteOrder(a: string[], b: string[]): number {
  for (let i = 0; i < Math.min(a.length, b.length); i++) {
    const x = Buffer.from(a[i]!, "utf8");
    const y = Buffer.from(b[i]!, "utf8");
    const c = Buffer.compare(x, y);
    if (c !== 0) return c;
  }
  return a.length - b.length;
}

type Step =
  | { op: "put"; ns: string[]; key: string; value: Record<string, unknown>; index?: false | string[] }
  | { op: "delete"; ns: string[]; key: string }
  | { op: "get"; ns: string[]; key: string }
  | { op: "search"; prefix: string[]; filter?: Record<string, unknown>; query?: string; limit?: number; offset?: number }
  | { op: "list"; prefix?: string[]; suffix?: string[]; maxDepth?: number; limit?: number; offset?: number }
  | { op: "batch"; ops: Step[] };

interface Sequence {
  index?: IndexConfig;
  steps: Step[];
}

function word(r: Rng): string {
  let w = "";
  for (let i = r.int(1, 5); i > 0; i--) w += r.pick([...WORD_CHARS]);
  return w;
}

function generate(seed: number): Sequence {
  const r = new Rng(seed);
  const all = universe();
  const pool = Array.from({ length: r.int(2, 5) }, () => r.pick(all));
  const index: IndexConfig | undefined = r.chance(0.8) ? { dims: DIMS, embeddings, fields: r.pick(FIELD_SETS) } : undefined;
  const value = (): Record<string, unknown> => {
    const v: Record<string, unknown> = { n: r.int(0, 5), m: r.int(0, 20) / 4, text: word(r), flag: r.chance(0.5) };
    if (r.chance(0.7)) v.color = r.pick(COLORS);
    if (r.chance(0.6)) v.tags = Array.from({ length: r.int(1, 3) }, () => word(r));
    return v;
  };
  const filter = (): Record<string, unknown> | undefined => {
    if (r.chance(0.4)) return undefined;
    const f: Record<string, unknown> = {};
    for (let c = r.int(1, 2); c > 0; c--) {
      const kind = r.int(0, 3);
      if (kind === 0) f.color = r.pick(COLORS);
      else if (kind === 1) f.flag = r.chance(0.5);
      else {
        const field = r.pick(["n", "m"]);
        const ops: Record<string, number> = {};
        for (let o = r.int(1, 2); o > 0; o--) ops[r.pick(OPS)] = field === "n" ? r.int(0, 5) : r.int(0, 20) / 4;
        if (r.chance(0.3)) f[field] = field === "n" ? r.int(0, 5) : r.int(0, 20) / 4;
        else f[field] = ops;
      }
    }
    return f;
  };
  const maybeStar = (labels: string[]) => labels.map((l) => (r.chance(0.25) ? "*" : l));
  const step = (inBatch: boolean): Step => {
    const ns = r.pick(pool);
    const key = r.pick(KEYS);
    const x = r.next();
    if (x < 0.4) {
      const y = r.next();
      const index = y < 0.6 ? undefined : y < 0.8 ? (false as const) : r.pick(PUT_INDEXES);
      return { op: "put", ns, key, value: value(), ...(index === undefined ? {} : { index }) };
    }
    if (x < 0.55) return { op: "get", ns, key };
    if (x < 0.67) return { op: "delete", ns, key };
    if (x < 0.9 || inBatch) {
      const base = r.chance(0.8) ? r.pick(pool) : r.pick(all);
      const prefix = base.slice(0, r.int(0, base.length));
      const s: Step = { op: "search", prefix };
      const f = filter();
      if (f) s.filter = f;
      if (r.chance(0.6)) s.query = word(r);
      if (r.chance(0.7)) s.limit = r.int(1, 6);
      if (r.chance(0.5)) s.offset = r.int(0, 4);
      return s;
    }
    const s: Step = { op: "list" };
    if (r.chance(0.5)) {
      const base = r.pick(pool);
      s.prefix = maybeStar(base.slice(0, r.int(1, base.length)));
    }
    if (r.chance(0.35)) {
      const base = r.pick(pool);
      s.suffix = maybeStar(base.slice(base.length - r.int(1, base.length)));
    }
    if (r.chance(0.4)) s.maxDepth = r.int(1, 3);
    if (r.chance(0.5)) s.limit = r.int(1, 4);
    if (r.chance(0.4)) s.offset = r.int(0, 3);
    return s;
  };
  const steps: Step[] = [];
  for (let n = r.int(10, 20); n > 0; n--) {
    if (r.chance(0.08)) steps.push({ op: "batch", ops: Array.from({ length: r.int(2, 4) }, () => step(true)) });
    else steps.push(step(false));
  }
  return { index, steps };
}

// ---- running a sequence on both ----

type Vectors = Map<string, Map<string, Map<string, number[]>>>;
interface RefInternals {
  data: Map<string, Map<string, Item>>;
  vectors: Vectors;
  putOperation(op: { namespace: string[]; key: string; value: unknown }): void;
}

/**
 * The reference, corrected where a delete takes effect (InMemoryStore
 * applies every winning write through putOperation):
 * (c) a delete drops the item's vectors;
 * (f) a delete in a namespace it does not hold does nothing (InMemoryStore
 *     makes the namespace there, empty, fixing its place in the item order
 *     before its first item; stepwell's place of a path is its first put).
 */
function reference(index: IndexConfig | undefined): InMemoryStore {
  const ref = new InMemoryStore(index ? { index } : undefined);
  const r = ref as unknown as RefInternals;
  const put = r.putOperation.bind(ref);
  r.putOperation = (op) => {
    if (op.value === null) {
      const nsKey = op.namespace.join(":");
      if (!r.data.has(nsKey)) return;
      r.vectors.get(nsKey)?.delete(op.key);
    }
    put(op);
  };
  return ref;
}

/** (a): the reference's listing over its non-empty namespaces only. */
function listedView(ref: InMemoryStore): InMemoryStore {
  const data = (ref as unknown as RefInternals).data;
  const view = Object.create(ref) as InMemoryStore;
  (view as unknown as { data: unknown }).data = new Map([...data].filter(([, items]) => items.size > 0));
  return view;
}

interface Shown {
  namespace: string[];
  key: string;
  value: unknown;
  score?: number;
}

const show = (it: Item | SearchItem | null): Shown | null =>
  it === null ? null : { namespace: [...it.namespace], key: it.key, value: structuredClone(it.value), ...("score" in it ? { score: (it as SearchItem).score } : {}) };

function toOp(s: Step): Operation {
  switch (s.op) {
    case "put":
      return { namespace: s.ns, key: s.key, value: s.value, ...(s.index === undefined ? {} : { index: s.index }) };
    case "delete":
      return { namespace: s.ns, key: s.key, value: null };
    case "get":
      return { namespace: s.ns, key: s.key };
    case "search":
      return { namespacePrefix: s.prefix, filter: s.filter, query: s.query, limit: s.limit ?? 10, offset: s.offset ?? 0 };
    default:
      throw new Error(`no batch op for ${s.op}`);
  }
}

class Mismatch extends Error {}

let ties = 0;

function sameSearch(want: Shown[], got: Shown[], whole: Shown[] | undefined, what: string): void {
  const fail = () => {
    throw new Mismatch(`${what}: reference ${JSON.stringify(want)}\n  stepwell ${JSON.stringify(got)}`);
  };
  if (want.length !== got.length) fail();
  const seen = new Set<string>();
  for (let i = 0; i < want.length; i++) {
    const w = want[i]!;
    const g = got[i]!;
    const id = JSON.stringify([g.namespace, g.key]);
    if (seen.has(id)) fail();
    seen.add(id);
    if ((w.score === undefined) !== (g.score === undefined)) fail();
    if (w.score !== undefined && Math.abs(w.score - g.score!) > 1e-5) fail();
    if (w.key === g.key && JSON.stringify(w.namespace) === JSON.stringify(g.namespace)) {
      expectEqual(g.value, w.value, fail);
      continue;
    }
    // A tie: the item stepwell put here has the reference's score of this place.
    const other = whole?.find((x) => x.key === g.key && JSON.stringify(x.namespace) === JSON.stringify(g.namespace));
    if (w.score === undefined || other?.score === undefined || Math.abs(other.score - w.score) > 1e-9) fail();
    expectEqual(g.value, other!.value, fail);
    ties++;
  }
}

function expectEqual(a: unknown, b: unknown, fail: () => void): void {
  try {
    expect(a).toEqual(b);
  } catch {
    fail();
  }
}

/**
 * The reference's answer to a search: with a query (and an index), (b) its
 * whole ordering, paged here; without, its own page. Also its whole
 * ordering, to tell ties apart.
 */
async function refSearch(ref: InMemoryStore, indexed: boolean, s: Extract<Step, { op: "search" }>): Promise<[Shown[], Shown[] | undefined]> {
  if (s.query && indexed) {
    const whole = (await ref.search(s.prefix, { filter: s.filter, query: s.query, limit: 1_000_000, offset: 0 })).map((x) => show(x)!);
    const offset = s.offset ?? 0;
    return [whole.slice(offset, offset + (s.limit ?? 10)), whole];
  }
  return [(await ref.search(s.prefix, { filter: s.filter, query: s.query, limit: s.limit, offset: s.offset })).map((x) => show(x)!), undefined];
}

async function runSequence(seq: Sequence, sw: StepwellStore): Promise<void> {
  const ref = reference(seq.index);
  const indexed = seq.index !== undefined;
  for (const [n, s] of seq.steps.entries()) {
    const what = `step ${n} ${JSON.stringify(s)}`;
    const failWith = (want: unknown, got: unknown) => {
      throw new Mismatch(`${what}: reference ${JSON.stringify(want)}\n  stepwell ${JSON.stringify(got)}`);
    };
    const same = (want: unknown, got: unknown) => expectEqual(got, want, () => failWith(want, got));
    switch (s.op) {
      case "put":
        await ref.put(s.ns, s.key, s.value, s.index);
        await sw.put(s.ns, s.key, s.value, s.index);
        break;
      case "delete":
        await ref.delete(s.ns, s.key);
        await sw.delete(s.ns, s.key);
        break;
      case "get":
        same(show(await ref.get(s.ns, s.key)), show(await sw.get(s.ns, s.key)));
        break;
      case "search": {
        const got = (await sw.search(s.prefix, { filter: s.filter, query: s.query, limit: s.limit, offset: s.offset })).map((x) => show(x)!);
        const [want, whole] = await refSearch(ref, indexed, s);
        sameSearch(want, got, whole, what);
        break;
      }
      case "list": {
        const opts = { prefix: s.prefix, suffix: s.suffix, maxDepth: s.maxDepth, limit: s.limit, offset: s.offset };
        same(await listedView(ref).listNamespaces(opts), await sw.listNamespaces(opts));
        break;
      }
      case "batch": {
        // (g) InMemoryStore's batch answers a get with its live item, which
        // a put of the same batch then updates in place: the reference's
        // reads of a batch are its answers to them alone, before the batch
        // (a batch's reads do not see its writes), and its batch is run for
        // the writes.
        const reads: unknown[] = [];
        for (const o of s.ops) {
          if (o.op === "get") reads.push(show(await ref.get(o.ns, o.key)));
          else if (o.op === "search") reads.push(await refSearch(ref, indexed, o));
          else reads.push(null);
        }
        const ops = s.ops.map(toOp);
        const want = await ref.batch(ops);
        const got = await sw.batch(ops);
        s.ops.forEach((o, i) => {
          if (o.op === "search") {
            const [page, whole] = reads[i] as [Shown[], Shown[] | undefined];
            sameSearch(page, (got[i] as SearchItem[]).map((x) => show(x)!), whole, `${what} op ${i}`);
          } else if (o.op === "get") same(reads[i], show(got[i] as Item | null));
          else same(want[i], got[i]);
        });
        break;
      }
    }
  }
}

describe("the reference's listing order", () => {
  it("(d) localeCompare of ':'-joined labels and UTF-8 label order agree on every namespace generated", () => {
    const all = universe();
    const locale = [...all].sort((a, b) => a.join(":").localeCompare(b.join(":")));
    const bytes = [...all].sort(byteOrder);
    expect(locale).toEqual(bytes);
  });
});

for (const backend of BACKENDS) {
  describe(`StepwellStore against InMemoryStore, differential (${backend})`, () => {
    let sidecar: Sidecar;
    let client: StepwellClient;
    beforeAll(async () => {
      sidecar = await startBackend(backend);
      client = new StepwellClient({ target: sidecar.target });
    });
    afterAll(async () => {
      client?.close();
      await sidecar?.stop();
    });

    it(`${SEQUENCES} seeded sequences answer alike`, { timeout: 300_000 }, async () => {
      const which = ONLY === undefined ? Array.from({ length: SEQUENCES }, (_, i) => i) : [ONLY];
      console.log(`store differential (${backend}): seed ${SEED} (STEPWELL_STORE_DIFF_SEED, default ${DEFAULT_SEED}), ${which.length} sequences`);
      const started = Date.now();
      ties = 0;
      const failures: string[] = [];
      let ops = 0;
      let next = 0;
      const worker = async () => {
        while (next < which.length) {
          const i = which[next++]!;
          const seq = generate(SEED + i);
          ops += seq.steps.reduce((n, s) => n + (s.op === "batch" ? s.ops.length : 1), 0);
          const sw = new StepwellStore(client, { namespace: freshNamespace(`lgjs-diff-${backend}-${i}`), ...(seq.index ? { index: seq.index } : {}) });
          try {
            await runSequence(seq, sw);
          } catch (err) {
            if (!(err instanceof Mismatch)) throw err;
            failures.push(`sequence ${i} (STEPWELL_STORE_DIFF_SEED=${SEED} STEPWELL_STORE_DIFF_ONLY=${i}, fields ${JSON.stringify(seq.index?.fields ?? null)}): ${err.message}`);
          }
        }
      };
      await Promise.all(Array.from({ length: CONCURRENCY }, worker));
      const secs = (Date.now() - started) / 1000;
      console.log(`store differential (${backend}): ${which.length} sequences, ${ops} ops, ${failures.length} differing, ${ties} score ties in another order, ${secs.toFixed(1)} s`);
      expect(failures.slice(0, 5)).toEqual([]);
    });
  });
}
