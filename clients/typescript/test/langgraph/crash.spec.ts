// A crash mid-run, on SQLite and on Postgres: a worker process runs the
// chain graph (graphs.ts) and is SIGKILLed while it is inside a node, after
// the checkpoints of the nodes before were stored; a new process resumes the
// thread. The run must end with the right state, the nodes that completed
// before the crash must not run again (the side-effect log, kept outside the
// store, shows each once), and the thread's history must be one unbroken
// chain, as if the run had never stopped. Fenced, the killed worker holds the
// thread until its lease lapses, and the new one leases it anew.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { StateSnapshot } from "@langchain/langgraph";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RecordState } from "../../src/index.js";
import { StepwellSaver, threadLeaseKey } from "../../src/langgraph/index.js";
import { freshNamespace, type Sidecar } from "../sidecar.js";
import { BACKENDS, startBackend } from "./backends.js";
import { chainGraph, logLines, waitFor } from "./graphs.js";
import { startWorker } from "./workers.js";

async function all<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const x of it) out.push(x);
  return out;
}

for (const backend of BACKENDS) {
  describe(`a worker killed mid-run (${backend})`, () => {
    let sidecar: Sidecar;
    let dir: string;
    beforeAll(async () => {
      sidecar = await startBackend(backend);
      dir = mkdtempSync(join(tmpdir(), "lgjs-crash-"));
    });
    afterAll(async () => {
      await sidecar?.stop();
      if (dir) rmSync(dir, { recursive: true, force: true });
    });

    it("is SIGKILLed inside a node; a new process resumes the thread without running earlier nodes again", async () => {
      await crashAndResume(sidecar.target, dir, backend, false);
    });

    it("holds the thread, fenced, until its lease lapses; then a new fenced process resumes it the same way", async () => {
      await crashAndResume(sidecar.target, dir, backend, true);
    });
  });
}

/**
 * Starts a worker on a fresh thread, SIGKILLs it inside blocker once the
 * checkpoint before blocker is stored, and resumes the thread in a new
 * worker process; fenced, the new worker starts once the killed one's lease
 * lapsed (as the sidecar says), and leases the thread anew.
 */
async function crashAndResume(target: string, dir: string, backend: string, fenced: boolean): Promise<void> {
  const name = `${backend}-${fenced ? "fenced" : "plain"}`;
  const namespace = freshNamespace(`lgjs-e2e-crash-${name}`);
  const logFile = join(dir, `${name}.log`);
  const gateFile = join(dir, `${name}.gate`);
  const base = { target, namespace, threadId: "crash", logFile, gateFile, fenced, leaseMs: 3000 };
  const observer = StepwellSaver.fromAddress(target, { namespace });
  // The test reads the thread through a graph of its own, which never runs.
  const graph = chainGraph({ who: "observer", logFile: join(dir, "unused.log") }, observer);
  const config = { configurable: { thread_id: "crash" } };
  const key = threadLeaseKey("crash");
  try {
    const first = startWorker({ ...base, who: "w1", input: { topic: "t" } });
    try {
      await first.waitLine("blocked");
      // Inside blocker, with the checkpoint n2 ended with stored: the store says blocker is next.
      await waitFor(async () => (await graph.getState(config)).next.includes("blocker"), "the checkpoint before blocker to be stored");
      expect(logLines(logFile)).toEqual(["w1:n1", "w1:n2"]);
    } finally {
      await first.kill();
    }
    if (fenced) await waitFor(async () => (await observer.client.get(key, { namespace })).state === RecordState.EXPIRED, "the killed worker's lease to lapse");

    writeFileSync(gateFile, "");
    const { done } = await startWorker({ ...base, who: "w2" }).outcome();
    expect(done?.visited).toEqual(["n1@w1", "n2@w1", "blocker@w2", "n4@w2"]);
    expect(logLines(logFile)).toEqual(["w1:n1", "w1:n2", "w2:blocker", "w2:n4"]);
    const final = await graph.getState(config);
    expect(final.values).toEqual({ topic: "t", visited: ["n1@w1", "n2@w1", "blocker@w2", "n4@w2"] });
    expect(final.next).toEqual([]);
    checkUnbroken(await all(graph.getStateHistory(config)));
    // Every checkpoint the store holds of the thread is on that chain.
    expect(await all(observer.list({ configurable: { thread_id: "crash" } }))).toHaveLength(6);
    // Fenced, the second worker leased the thread (the key's second attempt) and released it when it closed.
    if (fenced) expect(await observer.client.get(key, { namespace })).toMatchObject({ state: RecordState.RELEASED, attempt: 2 });
  } finally {
    await observer.close();
  }
}

/** One chain from the input checkpoint to the end: steps -1..4, each checkpoint the parent of the next. */
function checkUnbroken(history: StateSnapshot[]): void {
  expect(history.map((s) => s.metadata?.step)).toEqual([4, 3, 2, 1, 0, -1]);
  expect(history.map((s) => s.metadata?.source)).toEqual(["loop", "loop", "loop", "loop", "loop", "input"]);
  expect(history.map((s) => s.values.visited)).toEqual([
    ["n1@w1", "n2@w1", "blocker@w2", "n4@w2"],
    ["n1@w1", "n2@w1", "blocker@w2"],
    ["n1@w1", "n2@w1"],
    ["n1@w1"],
    [],
    [],
  ]);
  for (let i = 0; i + 1 < history.length; i++) {
    expect(history[i].parentConfig?.configurable?.checkpoint_id).toBe(history[i + 1].config.configurable?.checkpoint_id);
  }
  expect(history.at(-1)!.parentConfig).toBeUndefined();
}
