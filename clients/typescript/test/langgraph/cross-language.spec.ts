// One store, two languages, on SQLite and on Postgres: a Python graph (on
// stepwell.langgraph's StepwellSaver, test/langgraph/py_graph.py run by
// STEPWELL_TEST_PYTHON) and a JavaScript graph (on this client's
// StepwellSaver) run at the same time against one sidecar, in one namespace,
// both authenticating with the one token of one auth file, over mutual TLS.
// Both savers keep the same records, so the operator's `stepwell records ls`,
// each saver's cross-thread list and each saver's deleteThread reach both
// languages' threads. What each side can read of the other's checkpoints
// depends on LangGraph's two serializers, and the spec states what holds:
// Python reads the JSON the JavaScript serializer writes, while the
// JavaScript serializer cannot read Python's msgpack. So a Python graph
// continues a thread a JavaScript graph started (both savers make channel
// versions alike), and the JavaScript saver then refuses the thread's newer,
// Python-written checkpoints by name.
// LangGraph.js does not copy a run's config metadata into its checkpoints (as
// Python's LangGraph does), so the filter both languages' checkpoints match
// is one on LangGraph's own keys.
import { execFile, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { Annotation, END, START, StateGraph } from "@langchain/langgraph";
import type { CheckpointTuple } from "@langchain/langgraph-checkpoint";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { StepwellClient, StepwellError } from "../../src/index.js";
import { StepwellSaver } from "../../src/langgraph/index.js";
import { PythonSide } from "../python-side.js";
import { PKG_ROOT, Security, freshNamespace, startSidecar, stepwellBin, type Sidecar } from "../sidecar.js";
import { BACKENDS, postgresUrl } from "./backends.js";

const PY_GRAPH = resolve(PKG_ROOT, "test/langgraph/py_graph.py");
const MAKE_PKI = resolve(PKG_ROOT, "../../scripts/make-test-pki");
const PEER_WAIT_MS = 60_000;
/** A metadata filter both languages' checkpoints match: LangGraph's own keys, which both write alike. */
const LOOP = { source: "loop" };

/** The Python side, one process for this file's commands. */
const pythonSide = new PythonSide(PY_GRAPH, "import stepwell.langgraph, langgraph.graph");
afterAll(() => pythonSide.close());

/** The store and the credentials both languages share. */
interface Shared {
  sidecar: Sidecar;
  security: Security;
  namespace: string;
}

/** Runs one command of py_graph.py and resolves to its JSON answer (its last line); rejects when it fails. */
async function py(shared: Shared, command: string, args: object): Promise<any> {
  const { sidecar, security, namespace } = shared;
  const out = await pythonSide.run([sidecar.target, namespace, security.dir, command, JSON.stringify(args)]);
  return JSON.parse(out.split("\n").at(-1)!);
}

/** `stepwell records ls --json` of the namespace's checkpoints, through the operator CLI with the shared token. */
async function recordsLs(shared: Shared, metadata: object): Promise<Array<{ turn_id: string; content_type: string; metadata: Record<string, unknown> }>> {
  const d = shared.security.dir;
  const { stdout } = await promisify(execFile)(stepwellBin(), [
    "records", "ls", "--json", "--kind", "checkpoint", "--metadata", JSON.stringify(metadata),
    "--target", shared.sidecar.target, "--namespace", shared.namespace,
    "--tls-ca", join(d, "ca.pem"), "--tls-cert", join(d, "client.pem"), "--tls-key", join(d, "client.key"), "--auth-token-file", join(d, "token"),
  ]);
  return stdout.split("\n").filter((l) => l !== "").map((l) => JSON.parse(l));
}

const State = Annotation.Root({ log: Annotation<string[]>({ reducer: (a, b) => a.concat(b), default: () => [] }) });

/** Polls the store until the thread has a checkpoint (read as records: the peer's may be in a format this side cannot read). */
async function waitForThread(saver: StepwellSaver, threadId: string): Promise<void> {
  const deadline = Date.now() + PEER_WAIT_MS;
  while ((await saver.client.listRecords({ namespace: saver.namespace, turnId: threadId, kind: "checkpoint", pageSize: 1 })).entries.length === 0) {
    if (Date.now() > deadline) throw new Error(`thread ${threadId} had no checkpoint after ${PEER_WAIT_MS} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The JavaScript graph, of the Python one's shape: three nodes in a row, the second waiting for the peer's thread. */
function jsGraph(saver: StepwellSaver, peer?: string) {
  const node = (name: string) => async () => {
    if (name === "s2" && peer) await waitForThread(saver, peer);
    return { log: [`js:${name}`] };
  };
  return new StateGraph(State)
    .addNode("s1", node("s1"))
    .addNode("s2", node("s2"))
    .addNode("s3", node("s3"))
    .addEdge(START, "s1")
    .addEdge("s1", "s2")
    .addEdge("s2", "s3")
    .addEdge("s3", END)
    .compile({ checkpointer: saver });
}

const jsConfig = (thread: string, tag: string) => ({ configurable: { thread_id: thread }, metadata: { lang: "js", xlang: tag } });

async function collect(it: AsyncIterable<CheckpointTuple>): Promise<CheckpointTuple[]> {
  const all: CheckpointTuple[] = [];
  for await (const t of it) all.push(t);
  return all;
}

/** Starts a sidecar serving mutual TLS with an auth file of its own, on the backend's store. */
async function startShared(backend: string): Promise<Shared> {
  const dir = mkdtempSync(join(tmpdir(), "stepwell-xlang-pki-"));
  const made = spawnSync(MAKE_PKI, [dir, "spiffe://stepwell.test/cross-language"], { encoding: "utf8" });
  if (made.status !== 0) throw new Error(`scripts/make-test-pki failed: ${made.stderr}`);
  const security = new Security(dir);
  const sidecar = await startSidecar({ security, ...(backend === "postgres" ? { databaseUrl: postgresUrl() } : {}) });
  return { sidecar, security, namespace: freshNamespace(`lgjs-xlang-${backend}`) };
}

/** One backend's shared sidecar, the JavaScript saver, and what the two graphs returned when they ran at once. */
interface Run {
  shared: Shared;
  saver: StepwellSaver;
  /** The tag in the Python run's config metadata. */
  tag: string;
  pyRun: { log: string[] };
  jsRun: { log: string[] };
}

const pyThread = "py-thread";
const jsThread = "js-thread";

/** The two graphs' runs, and the auth both passed. */
function ranTogether(run: Run): void {
  it("both graphs ran their steps at once, on one sidecar that refuses a caller without the token", async () => {
    const { shared, pyRun, jsRun } = run;
    expect(pyRun).toEqual({ log: ["py:in", "py:s1", "py:s2", "py:s3"] });
    expect(jsRun.log).toEqual(["js:in", "js:s1", "js:s2", "js:s3"]);
    const anonymous = new StepwellClient({ target: shared.sidecar.target, namespace: shared.namespace, tls: shared.security.tls(), maxAttempts: 1 });
    try {
      const err = await anonymous.listRecords({ kind: "checkpoint", pageSize: 1 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(StepwellError);
      expect((err as StepwellError).code).toBe("UNAUTHENTICATED");
    } finally {
      anonymous.close();
    }
  });
}

/** What the operator CLI and each saver's cross-thread list see of both languages' threads. */
function listsSeeBoth(run: Run): void {
  it("stepwell records ls lists both languages' threads, each checkpoint in its serializer's format", async () => {
    const { shared, tag } = run;
    const rows = await recordsLs(shared, LOOP);
    const byThread = (t: string) => rows.filter((r) => r.turn_id === t);
    // One checkpoint after __start__ and one per node: four a thread.
    expect(byThread(pyThread)).toHaveLength(4);
    expect(byThread(jsThread)).toHaveLength(4);
    expect(rows).toHaveLength(8);
    expect(new Set(byThread(pyThread).map((r) => `${r.metadata.lang} ${r.content_type}`))).toEqual(new Set(["py msgpack"]));
    // LangGraph.js does not copy a run's config metadata into its checkpoints (Python's LangGraph does).
    expect(new Set(byThread(jsThread).map((r) => `${r.metadata.lang} ${r.content_type}`))).toEqual(new Set(["undefined json"]));
    expect((await recordsLs(shared, { xlang: tag })).map((r) => r.turn_id)).toEqual(Array(5).fill(pyThread));
  });

  it("Python's cross-thread list with a metadata filter sees both languages' checkpoints", async () => {
    const { shared } = run;
    const listed: Array<{ thread_id: string; lang: string | null; step: number }> = await py(shared, "list", { filter: LOOP });
    expect(listed).toHaveLength(8);
    const steps = (t: string) => listed.filter((c) => c.thread_id === t).map((c) => `${c.lang} ${c.step}`);
    expect(steps(pyThread)).toEqual(["py 3", "py 2", "py 1", "py 0"]);
    expect(steps(jsThread)).toEqual(["null 3", "null 2", "null 1", "null 0"]);
  });

  it("JavaScript's cross-thread list selects both languages' checkpoints, and can decode only its own", async () => {
    const { shared, saver } = run;
    // The store finds Python's checkpoints for the JavaScript saver too ...
    const page = await saver.client.listRecords({ namespace: shared.namespace, kind: "checkpoint", metadataContains: new TextEncoder().encode(JSON.stringify(LOOP)) });
    expect(page.entries.map((e) => e.record!.turnId).sort()).toEqual([...Array(4).fill(jsThread), ...Array(4).fill(pyThread)]);
    // ... but its serializer cannot decode them, so a list that reaches one fails, naming the format.
    await expect(collect(saver.list({}, { filter: LOOP }))).rejects.toThrow("Unknown serialization type: msgpack");
    const own = await collect(saver.list({ configurable: { thread_id: jsThread } }, { filter: LOOP }));
    expect(own.map((t) => t.metadata?.step)).toEqual([3, 2, 1, 0]);
  });
}

/** What each language's serializer reads of the other's threads, and whether a graph continues the other's thread. */
function serializers(run: Run): void {
  it("Python's serializer reads a JavaScript thread: its channel values and metadata", async () => {
    const { shared, saver } = run;
    const mine = await saver.getTuple({ configurable: { thread_id: jsThread } });
    const got = await py(shared, "get", { thread: jsThread });
    expect(got.found).toBe(true);
    expect(got.id).toBe(mine!.checkpoint.id);
    expect(got.values.log).toEqual(["js:in", "js:s1", "js:s2", "js:s3"]);
    expect(got.metadata).toEqual({ source: "loop", step: 3, parents: {} });
  });

  it("the JavaScript serializer cannot read a Python thread: getTuple fails, naming the format", async () => {
    const { saver, tag } = run;
    await expect(saver.getTuple({ configurable: { thread_id: pyThread } })).rejects.toThrow("Unknown serialization type: msgpack");
    // Nor can a JavaScript graph continue it: it reads the thread's newest checkpoint first.
    await expect(jsGraph(saver).invoke({ log: ["js:more"] }, jsConfig(pyThread, tag))).rejects.toThrow("Unknown serialization type: msgpack");
  });

  it("a Python graph continues a thread a JavaScript graph started; JavaScript then cannot read it", async () => {
    const { shared, saver } = run;
    const thread = "js-then-py";
    await jsGraph(saver).invoke({ log: ["js:in"] }, jsConfig(thread, "cont"));
    const jsNewest = await saver.getTuple({ configurable: { thread_id: thread } });
    // Both savers make channel versions alike ("<32-digit count>.<random fraction>"), so Python compares them.
    expect(Object.values(jsNewest!.checkpoint.channel_versions).every((v) => /^\d{32}\./.test(String(v)))).toBe(true);
    const out = await py(shared, "run", { thread, tag: "cont", input: ["py:in"] });
    // Python read the JavaScript graph's state (JSON) and went on from it.
    expect(out).toEqual({ log: ["js:in", "js:s1", "js:s2", "js:s3", "py:in", "py:s1", "py:s2", "py:s3"] });
    const after = await py(shared, "get", { thread });
    expect(after.metadata).toMatchObject({ lang: "py", step: 8 });
    expect(after.id > jsNewest!.checkpoint.id).toBe(true);
    // Its checkpoints are msgpack: the JavaScript saver refuses them by name.
    await expect(saver.getTuple({ configurable: { thread_id: thread } })).rejects.toThrow(/Unknown serialization type: msgpack/);
    // The JavaScript graph's own checkpoints still read.
    expect((await saver.getTuple({ configurable: { thread_id: thread, checkpoint_id: jsNewest!.checkpoint.id } }))?.checkpoint.id).toBe(jsNewest!.checkpoint.id);
  });
}

/** deleteThread from either language removes the other's thread. */
function deletesReachBoth(run: Run): void {
  it("Python's delete_thread removes a JavaScript thread", async () => {
    const { shared, saver } = run;
    const config = { configurable: { thread_id: jsThread } };
    expect(await saver.getTuple(config)).toBeDefined();
    expect(await py(shared, "delete", { thread: jsThread })).toEqual({ deleted: jsThread });
    expect(await saver.getTuple(config)).toBeUndefined();
    expect(await collect(saver.list(config))).toEqual([]);
    expect((await recordsLs(shared, {})).filter((r) => r.turn_id === jsThread)).toEqual([]);
  });

  it("JavaScript's deleteThread removes a Python thread", async () => {
    const { shared, saver, tag } = run;
    expect((await py(shared, "get", { thread: pyThread })).found).toBe(true);
    await saver.deleteThread(pyThread);
    expect(await py(shared, "get", { thread: pyThread })).toEqual({ found: false });
    expect(await py(shared, "list", { filter: { xlang: tag } })).toEqual([]);
    expect((await recordsLs(shared, {})).filter((r) => r.turn_id === pyThread)).toEqual([]);
  });
}

for (const backend of BACKENDS) {
  describe(`one store, two languages (${backend})`, () => {
    const run = { tag: `run-${backend}-${process.pid}` } as Run;
    beforeAll(async () => {
      pythonSide.ready(); // fails the whole describe, clearly, without a Python to drive
      run.shared = await startShared(backend);
      const { shared, tag } = run;
      run.saver = StepwellSaver.fromAddress(shared.sidecar.target, { namespace: shared.namespace, token: shared.security.token, tls: shared.security.tls() });
      // Each graph's second node waits for the other's thread, so neither finishes before the other has started.
      [run.pyRun, run.jsRun] = await Promise.all([
        py(shared, "run", { thread: pyThread, tag, peer: jsThread, input: ["py:in"] }),
        jsGraph(run.saver, pyThread).invoke({ log: ["js:in"] }, jsConfig(jsThread, tag)),
      ]);
    });
    afterAll(async () => {
      await run.saver?.close();
      await run.shared?.sidecar.stop();
      if (run.shared) rmSync(run.shared.security.dir, { recursive: true, force: true });
    });
    ranTogether(run);
    listsSeeBoth(run);
    serializers(run);
    deletesReachBoth(run);
  });
}
