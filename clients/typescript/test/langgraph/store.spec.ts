// StepwellStore against what LangGraph.js's own store tests check of its
// InMemoryStore (get/put/delete, search order and filters, listNamespaces
// with prefixes, suffixes, wildcards, depth and pages, namespace
// validation, batches, semantic search over the store's and a put's
// fields), written anew for this project. Every shared case runs on the
// reference InMemoryStore too, so the expectations are the reference's;
// then on StepwellStore over a sidecar on SQLite and on Postgres. The cases
// after those are stepwell's own: times to live, deletes that drop
// vectors, emptied namespaces not listed, and the client's calls.
import { InMemoryStore, InvalidNamespaceError, type BaseStore, type IndexConfig } from "@langchain/langgraph-checkpoint";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { InvalidArgument, StepwellClient, PathMatch_End } from "../../src/index.js";
import { StepwellStore, getTextAtPath, tokenizePath } from "../../src/langgraph/index.js";
import { freshNamespace, type Sidecar } from "../sidecar.js";
import { BACKENDS, startBackend, type BackendName } from "./backends.js";
import { CharacterEmbeddings, cosine, sleep } from "./store-fixtures.js";

type Make = (opts?: { index?: IndexConfig }) => BaseStore;

const NAMESPACES: string[][] = [
  ["a", "b", "c"],
  ["a", "b", "d", "e"],
  ["a", "b", "d", "i"],
  ["a", "b", "f"],
  ["a", "c", "f"],
  ["b", "a", "f"],
  ["users", "123"],
  ["users", "456", "settings"],
  ["admin", "users", "789"],
];

async function putAll(store: BaseStore, namespaces: string[][]): Promise<void> {
  for (const [i, ns] of namespaces.entries()) await store.put(ns, `k${i}`, { i });
}

