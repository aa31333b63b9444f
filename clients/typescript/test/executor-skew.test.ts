// StepwellDurableExecutor under clock skew, against a live sidecar: workers
// whose callers' clocks are an hour apart resume one turn across each other,
// a worker that never restored checkpoints behind, and re-sends still
// deduplicate.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import type { Interceptor } from "@connectrpc/connect";
import { StepwellClient, StepwellDurableExecutor, toTimestamp, type TurnCheckpoint } from "../src/index.js";
import { freshNamespace, startSidecar, type Sidecar } from "./sidecar.js";

let sidecar: Sidecar;
before(async () => {
  sidecar = await startSidecar();
});
after(async () => {
  await sidecar?.stop();
});

/** A worker: its own client (recording each Checkpoint's `inserted`) and executor, and a clock the test sets. */
class Worker {
  readonly inserted: boolean[] = [];
  readonly client: StepwellClient;
  readonly executor: StepwellDurableExecutor;
  now: Date;
  constructor(namespace: string, clock: string) {
    this.now = new Date(clock);
    const record: Interceptor = (next) => async (req) => {
      const res = await next(req);
      if (req.method.name === "Checkpoint" && !res.stream) this.inserted.push((res.message as unknown as { inserted: boolean }).inserted);
      return res;
    };
    this.client = new StepwellClient({ target: sidecar.target, ...sidecar.connect, interceptors: [record] });
    this.executor = new StepwellDurableExecutor({ client: this.client, namespace });
  }
  /** Checkpoints one step, stamped from this worker's clock, which then moves on a second. */
  async save(turnId: string, phase: string, state: unknown = { phase }): Promise<TurnCheckpoint> {
    const cp = { turnId, sessionId: "s", phase, state, timestamp: this.now.toISOString() };
    this.now = new Date(this.now.getTime() + 1000);
    await this.executor.checkpoint(cp);
    return cp;
  }
  close(): void {
    this.client.close();
  }
}

const ns = (iso: string): bigint => {
  const t = toTimestamp(iso);
  return t.seconds * 1_000_000_000n + BigInt(t.nanos);
};

function assertIncreasing(history: TurnCheckpoint[]): void {
  for (let i = 1; i < history.length; i++) {
    assert.ok(ns(history[i]!.timestamp) > ns(history[i - 1]!.timestamp), `timestamps not increasing: ${JSON.stringify(history)}`);
  }
}

describe("StepwellDurableExecutor under clock skew", () => {
  it("two workers an hour apart resume one turn across each other; restore lists the checkpoints in the order made", async () => {
    const namespace = freshNamespace("ts-skew");
    const ahead = new Worker(namespace, "2026-06-01T11:00:00Z");
    const behind = new Worker(namespace, "2026-06-01T10:00:00Z");
    try {
      await ahead.save("run", "fetch");
      await ahead.save("run", "plan");
      assert.equal((await behind.executor.restore("run")).at(-1)!.phase, "plan");
      await behind.save("run", "charge");
      await behind.save("run", "receipt");
      const seenByAhead = await ahead.executor.restore("run");
      assert.deepEqual(seenByAhead.map((c) => c.phase), ["fetch", "plan", "charge", "receipt"]);
      assertIncreasing(seenByAhead);
      // Stored 1 ns above the newest the worker behind had seen, not at its own clock's reading.
      assert.equal(ns(seenByAhead[2]!.timestamp), ns(seenByAhead[1]!.timestamp) + 1n);
      await ahead.save("run", "email");
      const seenByBehind = await behind.executor.restore("run");
      assert.deepEqual(seenByBehind.map((c) => c.phase), ["fetch", "plan", "charge", "receipt", "email"]);
      assert.equal(seenByBehind.at(-1)!.timestamp, "2026-06-01T11:00:02.000Z"); // ahead of the floor: its own clock
      assertIncreasing(seenByBehind);
      assert.deepEqual([...ahead.inserted, ...behind.inserted], [true, true, true, true, true]);
    } finally {
      ahead.close();
      behind.close();
    }
  });

  it("a worker that never restored the turn does not checkpoint behind its newest checkpoint", async () => {
    const namespace = freshNamespace("ts-skew-fresh");
    const ahead = new Worker(namespace, "2026-06-01T11:00:00Z");
    const fresh = new Worker(namespace, "2026-06-01T09:00:00Z");
    try {
      await ahead.save("run", "fetch");
      await ahead.save("run", "plan");
      await fresh.save("run", "report");
      await fresh.save("run", "archive");
      const history = await ahead.executor.restore("run");
      assert.deepEqual(history.map((c) => c.phase), ["fetch", "plan", "report", "archive"]);
      assertIncreasing(history);
      // A turn nobody wrote yet: the caller's own timestamp, as given.
      await fresh.save("other", "start");
      assert.deepEqual((await fresh.executor.restore("other")).map((c) => c.timestamp), ["2026-06-01T09:00:02.000Z"]);
    } finally {
      ahead.close();
      fresh.close();
    }
  });

  it("a re-sent checkpoint still deduplicates after being stamped above the floor, and so does a restored one", async () => {
    const namespace = freshNamespace("ts-skew-resend");
    const ahead = new Worker(namespace, "2026-06-01T11:00:00Z");
    const behind = new Worker(namespace, "2026-06-01T10:00:00Z");
    try {
      await ahead.save("run", "fetch");
      await ahead.save("run", "plan");
      await behind.executor.restore("run");
      const charge = await behind.save("run", "charge", { amount: 9.99 });
      await behind.executor.checkpoint(charge); // a network-layer retry of the same checkpoint
      const restored = await behind.executor.restore("run");
      await behind.executor.checkpoint(restored[1]!); // a restored checkpoint sent again as restore() gave it
      await ahead.executor.checkpoint(restored[2]!); // by a worker that never wrote it
      assert.deepEqual(behind.inserted, [true, false, false]);
      assert.deepEqual(ahead.inserted, [true, true, false]);
      const history = await ahead.executor.restore("run");
      assert.deepEqual(history.map((c) => c.phase), ["fetch", "plan", "charge"]);
      assertIncreasing(history);
    } finally {
      ahead.close();
      behind.close();
    }
  });
});
