// StepwellSaver's own promises beyond the official validator, on SQLite and
// on Postgres: a large state (5 channels of 3 MB and 4.5 MB of pending
// writes) round-trips through getTuple and list with the default limits;
// blobs are stored once per (channel, version); deleteForRuns, copyThread
// and prune; a putWrites without a checkpoint is refused; concurrent puts
// of one saver share PutRecords, and a put refused in a shared request fails
// alone.
import { emptyCheckpoint, uuid6, type Checkpoint } from "@langchain/langgraph-checkpoint";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Interceptor } from "@connectrpc/connect";
import { InvalidArgument, StepwellClient } from "../../src/index.js";
import { StepwellSaver } from "../../src/langgraph/index.js";
import { freshNamespace, type Sidecar } from "../sidecar.js";
import { BACKENDS, startBackend } from "./backends.js";

const MB = 1_000_000;
const meta = (step: number, extra: Record<string, unknown> = {}) => ({ source: "loop" as const, step, parents: {}, ...extra });

function checkpoint(values: Record<string, unknown>, versions: Record<string, number>): Checkpoint {
  return { ...emptyCheckpoint(), id: uuid6(-1), channel_values: values, channel_versions: versions };
}

async function all<T>(it: AsyncGenerator<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const x of it) out.push(x);
  return out;
}