function sharedCases(name: string, make: () => Make) {
  describe(`${name}: items`, () => {
    it("get returns the item with Dates; an update keeps createdAt; delete makes it null", async () => {
      const s = make()();
      expect(await s.get(["u", "1"], "missing")).toBeNull();
      await s.put(["u", "1"], "prefs", { theme: "dark", n: 1 });
      const a = await s.get(["u", "1"], "prefs");
      expect(a).toMatchObject({ value: { theme: "dark", n: 1 }, key: "prefs", namespace: ["u", "1"] });
      expect(a!.createdAt).toBeInstanceOf(Date);
      expect(a!.updatedAt).toBeInstanceOf(Date);
      // InMemoryStore updates the object it returned in place: keep the times.
      const [created, updated] = [a!.createdAt.getTime(), a!.updatedAt.getTime()];
      await sleep(5);
      await s.put(["u", "1"], "prefs", { theme: "light" });
      const b = await s.get(["u", "1"], "prefs");
      expect(b!.value).toEqual({ theme: "light" });
      expect(b!.createdAt.getTime()).toBe(created);
      expect(b!.updatedAt.getTime()).toBeGreaterThan(updated);
      expect(await s.get(["u", "2"], "prefs")).toBeNull();
      expect(await s.delete(["u", "1"], "prefs")).toBeUndefined();
      expect(await s.get(["u", "1"], "prefs")).toBeNull();
      await s.delete(["u", "1"], "never-there");
    });

    it("round-trips nested JSON", async () => {
      const s = make()();
      const value = { s: "héllo ✓", n: 1.5, i: -3, t: true, f: false, z: null, arr: [1, "two", { three: [3] }], o: { deep: { er: "x" } } };
      await s.put(["json"], "v", value);
      expect((await s.get(["json"], "v"))!.value).toEqual(value);
    });

    it("search lists items in the order of first put, under whole labels, paged", async () => {
      const s = make()();
      await s.put(["docs", "a"], "k1", { n: 1 });
      await s.put(["docs", "b"], "k2", { n: 2 });
      await s.put(["docs", "a"], "k3", { n: 3 });
      await s.put(["docsx"], "k4", { n: 4 });
      await s.put(["docs", "a"], "k1", { n: 5 }); // an update keeps its place
      const keys = async (prefix: string[], o: { limit?: number; offset?: number } = {}) => (await s.search(prefix, o)).map((r) => r.key);
      expect(await keys(["docs"])).toEqual(["k1", "k3", "k2"]);
      expect(await keys([])).toEqual(["k1", "k3", "k2", "k4"]);
      expect(await keys(["docs", "a"])).toEqual(["k1", "k3"]);
      expect(await keys(["doc"])).toEqual([]);
      expect(await keys(["docs"], { limit: 2 })).toEqual(["k1", "k3"]);
      expect(await keys(["docs"], { offset: 2 })).toEqual(["k2"]);
      const [first] = await s.search(["docs"]);
      expect(first).toMatchObject({ key: "k1", namespace: ["docs", "a"], value: { n: 5 }, score: undefined });
      await s.delete(["docs", "a"], "k1");
      await s.put(["docs", "a"], "k1", { n: 6 }); // put again after a delete: last in its namespace
      expect(await keys(["docs"])).toEqual(["k3", "k1", "k2"]);
    });

    it("search filters on top-level keys: equality and $eq $ne $gt $gte $lt $lte", async () => {
      const s = make()();
      await s.put(["f"], "a", { color: "red", score: 4.5, tag: "x" });
      await s.put(["f"], "b", { color: "red", score: 3 });
      await s.put(["f"], "c", { color: "green", score: 4 });
      await s.put(["f"], "d", { color: "blue", score: 3.5, tag: "x" });
      const keys = async (filter: Record<string, unknown>) => (await s.search(["f"], { filter })).map((r) => r.key);
      expect(await keys({ color: "red" })).toEqual(["a", "b"]);
      expect(await keys({ color: "red", tag: "x" })).toEqual(["a"]);
      expect(await keys({ score: 3 })).toEqual(["b"]);
      expect(await keys({ score: { $gt: 3.2 } })).toEqual(["a", "c", "d"]);
      expect(await keys({ score: { $gte: 4 }, color: "green" })).toEqual(["c"]);
      expect(await keys({ score: { $lt: 4 } })).toEqual(["b", "d"]);
      expect(await keys({ score: { $lte: 4, $gt: 3 } })).toEqual(["c", "d"]);
      expect(await keys({ color: { $ne: "red" } })).toEqual(["c", "d"]);
      expect(await keys({ color: { $eq: "blue" } })).toEqual(["d"]);
      expect(await keys({ tag: { $ne: "x" } })).toEqual(["b", "c"]); // a missing key is not "x"
      expect(await keys({ color: "purple" })).toEqual([]);
    });
  });

  describe(`${name}: listNamespaces`, () => {
    it("prefix, suffix, both, maxDepth, limit, offset, wildcards, no match", async () => {
      const s = make()();
      await putAll(s, NAMESPACES);
      expect(await s.listNamespaces({})).toEqual([
        ["a", "b", "c"],
        ["a", "b", "d", "e"],
        ["a", "b", "d", "i"],
        ["a", "b", "f"],
        ["a", "c", "f"],
        ["admin", "users", "789"],
        ["b", "a", "f"],
        ["users", "123"],
        ["users", "456", "settings"],
      ]);
      expect(await s.listNamespaces({ prefix: ["a", "b"] })).toHaveLength(4);
      expect(await s.listNamespaces({ suffix: ["f"] })).toEqual([["a", "b", "f"], ["a", "c", "f"], ["b", "a", "f"]]);
      expect(await s.listNamespaces({ prefix: ["a"], suffix: ["f"] })).toEqual([["a", "b", "f"], ["a", "c", "f"]]);
      expect(await s.listNamespaces({ prefix: ["a", "b"], maxDepth: 3 })).toEqual([["a", "b", "c"], ["a", "b", "d"], ["a", "b", "f"]]);
      expect(await s.listNamespaces({ prefix: ["a", "b"], limit: 2 })).toEqual([["a", "b", "c"], ["a", "b", "d", "e"]]);
      expect(await s.listNamespaces({ prefix: ["a", "b"], offset: 2 })).toEqual([["a", "b", "d", "i"], ["a", "b", "f"]]);
      expect(await s.listNamespaces({ prefix: ["a", "*", "f"] })).toEqual([["a", "b", "f"], ["a", "c", "f"]]);
      expect(await s.listNamespaces({ suffix: ["*", "f"] })).toHaveLength(3);
      expect(await s.listNamespaces({ prefix: ["nonexistent"] })).toEqual([]);
      expect(await s.listNamespaces({ prefix: ["users", "123"] })).toEqual([["users", "123"]]);
      expect(await s.listNamespaces({ prefix: ["users", "*"] })).toEqual([["users", "123"], ["users", "456", "settings"]]);
      expect(await s.listNamespaces({ suffix: ["*", "settings"] })).toEqual([["users", "456", "settings"]]);
      expect(await s.listNamespaces({ prefix: ["*", "users"], suffix: ["users", "*"] })).toEqual([["admin", "users", "789"]]);
      expect(await s.listNamespaces({ prefix: [] })).toHaveLength(9);
      expect(await s.listNamespaces({ maxDepth: 1 })).toEqual([["a"], ["admin"], ["b"], ["users"]]);
      expect(await s.listNamespaces({ prefix: ["a"], suffix: ["f"], maxDepth: 2, limit: 5, offset: 1 })).toEqual([["a", "c"]]);
    });

    it("pages through 20 namespaces; maxDepth lists each cut path once; an empty store lists none", async () => {
      const s = make()();
      expect(await s.listNamespaces({})).toEqual([]);
      const many = Array.from({ length: 20 }, (_, i) => ["p", `n${String(i).padStart(2, "0")}`]);
      await putAll(s, many);
      const pages: string[][] = [];
      for (let offset = 0; offset < 20; offset += 7) pages.push(...(await s.listNamespaces({ prefix: ["p"], limit: 7, offset })));
      expect(pages).toEqual(many);
      await s.put(["q", "x", "1"], "k", {});
      await s.put(["q", "x", "2"], "k", {});
      await s.put(["q", "y"], "k", {});
      expect(await s.listNamespaces({ prefix: ["q"], maxDepth: 2 })).toEqual([["q", "x"], ["q", "y"]]);
    });
  });

  describe(`${name}: namespaces and batches`, () => {
    it("put refuses empty, '.', ':', NUL, empty-label and 'langgraph'-rooted namespaces", async () => {
      const s = make()();
      for (const ns of [[], ["a.b"], ["a", ""], ["langgraph", "x"], ["a:b"], ["a\0b"]]) {
        await expect(s.put(ns, "k", { v: 1 }), JSON.stringify(ns)).rejects.toBeInstanceOf(InvalidNamespaceError);
      }
      await expect(s.get([], "k")).rejects.toThrow("Namespace cannot be empty.");
      await s.put(["foo", "langgraph", "foo"], "k", { v: 1 });
      expect((await s.get(["foo", "langgraph", "foo"], "k"))!.value).toEqual({ v: 1 });
      // batch() allows the reserved root, and the derived reads reach it.
      await s.batch([{ namespace: ["langgraph", "foo"], key: "k", value: { v: 2 } }]);
      expect((await s.get(["langgraph", "foo"], "k"))!.value).toEqual({ v: 2 });
      expect((await s.search(["langgraph"])).map((r) => r.key)).toEqual(["k"]);
      await s.delete(["langgraph", "foo"], "k");
      expect(await s.get(["langgraph", "foo"], "k")).toBeNull();
    });

    it("a batch answers in op order, its reads not seeing its puts; the last put of an address wins", async () => {
      const s = make()();
      await s.put(["b"], "k1", { v: 1 });
      const res = await s.batch([
        { namespace: ["b"], key: "k1" },
        { namespace: ["b"], key: "k2", value: { v: 2 } },
        { namespacePrefix: ["b"], limit: 10, offset: 0 },
        { matchConditions: undefined, limit: 10, offset: 0 },
        { namespace: ["b"], key: "k2" },
        { namespace: ["b"], key: "k3", value: { v: 3 } },
        { namespace: ["b"], key: "k3", value: { v: 33 } },
        { namespace: ["b"], key: "k1", value: null },
      ] as const);
      expect(res).toHaveLength(8);
      expect((res[0] as { value: unknown }).value).toEqual({ v: 1 });
      expect(res[1]).toBeNull();
      expect((res[2] as { key: string }[]).map((r) => r.key)).toEqual(["k1"]);
      expect(res[3]).toEqual([["b"]]);
      expect(res[4]).toBeNull();
      expect(res.slice(5)).toEqual([null, null, null]);
      expect((await s.search(["b"])).map((r) => [r.key, r.value])).toEqual([["k2", { v: 2 }], ["k3", { v: 33 }]]);
    });
  });

  describe(`${name}: semantic search`, () => {
    const embeddings = new CharacterEmbeddings(500);
    const e = (t: string) => embeddings.embed(t);

    it("keeps the index config; embeds whole values by default and ranks by score", async () => {
      const index = { dims: 500, embeddings };
      const s = make()({ index }) as BaseStore & { indexConfig?: IndexConfig };
      expect(s.indexConfig!.dims).toBe(500);
      expect(s.indexConfig!.embeddings).toBe(embeddings);
      await s.put(["v"], "doc1", { text: "short" });
      await s.put(["v"], "doc2", { text: "long text about many things" });
      await s.put(["v"], "doc3", { body: "long text as well" });
      const res = await s.search(["v"], { query: "long text" });
      expect(res.map((r) => r.key)).toEqual(expect.arrayContaining(["doc2", "doc3"]));
      for (const r of res) expect(r.score).toBeCloseTo(cosine(e("long text"), e(JSON.stringify(r.value, null, 2))), 5);
      for (let i = 1; i < res.length; i++) expect(res[i]!.score!).toBeLessThanOrEqual(res[i - 1]!.score!);
    });

    it("an update re-embeds: the old query's score drops and the new one's is higher", async () => {
      const s = make()({ index: { dims: 500, embeddings, fields: ["text"] } });
      await s.put(["v"], "doc1", { text: "Zany Xerxes quietly juggles" });
      await s.put(["v"], "doc2", { text: "nothing alike" });
      const [top] = await s.search(["v"], { query: "Zany Xerxes" });
      expect(top!.key).toBe("doc1");
      await s.put(["v"], "doc1", { text: "new text about dogs" });
      const after = (await s.search(["v"], { query: "Zany Xerxes" })).find((r) => r.key === "doc1")!;
      expect(after.score!).toBeLessThan(top!.score!);
      const dogs = (await s.search(["v"], { query: "new text about dogs" })).find((r) => r.key === "doc1")!;
      expect(dogs.score!).toBeGreaterThan(after.score!);
    });

    it("an item put with index false is returned unscored after the scored", async () => {
      const s = make()({ index: { dims: 500, embeddings, fields: ["text"] } });
      await s.put(["v"], "plain", { text: "unindexed words" }, false);
      await s.put(["v"], "indexed", { text: "indexed words" });
      const res = await s.search(["v"], { query: "indexed words", limit: 3 });
      expect(res.map((r) => [r.key, r.score === undefined])).toEqual([["indexed", false], ["plain", true]]);
    });

    it("filters combine with a query", async () => {
      const s = make()({ index: { dims: 500, embeddings, fields: ["text"] } });
      await s.put(["v"], "doc1", { text: "red apple", color: "red", score: 4.5 });
      await s.put(["v"], "doc2", { text: "red car", color: "red", score: 3 });
      await s.put(["v"], "doc3", { text: "green apple", color: "green", score: 4 });
      await s.put(["v"], "doc4", { text: "blue car", color: "blue", score: 3.5 });
      const keys = async (query: string, filter: Record<string, unknown>) => (await s.search(["v"], { query, filter })).map((r) => r.key);
      expect(await keys("apple", { color: "red" })).toEqual(["doc1", "doc2"]);
      expect(await keys("car", { color: "red" })).toEqual(["doc2", "doc1"]);
      const gt = await keys("bbbbluuu", { score: { $gt: 3.2 } });
      expect(gt).toHaveLength(3);
      expect(gt[0]).toBe("doc4");
      expect(await keys("apple", { score: { $gte: 4 }, color: "green" })).toEqual(["doc3"]);
    });

    it("pages by score with limit and offset", async () => {
      const s = make()({ index: { dims: 500, embeddings, fields: ["text"] } });
      for (let i = 0; i < 5; i++) await s.put(["v"], `d${i}`, { text: "t".repeat(i + 1) + "xyz".slice(0, i) });
      const p1 = await s.search(["v"], { query: "ttt", limit: 2 });
      const p2 = await s.search(["v"], { query: "ttt", limit: 2, offset: 2 });
      expect(p1).toHaveLength(2);
      expect(p2).toHaveLength(2);
      expect(p1[0]!.key).not.toBe(p2[0]!.key);
      expect(await s.search(["v"], { query: "ttt", limit: 10 })).toHaveLength(5);
    });

    it("embeds the store's fields: an item's best field scores it", async () => {
      const s = make()({ index: { dims: 500, embeddings, fields: ["key0", "key1", "key3"] } });
      await s.put(["v"], "doc1", { key1: "xxx", key2: "yyy", key3: "zzz" });
      await s.put(["v"], "doc2", { key0: "uuu", key1: "vvv", key2: "www", key3: "xxx" });
      const xxx = await s.search(["v"], { query: "xxx" });
      expect(xxx).toHaveLength(2);
      expect(xxx[0]!.score).toBe(xxx[1]!.score);
      const uuu = await s.search(["v"], { query: "uuu" });
      expect(uuu[0]!.key).toBe("doc2");
      expect(uuu[0]!.score!).toBeGreaterThan(uuu[1]!.score!);
      expect(uuu[0]!.score!).toBeCloseTo(xxx[0]!.score!, 5);
      for (const r of await s.search(["v"], { query: "www" })) expect(r.score!).toBeLessThan(xxx[0]!.score!);
    });

    it("a put's own fields replace the store's; index false stores none", async () => {
      const s = make()({ index: { dims: 500, embeddings, fields: ["key17"] } });
      await s.put(["v"], "doc3", { key0: "aaa", key1: "bbb", key2: "ccc" }, ["key0", "key1"]);
      await s.put(["v"], "doc4", { key1: "bbb", key2: "ccc", key3: "ggg" }, ["key1", "key3"]);
      expect((await s.search(["v"], { query: "aaa" }))[0]!.key).toBe("doc3");
      expect((await s.search(["v"], { query: "ggg" }))[0]!.key).toBe("doc4");
      const bbb = await s.search(["v"], { query: "bbb" });
      expect(bbb[0]!.score).toBe(bbb[1]!.score);
      for (const r of await s.search(["v"], { query: "ccc" })) expect(r.score!).toBeLessThan(bbb[0]!.score!);
      await s.put(["v"], "doc5", { key0: "hhh", key1: "iii" }, false);
      const hhh = await s.search(["v"], { query: "hhh" });
      expect(hhh).toHaveLength(3);
      expect(hhh.find((r) => r.key === "doc5")!.score).toBeUndefined();
    });

    it("embeds every text of a path with several, each its own field", async () => {
      const s = make()({ index: { dims: 500, embeddings, fields: ["tags[*]", "meta.title"] } });
      await s.put(["v"], "d1", { tags: ["qqq", "rrr"], meta: { title: "sss" } });
      await s.put(["v"], "d2", { tags: ["rrr"], meta: { title: "ttt" } });
      for (const [q, key] of [["qqq", "d1"], ["sss", "d1"], ["ttt", "d2"]] as const) {
        const [top] = await s.search(["v"], { query: q });
        expect([top!.key, top!.score]).toEqual([key, expect.closeTo(1, 5)]);
      }
      const r = await s.search(["v"], { query: "rrr" });
      expect(r.map((x) => x.score)).toEqual([expect.closeTo(1, 5), expect.closeTo(1, 5)]);
    });

    it("finds non-ASCII texts", async () => {
      const s = make()({ index: { dims: 500, embeddings, fields: ["text"] } });
      const texts = { zh: "这是中文", ja: "これは日本語です", ko: "이것은 한국어입니다", ru: "это русский", hi: "यह हिंदी है" };
      for (const [k, text] of Object.entries(texts)) await s.put(["nonascii"], k, { text });
      for (const [k, text] of Object.entries(texts)) expect((await s.search(["nonascii"], { query: text }))[0]!.key).toBe(k);
    });

    it("without an index a query is ignored: first-put order, unscored", async () => {
      const s = make()();
      await s.put(["v"], "a", { text: "zzz" });
      await s.put(["v"], "b", { text: "aaa" });
      expect((await s.search(["v"], { query: "aaa" })).map((r) => [r.key, r.score])).toEqual([["a", undefined], ["b", undefined]]);
    });
  });
}

