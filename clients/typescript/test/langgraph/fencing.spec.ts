// Fencing of a real graph's thread, seen by both workers, on SQLite and on
// Postgres: worker A is a process of its own (graph-worker.js) with a fenced
// saver, worker B is the test process with another fenced saver on another
// client. While A runs the thread, B's invoke fails with ThreadBusy and
// stores nothing; once A's lease lapsed (A blocked in a node, putting
// nothing), B takes the thread over, A's next put fails with LeaseLost and
// stores nothing, and B completes the run from A's last checkpoint. A saver
// whose lease lapsed between runs leases the thread again if no one else
// leased it since, and gets LeaseLost if someone did.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RecordState } from "../../src/index.js";
import { LeaseLost, StepwellSaver, ThreadBusy, threadLeaseKey } from "../../src/langgraph/index.js";
import { freshNamespace, type Sidecar } from "../sidecar.js";
import { BACKENDS, startBackend } from "./backends.js";
import { chainGraph, logLines, storeSnapshot, waitFor } from "./graphs.js";
import { startWorker, type Worker } from "./workers.js";

const config = { configurable: { thread_id: "t" } };

/**
 * Waits until worker A is inside blocker and what it put before is stored:
 * the checkpoint before blocker, as B's graph reads it, and the writes of
 * every step before, which LangGraph's default durability ("async") puts
 * while the graph runs on, so they may land after a later checkpoint.
 */
async function untilBlocked(a: Worker, graphB: ReturnType<typeof chainGraph>, saverB: StepwellSaver, namespace: string): Promise<void> {
  await a.waitLine("blocked");
  await waitFor(async () => (await graphB.getState(config)).next.includes("blocker"), "A's checkpoint before blocker to be stored");
  await waitFor(async () => {
    const lines = await storeSnapshot(saverB.client, namespace, "t");
    const checkpoints = lines.filter((l) => l.startsWith("checkpoint |")).map((l) => l.split(" | ")[2]).sort();
    const written = new Set(lines.filter((l) => l.startsWith("write |")).map((l) => l.split(" | ")[3]));
    return checkpoints.length > 1 && checkpoints.slice(0, -1).every((id) => written.has(id));
  }, "the writes of A's steps before blocker to be stored");
}

/**
 * Runs fn under B's lease of the thread, asking again (bounded) while the
 * thread is busy: B's Begin succeeds once A's lease lapsed.
 */
async function takeOver<T>(saver: StepwellSaver, fn: () => Promise<T>): Promise<T> {
  let result: { value: T } | undefined;
  await waitFor(async () => {
    try {
      result = { value: await saver.threadLease("t", fn) };
      return true;
    } catch (err) {
      if (err instanceof ThreadBusy) return false;
      throw err;
    }
  }, "B's lease on the thread once A's lapsed");
  return result!.value;
}