for (const backend of BACKENDS) {
  describe(`StepwellSaver (${backend})`, () => {
    let sidecar: Sidecar;
    const saver = () => StepwellSaver.fromAddress(sidecar.target, { namespace: freshNamespace(`lgjs-saver-${backend}`) });
    beforeAll(async () => {
      sidecar = await startBackend(backend);
    });
    afterAll(async () => {
      await sidecar?.stop();
    });

    it("round-trips 5 channels of 3 MB and 4.5 MB of pending writes through getTuple and list", async () => {
      const s = saver();
      try {
        const values: Record<string, string> = {};
        for (let i = 0; i < 5; i++) values[`ch${i}`] = String.fromCharCode(97 + i).repeat(3 * MB);
        const versions = Object.fromEntries(Object.keys(values).map((k) => [k, 1]));
        const cp = checkpoint(values, versions);
        const config = await s.put({ configurable: { thread_id: "big", checkpoint_ns: "" } }, cp, meta(1), versions);
        const writes: [string, string][] = [["w", "x".repeat(1.5 * MB)], ["w", "y".repeat(1.5 * MB)], ["w", "z".repeat(1.5 * MB)]];
        await s.putWrites(config, writes, "task-1");

        const tuple = await s.getTuple({ configurable: { thread_id: "big", checkpoint_ns: "" } });
        expect(tuple?.checkpoint.id).toBe(cp.id);
        for (const [k, v] of Object.entries(values)) expect(tuple!.checkpoint.channel_values[k] === v, k).toBe(true);
        expect(tuple!.pendingWrites!.map(([task, ch, v]) => [task, ch, (v as string).slice(0, 1), (v as string).length])).toEqual([
          ["task-1", "w", "x", 1.5 * MB],
          ["task-1", "w", "y", 1.5 * MB],
          ["task-1", "w", "z", 1.5 * MB],
        ]);
        const listed = await all(s.list({ configurable: { thread_id: "big" } }));
        expect(listed).toHaveLength(1);
        for (const [k, v] of Object.entries(values)) expect(listed[0].checkpoint.channel_values[k] === v, k).toBe(true);
        expect(listed[0].pendingWrites).toHaveLength(3);
      } finally {
        await s.close();
      }
    });

    it("stores a channel's blob once per version: a later checkpoint reuses it", async () => {
      const s = saver();
      try {
        const v1 = { a: 1, b: 1 };
        const c1 = await s.put({ configurable: { thread_id: "t", checkpoint_ns: "" } }, checkpoint({ a: "A1", b: "B1" }, v1), meta(1), v1);
        const v2 = { a: 2, b: 1 };
        await s.put(c1, checkpoint({ a: "A2", b: "B1" }, v2), meta(2), { a: 2 });
        const blobs = await s.client.listRecords({ namespace: s.namespace, turnId: "t", kind: "blob" });
        expect(blobs.entries.map((e) => e.record!.id).sort()).toEqual(['["a", "1"]', '["a", "2"]', '["b", "1"]']);
        const latest = await s.getTuple({ configurable: { thread_id: "t", checkpoint_ns: "" } });
        expect(latest?.checkpoint.channel_values).toEqual({ a: "A2", b: "B1" });
        expect(latest?.parentConfig?.configurable?.checkpoint_id).toBe(c1.configurable!.checkpoint_id);
      } finally {
        await s.close();
      }
    });

    it("deleteForRuns, copyThread and prune", async () => {
      const s = saver();
      try {
        let c = { configurable: { thread_id: "src", checkpoint_ns: "" } } as Parameters<typeof s.put>[0];
        for (const [step, run] of [[1, "r1"], [2, "r1"], [3, "r2"]] as const) {
          c = await s.put(c, checkpoint({ n: step }, { n: step }), meta(step, { run_id: run }), { n: step });
        }
        await s.copyThread("src", "copy");
        expect(await all(s.list({ configurable: { thread_id: "copy" } }))).toHaveLength(3);
        await s.deleteForRuns(["r1"]);
        const left = await all(s.list({ configurable: { thread_id: "src" } }));
        expect(left.map((t) => (t.metadata as Record<string, unknown>).run_id)).toEqual(["r2"]);
        expect(left[0].checkpoint.channel_values).toEqual({ n: 3 });
        await s.prune(["copy"]);
        const pruned = await all(s.list({ configurable: { thread_id: "copy" } }));
        expect(pruned.map((t) => t.metadata?.step)).toEqual([3]);
        await s.prune(["copy"], { strategy: "delete" });
        expect(await s.getTuple({ configurable: { thread_id: "copy", checkpoint_ns: "" } })).toBeUndefined();
        await expect(s.prune(["x"], { strategy: "bogus" as "delete" })).rejects.toThrow(/unknown prune strategy/);
      } finally {
        await s.close();
      }
    });

    it("refuses a putWrites that names no checkpoint, storing nothing", async () => {
      const s = saver();
      try {
        await expect(s.putWrites({ configurable: { thread_id: "w", checkpoint_ns: "" } }, [["c", 1]], "task")).rejects.toThrow(/checkpoint_id/);
        for (const kind of ["write", "checkpoint"]) {
          expect((await s.client.listRecords({ namespace: s.namespace, turnId: "w", kind })).entries).toHaveLength(0);
        }
      } finally {
        await s.close();
      }
    });

    /** A client that counts its PutRecords calls. */
    const countingClient = () => {
      const calls = { puts: 0 };
      const count: Interceptor = (next) => async (req) => {
        if (req.method.name === "PutRecords") calls.puts += 1;
        return next(req);
      };
      return { calls, client: new StepwellClient({ target: sidecar.target, namespace: freshNamespace("lgjs-share"), interceptors: [count] }) };
    };
    const put = (s: StepwellSaver, thread: string, id = uuid6(-1)) => {
      const v = { n: 1 };
      return s.put({ configurable: { thread_id: thread, checkpoint_ns: "" } }, { ...checkpoint({ n: thread }, v), id }, meta(1), v);
    };

    it("concurrent puts of one saver share PutRecords, each stored", async () => {
      const { calls, client } = countingClient();
      try {
        const s = new StepwellSaver(client, { putsInFlightMax: 1 });
        const threads = Array.from({ length: 20 }, (_, i) => `t${i}`);
        await Promise.all(threads.map((t) => put(s, t)));
        // The first goes alone; the other 19 wait for it and go together.
        expect(calls.puts).toBe(2);
        for (const t of threads) {
          expect((await s.getTuple({ configurable: { thread_id: t, checkpoint_ns: "" } }))?.checkpoint.channel_values).toEqual({ n: t });
        }
      } finally {
        client.close();
      }
    });

    it("a put the sidecar refuses in a shared request fails alone; the others are stored", async () => {
      const { calls, client } = countingClient();
      try {
        const s = new StepwellSaver(client, { putsInFlightMax: 1 });
        const threads = Array.from({ length: 10 }, (_, i) => `t${i}`);
        // A checkpoint id over the sidecar's 1024 bytes: INVALID_ARGUMENT for the request carrying it.
        const results = await Promise.allSettled(threads.map((t, i) => put(s, t, i === 5 ? "x".repeat(2000) : uuid6(-1))));
        expect(results.map((r) => r.status)).toEqual(threads.map((_, i) => (i === 5 ? "rejected" : "fulfilled")));
        expect((results[5] as PromiseRejectedResult).reason).toBeInstanceOf(InvalidArgument);
        // One alone, one shared that was refused, then each of its nine again alone.
        expect(calls.puts).toBe(11);
        for (const [i, t] of threads.entries()) {
          const tuple = await s.getTuple({ configurable: { thread_id: t, checkpoint_ns: "" } });
          expect(tuple === undefined, t).toBe(i === 5);
        }
      } finally {
        client.close();
      }
    });

    it("an existing client: the saver uses its namespace unless told another", async () => {
      const client = new StepwellClient({ target: sidecar.target, namespace: freshNamespace("lgjs-client") });
      try {
        const s = new StepwellSaver(client);
        expect(s.namespace).toBe(client.namespace);
        const v = { n: 1 };
        await s.put({ configurable: { thread_id: "c", checkpoint_ns: "" } }, checkpoint({ n: 1 }, v), meta(1), v);
        const turns = await client.listRecords({ kind: "checkpoint", turnId: "c" });
        expect(turns.entries).toHaveLength(1);
        await s.close();
        // close() leaves a client the saver did not make open.
        expect((await client.listRecords({ kind: "checkpoint", turnId: "c" })).entries).toHaveLength(1);
      } finally {
        client.close();
      }
    });
  });
}