sharedCases("InMemoryStore (the reference)", () => (opts) => new InMemoryStore(opts));

describe("the texts to embed, as InMemoryStore's", () => {
  it("tokenizes and extracts paths", () => {
    expect(tokenizePath("a.b[*].c")).toEqual(["a", "b", "[*]", "c"]);
    expect(tokenizePath("x.{a,b.c}")).toEqual(["x", "{a,b.c}"]);
    const v = { name: "t", n: 1, ok: true, items: [{ v: "first" }, { v: "second" }], info: { a: { b: "ab" }, c: 2 } };
    expect(getTextAtPath(v, "$")).toEqual([JSON.stringify(v, null, 2)]);
    expect(getTextAtPath(v, "name")).toEqual(["t"]);
    expect(getTextAtPath(v, ["ok"])).toEqual(["true"]);
    expect(getTextAtPath(v, "items[-1].v")).toEqual(["second"]);
    expect(getTextAtPath(v, "items[*].v")).toEqual(["first", "second"]);
    expect(getTextAtPath(v, "info.*")).toEqual([JSON.stringify({ b: "ab" }, null, 2), "2"]);
    expect(getTextAtPath(v, "info.{a.b,c}")).toEqual(["ab", "2"]);
    expect(getTextAtPath(v, "items[9].v")).toEqual([]);
    expect(getTextAtPath(v, "nope")).toEqual([]);
  });
});