for (const backend of BACKENDS) {
  describe(`fencing a graph's thread between two workers (${backend})`, () => {
    let sidecar: Sidecar;
    let dir: string;
    beforeAll(async () => {
      sidecar = await startBackend(backend);
      dir = mkdtempSync(join(tmpdir(), "lgjs-fence-"));
    });
    afterAll(async () => {
      await sidecar?.stop();
      if (dir) rmSync(dir, { recursive: true, force: true });
    });

    /** A fresh namespace, log and gate for one test, and worker B's saver and graph in this process. */
    function setup(name: string) {
      const namespace = freshNamespace(`lgjs-e2e-${name}-${backend}`);
      const logFile = join(dir, `${name}-${backend}.log`);
      const gateFile = join(dir, `${name}-${backend}.gate`);
      const saverB = StepwellSaver.fromAddress(sidecar.target, { namespace, fenced: true });
      const graphB = chainGraph({ who: "B", logFile }, saverB);
      const a = { target: sidecar.target, namespace, threadId: "t", who: "A", logFile, gateFile, fenced: true, input: { topic: "a" } };
      return { namespace, logFile, gateFile, saverB, graphB, a };
    }

    it("B invoking the thread A runs gets ThreadBusy before anything of B's is stored, and gets the thread once A let go", async () => {
      const { namespace, logFile, gateFile, saverB, graphB, a } = setup("busy");
      const workerA = startWorker({ ...a, holdLease: true });
      try {
        await untilBlocked(workerA, graphB, saverB, namespace);
        const before = await storeSnapshot(saverB.client, namespace, "t");
        // Under threadLease, B is refused before its run starts: none of B's nodes runs.
        const leased = await saverB.threadLease("t", () => graphB.invoke({ topic: "b" }, config)).catch((e: unknown) => e);
        expect(leased).toBeInstanceOf(ThreadBusy);
        expect((leased as ThreadBusy).threadId).toBe("t");
        expect(logLines(logFile)).toEqual(["A:n1", "A:n2"]);
        // A plain invoke is refused at its first put. LangGraph's default
        // durability ("async") runs the next nodes while a put is under way,
        // so B's nodes may run, but the invoke fails with ThreadBusy and
        // every put of B's is refused.
        const err = await graphB.invoke({ topic: "b" }, config).catch((e: unknown) => e);
        expect(err).toBeInstanceOf(ThreadBusy);
        expect((err as ThreadBusy).threadId).toBe("t");
        // The thread's checkpoints, writes and blobs are exactly A's.
        expect(await storeSnapshot(saverB.client, namespace, "t")).toEqual(before);

        writeFileSync(gateFile, "");
        const { done } = await workerA.outcome();
        expect(done?.visited).toEqual(["n1@A", "n2@A", "blocker@A", "n4@A"]);
        expect(logLines(logFile).filter((l) => l.startsWith("A:"))).toEqual(["A:n1", "A:n2", "A:blocker", "A:n4"]);

        // A released its lease when its run ended: B runs the thread now.
        const out = await graphB.invoke({ topic: "b" }, config);
        expect(out.visited).toEqual(["n1@A", "n2@A", "blocker@A", "n4@A", "n1@B", "n2@B", "blocker@B", "n4@B"]);
      } finally {
        await workerA.kill().catch(() => undefined);
        await saverB.close();
      }
    });

    it("B takes over a lease A let lapse: A's next put fails with LeaseLost and stores nothing, and B completes the run", async () => {
      const { namespace, logFile, gateFile, saverB, graphB, a } = setup("takeover");
      // A leases the thread at its first put, for 3 s, and extends it only when it puts again.
      const workerA = startWorker({ ...a, leaseMs: 3000 });
      try {
        await untilBlocked(workerA, graphB, saverB, namespace);
        const before = await storeSnapshot(saverB.client, namespace, "t");
        const out = await takeOver(saverB, async () => {
          // B holds the thread: A, let go on, finds its lease lost at its next put.
          writeFileSync(gateFile, "");
          const { error } = await workerA.outcome();
          expect(error?.name).toBe("LeaseLost");
          expect(await storeSnapshot(saverB.client, namespace, "t")).toEqual(before);
          return graphB.invoke(null, config);
        });
        expect(out.visited).toEqual(["n1@A", "n2@A", "blocker@B", "n4@B"]);
        expect(logLines(logFile).filter((l) => l.startsWith("B:"))).toEqual(["B:blocker", "B:n4"]);
        expect(logLines(logFile).slice(0, 3)).toEqual(["A:n1", "A:n2", "A:blocker"]);

        const history = [];
        for await (const s of graphB.getStateHistory(config)) history.push(s);
        expect(history.map((s) => s.metadata?.step)).toEqual([4, 3, 2, 1, 0, -1]);
        for (let i = 0; i + 1 < history.length; i++) {
          expect(history[i].parentConfig?.configurable?.checkpoint_id).toBe(history[i + 1].config.configurable?.checkpoint_id);
        }
      } finally {
        await workerA.kill().catch(() => undefined);
        await saverB.close();
      }
    });

    it("a fenced saver whose lease lapsed while no one else took the thread runs it again", async () => {
      // As when a run stops at interrupt() and the answer comes after the lease ran out.
      const { logFile, saverB } = setup("lapsed");
      await saverB.close();
      const saver = StepwellSaver.fromAddress(sidecar.target, { namespace: saverB.namespace, fenced: true, leaseMs: 1000 });
      const graph = chainGraph({ who: "A", logFile }, saver);
      try {
        expect((await graph.invoke({ topic: "a" }, config)).visited).toHaveLength(4);
        const key = threadLeaseKey("t");
        await waitFor(async () => (await saver.client.get(key, { namespace: saver.namespace })).state === RecordState.EXPIRED, "the saver's lease to lapse");
        const out = await graph.invoke({ topic: "again" }, config);
        expect(out.visited).toEqual(["n1@A", "n2@A", "blocker@A", "n4@A", "n1@A", "n2@A", "blocker@A", "n4@A"]);
        // The saver leased the thread once more: the second attempt on its key.
        const held = await saver.client.get(key, { namespace: saver.namespace });
        expect([held.state, held.attempt]).toEqual([RecordState.IN_PROGRESS, 2]);
      } finally {
        await saver.close();
      }
    });

    it("a fenced saver whose lapsed lease another worker held since gets LeaseLost, stores nothing and leaves the thread free", async () => {
      const { namespace, logFile, saverB, graphB } = setup("held-since");
      const saver = StepwellSaver.fromAddress(sidecar.target, { namespace, fenced: true, leaseMs: 1000 });
      const graph = chainGraph({ who: "A", logFile }, saver);
      try {
        await graph.invoke({ topic: "a" }, config);
        const key = threadLeaseKey("t");
        await waitFor(async () => (await saver.client.get(key, { namespace })).state === RecordState.EXPIRED, "A's lease to lapse");
        // B runs the thread in between, and lets go of it.
        await saverB.threadLease("t", () => graphB.invoke({ topic: "b" }, config));
        const before = await storeSnapshot(saver.client, namespace, "t");
        const err = await graph.invoke({ topic: "again" }, config).catch((e: unknown) => e);
        expect(err).toBeInstanceOf(LeaseLost);
        expect(await storeSnapshot(saver.client, namespace, "t")).toEqual(before);
        expect((await saver.client.get(key, { namespace })).state).toBe(RecordState.RELEASED);
      } finally {
        await saver.close();
        await saverB.close();
      }
    });
  });
}