for (const backend of BACKENDS) {
  describe(`StepwellStore (${backend})`, () => {
    let sidecar: Sidecar;
    let client: StepwellClient;
    beforeAll(async () => {
      sidecar = await startBackend(backend as BackendName);
      client = new StepwellClient({ target: sidecar.target });
    });
    afterAll(async () => {
      client?.close();
      await sidecar?.stop();
    });
    const make: () => Make = () => (opts) => new StepwellStore(client, { namespace: freshNamespace(`lgjs-store-${backend}`), ...opts });

    sharedCases(`StepwellStore (${backend})`, make);

    describe("stepwell's own", () => {
      it("lists only namespaces that hold items (InMemoryStore lists emptied ones too)", async () => {
        const s = make()();
        await s.put(["x", "1"], "k", {});
        await s.put(["x", "2"], "k", {});
        await s.delete(["x", "1"], "k");
        expect(await s.listNamespaces({})).toEqual([["x", "2"]]);
      });

      it("a delete drops the item's vectors: put again with index false, it is unscored", async () => {
        const embeddings = new CharacterEmbeddings(64);
        const s = make()({ index: { dims: 64, embeddings, fields: ["text"] } });
        await s.put(["v"], "d", { text: "abc" });
        expect((await s.search(["v"], { query: "abc" }))[0]!.score).toBeCloseTo(1, 5);
        await s.delete(["v"], "d");
        await s.put(["v"], "d", { text: "abc" }, false);
        expect((await s.search(["v"], { query: "abc" }))[0]!.score).toBeUndefined();
        // Without a delete, index false keeps the stored vectors (as InMemoryStore).
        await s.put(["v"], "e", { text: "abc" });
        await s.put(["v"], "e", { text: "zzz" }, false);
        expect((await s.search(["v"], { query: "abc" })).find((r) => r.key === "e")!.score).toBeCloseTo(1, 5);
      });

      it("with a query, the offset applies to the one ordering: scored, then unscored", async () => {
        const embeddings = new CharacterEmbeddings(64);
        const s = make()({ index: { dims: 64, embeddings, fields: ["text"] } });
        await s.put(["v"], "u1", { text: "a" }, false);
        await s.put(["v"], "s1", { text: "abc" });
        await s.put(["v"], "u2", { text: "b" }, false);
        await s.put(["v"], "s2", { text: "abd" });
        const page = async (offset: number) => (await s.search(["v"], { query: "abc", limit: 2, offset })).map((r) => r.key);
        expect(await page(0)).toEqual(["s1", "s2"]);
        expect(await page(1)).toEqual(["s2", "u1"]);
        expect(await page(2)).toEqual(["u1", "u2"]);
        expect(await page(3)).toEqual(["u2"]);
      });

      it("times to live: reads refresh them by default, an item past its ttl is gone", async () => {
        const ns = freshNamespace(`lgjs-store-ttl-${backend}`);
        const ttl = 1.5 / 60; // 1.5 s
        const refreshing = new StepwellStore(client, { namespace: ns, ttl: { defaultTtl: ttl } });
        const plain = new StepwellStore(client, { namespace: ns, ttl: { defaultTtl: ttl, refreshOnRead: false } });
        await refreshing.put(["t"], "kept", { v: 1 });
        await refreshing.put(["t"], "left", { v: 2 });
        await refreshing.put(["t"], "forever", { v: 3 }, undefined, { ttl: null });
        await plain.put(["gone"], "x", { v: 4 });
        for (let i = 0; i < 3; i++) {
          await sleep(800);
          expect((await refreshing.get(["t"], "kept"))?.value).toEqual({ v: 1 });
        }
        // "left" was put 2.4 s ago and never refreshed.
        expect(await plain.get(["t"], "left")).toBeNull();
        expect((await plain.search(["t"])).map((r) => r.key)).toEqual(["kept", "forever"]);
        await sleep(1700);
        expect((await plain.search(["t"])).map((r) => r.key)).toEqual(["forever"]);
        expect(await plain.listNamespaces({})).toEqual([["t"]]); // ["gone"]'s only item expired
      });

      it("filters as memory.proto has them: subsets, arrays, missing is null, JSON types, strings by code point", async () => {
        const s = make()();
        await s.put(["f"], "a", { o: { x: 1, y: 2 }, tags: ["p", "q"], flag: true, s: "c", n: 2 });
        await s.put(["f"], "b", { o: { x: 2 }, tags: ["p"], flag: false, s: "a", n: 2.5, extra: 1 });
        await s.put(["f"], "c", { s: 5, n: "3", flag: 1 });
        const keys = async (filter: Record<string, unknown>) => (await s.search(["f"], { filter })).map((r) => r.key);
        expect(await keys({ o: { x: 1 } })).toEqual(["a"]);
        expect(await keys({ o: {} })).toEqual(["a", "b"]);
        expect(await keys({ tags: ["p", "q"] })).toEqual(["a"]);
        expect(await keys({ tags: ["p"] })).toEqual(["b"]);
        expect(await keys({ extra: null })).toEqual(["a", "c"]);
        expect(await keys({ flag: true })).toEqual(["a"]);
        expect(await keys({ flag: 1 })).toEqual(["c"]);
        expect(await keys({ s: { $gt: "b" } })).toEqual(["a"]);
        expect(await keys({ s: { $lte: "c" } })).toEqual(["a", "b"]);
        expect(await keys({ n: { $gte: 2.5 } })).toEqual(["b"]);
        expect(await keys({ n: { $ne: 2 } })).toEqual(["b", "c"]);
        expect(await keys({ missing: { $gt: 0 } })).toEqual([]);
      });

      it("fromAddress makes a store with its own client; refused requests are StepwellErrors", async () => {
        const ns = freshNamespace(`lgjs-store-addr-${backend}`);
        const s = StepwellStore.fromAddress(sidecar.target, { namespace: ns, timeoutMs: 5000 });
        try {
          await s.put(["a"], "k", { v: 1 });
          expect((await new StepwellStore(client, { namespace: ns }).get(["a"], "k"))!.value).toEqual({ v: 1 });
          await expect(s.put(["a"], "", { v: 1 })).rejects.toBeInstanceOf(InvalidArgument);
        } finally {
          s.stop();
        }
      });

      it("the client's memory calls: put, get, search, listPaths and deleteItems", async () => {
        const namespace = freshNamespace(`lgjs-memory-${backend}`);
        const enc = (v: unknown) => new TextEncoder().encode(JSON.stringify(v));
        const put = await client.putItems({
          namespace,
          writes: [
            { path: ["u", "a"], key: "k1", value: enc({ n: 1 }), vectors: [{ field: "t", values: [1, 0] }] },
            { path: ["u", "b"], key: "k2", value: enc({ n: 2 }) },
          ],
        });
        expect(put.recordedAt).toBeDefined();
        const got = await client.getItems({ namespace, items: [{ path: ["u", "b"], key: "k2" }, { path: ["u", "a"], key: "k1" }, { path: ["u", "b"], key: "k2" }] });
        expect(got.items.map((i) => i.key)).toEqual(["k2", "k1"]);
        const hits = await client.searchItems({ namespace, pathPrefix: ["u"], queryVector: [1, 0] });
        expect(hits.hits.map((h) => [h.item!.key, h.score])).toEqual([["k1", 1], ["k2", undefined]]);
        const paths = await client.listPaths({ namespace, matches: [{ end: PathMatch_End.PREFIX, labels: ["u"] }] });
        expect(paths.paths.map((p) => p.labels)).toEqual([["u", "a"], ["u", "b"]]);
        expect((await client.deleteItems({ namespace, pathPrefix: ["u"] })).deleted).toBe(2n);
        expect((await client.getItems({ namespace, items: [{ path: ["u", "a"], key: "k1" }] })).items).toEqual([]);
        await expect(client.listPaths({ namespace, matches: [{ end: PathMatch_End.UNSPECIFIED, labels: ["u"] }] })).rejects.toBeInstanceOf(InvalidArgument);
      });
    });
  });
}
