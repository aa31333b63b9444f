// Every StepwellClient method, the DurableExecutor contract, once(), and a
// Unix-socket connection, against the real sidecar.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  BeginOutcome,
  CheckpointConflict,
  InvalidArgument,
  KeyNotFound,
  KeyReused,
  LeaseLost,
  NotAcquired,
  RecordState,
  ResultMismatch,
  StepwellClient,
  StepwellDurableExecutor,
  StepwellError,
  TurnStatus,
  Unavailable,
  WorkflowVersionMismatch,
  parseJsonBytes,
  timestampToIso,
  toTimestamp,
  type DurableExecutor,
  type TurnCheckpoint,
} from "../src/index.js";
import { freePort, freshNamespace, startSidecar, type Sidecar } from "./sidecar.js";

let sidecar: Sidecar;
let client: StepwellClient;
before(async () => {
  sidecar = await startSidecar();
  client = new StepwellClient({ target: sidecar.target, namespace: freshNamespace("ts-client") });
});
after(async () => {
  client?.close();
  await sidecar?.stop();
});

describe("time conversions", () => {
  it("round-trips ISO strings to the millisecond and keeps nanoseconds", () => {
    for (const iso of ["2026-01-01T00:00:00.000Z", "2026-05-17T13:45:12.345Z", new Date(1).toISOString()]) {
      assert.equal(timestampToIso(toTimestamp(iso)), iso);
    }
    assert.equal(timestampToIso(toTimestamp("2026-01-01T00:00:00.000000001Z")), "2026-01-01T00:00:00.000000001Z");
    assert.equal(timestampToIso(toTimestamp("2026-01-01T02:00:00.5+02:00")), "2026-01-01T00:00:00.500Z");
    assert.throws(() => toTimestamp("not a time"), TypeError);
  });
});

describe("StepwellClient", () => {
  it("checkpoint, restore (paging internally), restorePage, latest", async () => {
    const turnId = "turn-" + Math.random();
    const first = await client.checkpoint({ turnId, sessionId: "s", phase: "started", state: { n: 0 }, timestamp: "2026-01-01T00:00:00.000Z" });
    assert.equal(first.inserted, true);
    assert.deepEqual(parseJsonBytes(first.checkpoint!.state), { n: 0 });
    const again = await client.checkpoint({ turnId, sessionId: "s", phase: "started", state: { n: 0 }, timestamp: "2026-01-01T00:00:00.000Z" });
    assert.equal(again.inserted, false);
    for (let i = 1; i <= 7; i++) {
      await client.checkpoint({ turnId, phase: "step", state: { n: i }, timestamp: new Date(Date.UTC(2026, 0, 1, 0, 0, i)) });
    }
    const all = await client.restore(turnId, { pageSize: 3 });
    assert.deepEqual(all.map((c) => parseJsonBytes(c.state)), [0, 1, 2, 3, 4, 5, 6, 7].map((n) => ({ n })));
    const newest = await client.restore(turnId, { pageSize: 2, newestFirst: true });
    assert.equal((parseJsonBytes(newest[0]!.state) as { n: number }).n, 7);
    const page = await client.restorePage({ turnId, pageSize: 5 });
    assert.equal(page.checkpoints.length, 5);
    assert.notEqual(page.nextPageToken, "");
    const latest = await client.latest(turnId);
    assert.deepEqual(parseJsonBytes(latest!.state), { n: 7 });
    assert.deepEqual(await client.restore("unknown-" + Math.random()), []);
    await assert.rejects(
      client.checkpoint({ turnId, sessionId: "s", phase: "started", state: { n: 99 }, timestamp: "2026-01-01T00:00:00.000Z" }),
      (e: unknown) => e instanceof CheckpointConflict && e.code === "ALREADY_EXISTS" && e.reason === "CHECKPOINT_CONFLICT",
    );
    await assert.rejects(
      client.checkpoint({ turnId: "", phase: "started", state: {}, timestamp: new Date() }),
      (e: unknown) => e instanceof InvalidArgument && e.field === "turn_id" && e.reason === "FIELD_REQUIRED",
    );
    await assert.rejects(
      client.checkpoint({ turnId, phase: "x", stateBytes: new TextEncoder().encode("{not json"), timestamp: new Date() }),
      (e: unknown) => e instanceof InvalidArgument && e.reason === "STATE_NOT_JSON",
    );
  });

  it("restore pages through a turn larger than one message with the default limits", async () => {
    // Six states of about 900 KB: 5.4 MB in all, more than the 4 MiB a gRPC
    // client accepts in one message. The sidecar cuts each page to fit.
    const turnId = "big-" + Math.random();
    const states = [0, 1, 2, 3, 4, 5].map((i) => `${i}` + "x".repeat(900_000));
    for (const [i, state] of states.entries()) {
      await client.checkpoint({ turnId, phase: `p${i}`, state, timestamp: new Date(Date.UTC(2026, 0, 1, 0, 0, i)) });
    }
    const first = await client.restorePage({ turnId });
    assert.ok(first.checkpoints.length >= 1 && first.checkpoints.length < 6, `first page: ${first.checkpoints.length}`);
    assert.notEqual(first.nextPageToken, "");
    const restored = await client.restore(turnId);
    assert.deepEqual(restored.map((c) => c.phase), states.map((_, i) => `p${i}`));
    assert.deepEqual(restored.map((c) => parseJsonBytes(c.state)), states);
  });

  it("restore with expectWorkflowVersion: WorkflowVersionMismatch with metadata", async () => {
    const turnId = "wf-" + Math.random();
    await client.checkpoint({ turnId, phase: "p", state: {}, timestamp: new Date(), workflowVersion: "1.3.0" });
    assert.equal((await client.restore(turnId, { expectWorkflowVersion: "1.9.0" })).length, 1);
    await assert.rejects(client.restore(turnId, { expectWorkflowVersion: "2.0.0" }), (e: unknown) => {
      assert.ok(e instanceof WorkflowVersionMismatch);
      assert.equal(e.code, "FAILED_PRECONDITION");
      assert.equal(e.domain, "stepwell.dev");
      assert.equal(e.metadata.expected_version, "2.0.0");
      assert.equal(e.metadata.recorded_version, "1.3.0");
      return true;
    });
  });

  it("listTurns, allTurns, deleteTurn, per-call namespace", async () => {
    const namespace = freshNamespace("ts-turns");
    await client.checkpoint({ turnId: "a", sessionId: "s1", phase: "started", state: {}, timestamp: "2026-01-01T00:00:01Z" }, { namespace });
    await client.checkpoint({ turnId: "b", phase: "started", state: {}, timestamp: "2026-01-01T00:00:01Z" }, { namespace });
    await client.checkpoint({ turnId: "b", phase: "settled", state: {}, timestamp: "2026-01-01T00:00:02Z", terminal: true }, { namespace });
    const open = await client.listTurns({ namespace, status: "open" });
    assert.deepEqual(open.turns.map((t) => t.turnId), ["a"]);
    const terminal = await client.listTurns({ namespace, status: TurnStatus.TERMINAL });
    assert.deepEqual(terminal.turns.map((t) => [t.turnId, t.checkpointCount, t.lastPhase]), [["b", 2n, "settled"]]);
    const stalled = await client.listTurns({ namespace, updatedBefore: "2026-01-01T00:00:01.500Z" });
    assert.deepEqual(stalled.turns.map((t) => t.turnId), ["a"]);
    const all: string[] = [];
    for await (const t of client.allTurns({ namespace, pageSize: 1 })) all.push(t.turnId);
    assert.deepEqual(all, ["a", "b"]);
    assert.equal((await client.listTurns()).turns.length >= 0, true); // the client's own namespace
    assert.equal((await client.deleteTurn("b", { namespace })).deleted, 2n);
    assert.equal((await client.deleteTurn("b", { namespace })).deleted, 0n);
  });

  it("begin, extend, complete, release, get and their errors", async () => {
    const key = "k-" + Math.random();
    const r = await client.begin(key, { fingerprint: "fp-1", leaseMs: 5000, retentionMs: 60_000 });
    assert.equal(r.outcome, BeginOutcome.ACQUIRED);
    assert.equal(r.attempt, 1);
    assert.equal((await client.begin(key, { fingerprint: "fp-1" })).outcome, BeginOutcome.IN_PROGRESS);
    await assert.rejects(client.begin(key, { fingerprint: "fp-2" }), KeyReused);
    const ext = await client.extend(key, r.leaseToken, 10_000);
    assert.ok(ext.leaseExpiresAt);
    await assert.rejects(client.extend(key, r.leaseToken + 100n, 1000), LeaseLost);
    await client.complete(key, r.leaseToken, "done");
    await client.complete(key, r.leaseToken, "done");
    await assert.rejects(client.complete(key, r.leaseToken, "other"), ResultMismatch);
    const got = await client.get(key);
    assert.equal(got.state, RecordState.COMPLETED);
    assert.equal(new TextDecoder().decode(got.result), "done");
    const again = await client.begin(key);
    assert.equal(again.outcome, BeginOutcome.COMPLETED);
    await assert.rejects(client.release(key, r.leaseToken), NotAcquired);
    await assert.rejects(client.get("nope-" + Math.random()), (e: unknown) => e instanceof KeyNotFound && e.code === "NOT_FOUND");

    const key2 = "k2-" + Math.random();
    const a = await client.begin(key2);
    assert.equal((await client.release(key2, a.leaseToken, { error: "try later" })).state, RecordState.RELEASED);
    const b = await client.begin(key2);
    assert.equal(b.attempt, 2);
    assert.ok(b.leaseToken > a.leaseToken);
    assert.equal((await client.release(key2, b.leaseToken, { error: "gone", permanent: true })).state, RecordState.FAILED);
    const f = await client.begin(key2);
    assert.equal(f.outcome, BeginOutcome.FAILED);
    assert.equal(f.error, "gone");
  });

  it("per-call deadlines and retries on UNAVAILABLE end in Unavailable", async () => {
    const port = await freePort(); // nothing listens there
    const dead = new StepwellClient({ target: `127.0.0.1:${port}`, timeoutMs: 300, maxAttempts: 3, initialBackoffMs: 10 });
    await assert.rejects(dead.get("x"), (e: unknown) => e instanceof Unavailable && e.code === "UNAVAILABLE");
    dead.close();
    // A peer that accepts connections and never answers: only the deadline can end the call.
    const { createServer } = await import("node:net");
    const silent = createServer(() => {});
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
    const address = silent.address();
    assert.ok(address && typeof address === "object");
    const stuck = new StepwellClient({ target: `127.0.0.1:${address.port}`, timeoutMs: 10_000, maxAttempts: 1 });
    await assert.rejects(
      stuck.get("x", { timeoutMs: 200, maxAttempts: 1 }),
      (e: unknown) => e instanceof StepwellError && e.code === "DEADLINE_EXCEEDED",
    );
    stuck.close();
    silent.close();
  });

  it("a connection dropped mid-call is UNAVAILABLE (and retried), a call the caller aborts is CANCELLED", async () => {
    // An HTTP/2 peer that drops the connection as each call arrives, as a sidecar that crashes would.
    const { createServer } = await import("node:http2");
    let calls = 0;
    const dropper = createServer();
    dropper.on("stream", (stream) => {
      calls++;
      stream.session?.destroy();
    });
    await new Promise<void>((resolve) => dropper.listen(0, "127.0.0.1", resolve));
    const address = dropper.address();
    assert.ok(address && typeof address === "object");
    const c = new StepwellClient({ target: `127.0.0.1:${address.port}`, maxAttempts: 2, initialBackoffMs: 5 });
    try {
      await assert.rejects(c.get("x"), (e: unknown) => e instanceof Unavailable && e.code === "UNAVAILABLE");
      assert.equal(calls, 2); // retried as UNAVAILABLE is
      const ac = new AbortController();
      ac.abort();
      await assert.rejects(client.get("x", { signal: ac.signal }), (e: unknown) => e instanceof StepwellError && e.code === "CANCELLED");
    } finally {
      c.close();
      dropper.close();
    }
  });

  it("retries resend the same request (same dedup tuple) once the sidecar is back", async () => {
    // A sidecar that starts only after the first attempts failed.
    const port = await freePort();
    const late = new StepwellClient({ target: `127.0.0.1:${port}`, maxAttempts: 60, initialBackoffMs: 50, maxBackoffMs: 200, timeoutMs: 2000 });
    const pending = late.checkpoint({ turnId: "r", phase: "started", state: { a: 1 }, timestamp: "2026-01-01T00:00:00Z" });
    await new Promise((r) => setTimeout(r, 150));
    const { spawn } = await import("node:child_process");
    const { mkdtempSync, rmSync } = await import("node:fs");
    const { tmpdir } = await import("node:os");
    const { join } = await import("node:path");
    const { stepwellBin } = await import("./sidecar.js");
    const dir = mkdtempSync(join(tmpdir(), "stepwell-ts-late-"));
    const proc = spawn(stepwellBin(), ["serve", "--listen", `127.0.0.1:${port}`, "--database-url", `sqlite://${join(dir, "x.db")}`], { stdio: "ignore" });
    try {
      const res = await pending;
      assert.equal(res.inserted, true);
      const repeat = await late.checkpoint({ turnId: "r", phase: "started", state: { a: 1 }, timestamp: "2026-01-01T00:00:00Z" });
      assert.equal(repeat.inserted, false);
    } finally {
      late.close();
      const exited = new Promise((r) => proc.once("exit", r));
      proc.kill("SIGTERM");
      await exited;
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("StepwellDurableExecutor (the DurableExecutor contract)", () => {
  let executor: DurableExecutor;
  before(() => {
    executor = new StepwellDurableExecutor({ client, namespace: freshNamespace("ts-exec") });
  });
  const tp = (turnId: string, phase: string, ms: number, state: unknown): TurnCheckpoint => ({
    turnId,
    sessionId: "session-1",
    phase,
    state,
    timestamp: new Date(Date.UTC(2026, 0, 1) + ms).toISOString(),
  });

  it("is idempotent on (turnId, phase, timestamp) and keeps distinct timestamps of one phase", async () => {
    const turnId = "turn-idem";
    const started = tp(turnId, "started", 0, { actorId: "a", messages: [] });
    await executor.checkpoint(started);
    await executor.checkpoint(started); // a network-layer retry
    await executor.checkpoint(tp(turnId, "tool-received", 1, { message: "r1" }));
    await executor.checkpoint(tp(turnId, "tool-received", 2, { message: "r2" }));
    const restored = await executor.restore(turnId);
    assert.deepEqual(restored.map((c) => c.phase), ["started", "tool-received", "tool-received"]);
    assert.deepEqual(restored.map((c) => (c.state as { message?: string }).message), [undefined, "r1", "r2"]);
  });

  it("restores in chronological order, with the millisecond timestamp string and JSON state as given", async () => {
    const turnId = "turn-order";
    const cps = [
      tp(turnId, "started", 1, { actorId: "x", slotKey: "k", messages: [], expiresAt: null }),
      tp(turnId, "llm-complete", 5, { messages: [{ role: "assistant", content: "hi ✓" }], respond: true }),
      tp(turnId, "tool-received", 7, [1, 2.5, "three", null, { deep: { deeper: [true] } }]),
      tp(turnId, "settled", 9, { turnState: "complete", respond: null, reason: "done" }),
    ];
    for (const c of cps) await executor.checkpoint(c);
    const restored = await executor.restore(turnId);
    assert.deepEqual(restored, cps);
    assert.equal(restored[0]!.timestamp, "2026-01-01T00:00:00.001Z");
    const values = [null, 42, "text", true, 1.5e-7, { "": "" }];
    for (const [i, v] of values.entries()) await executor.checkpoint(tp("turn-scalars", "p", i, v));
    assert.deepEqual((await executor.restore("turn-scalars")).map((c) => c.state), values);
  });

  it("pages internally through long turns", async () => {
    const turnId = "turn-long";
    const n = 1205; // more than the server's default page of 1000
    const cps = Array.from({ length: n }, (_, i) => tp(turnId, "tool-received", i, { i }));
    for (let i = 0; i < n; i += 100) await Promise.all(cps.slice(i, i + 100).map((c) => executor.checkpoint(c)));
    const restored = await executor.restore(turnId);
    assert.equal(restored.length, n);
    assert.deepEqual(restored.map((c) => (c.state as { i: number }).i), cps.map((_, i) => i));
  });

  it("marks the turn terminal at settled", async () => {
    const namespace = freshNamespace("ts-settled");
    const ex = new StepwellDurableExecutor({ client, namespace });
    await ex.checkpoint(tp("t-open", "started", 0, {}));
    await ex.checkpoint(tp("t-done", "started", 0, {}));
    await ex.checkpoint(tp("t-done", "settled", 1, { turnState: "complete" }));
    const terminal = await client.listTurns({ namespace, status: "terminal" });
    assert.deepEqual(terminal.turns.map((t) => t.turnId), ["t-done"]);
    const open = await client.listTurns({ namespace, status: "open" });
    assert.deepEqual(open.turns.map((t) => t.turnId), ["t-open"]);
  });

  it("returns an empty array for an unknown turn", async () => {
    assert.deepEqual(await executor.restore("never-checkpointed"), []);
  });

  it("throws on failures", async () => {
    await assert.rejects(executor.checkpoint(tp("", "started", 0, {})), InvalidArgument);
    await assert.rejects(executor.checkpoint({ ...tp("t", "started", 0, {}), timestamp: "yesterday-ish" }), TypeError);
    await executor.checkpoint(tp("turn-conflict", "started", 0, { a: 1 }));
    await assert.rejects(executor.checkpoint(tp("turn-conflict", "started", 0, { a: 2 })), CheckpointConflict);
    const down = new StepwellDurableExecutor({ clientOptions: { target: `127.0.0.1:${await freePort()}`, maxAttempts: 2, initialBackoffMs: 5, timeoutMs: 300 } });
    await assert.rejects(down.checkpoint(tp("t", "started", 0, {})), Unavailable);
    await assert.rejects(down.restore("t"), Unavailable);
    down.close();
  });
});

describe("once()", () => {
  it("runs fn exactly once for 20 concurrent callers and gives all of them its result", async () => {
    const key = "once-" + Math.random();
    let calls = 0;
    const results = await Promise.all(
      Array.from({ length: 20 }, () =>
        client.once(key, async (ctx) => {
          calls++;
          assert.equal(ctx.attempt, 1);
          assert.equal(ctx.previousLeaseExpired, false);
          await new Promise((r) => setTimeout(r, 200));
          return { receipt: "R-1", n: 1 };
        }),
      ),
    );
    assert.equal(calls, 1);
    for (const r of results) assert.deepEqual(r, { receipt: "R-1", n: 1 });
    // Completed: fn is not called again.
    const later = await client.once(key, () => {
      throw new Error("must not run");
    });
    assert.deepEqual(later, { receipt: "R-1", n: 1 });
  });

  it("extends the lease while fn runs past it", async () => {
    const key = "once-long-" + Math.random();
    const r = await client.once(key, async (ctx) => {
      await new Promise((res) => setTimeout(res, 1200));
      assert.equal(ctx.signal.aborted, false);
      return "slow";
    }, { leaseMs: 400 });
    assert.equal(r, "slow");
    const rec = await client.get(key);
    assert.equal(rec.attempt, 1);
  });

  it("releases (not permanently) and rethrows when fn throws; the next call retries", async () => {
    const key = "once-fail-" + Math.random();
    await assert.rejects(client.once(key, () => {
      throw new Error("boom");
    }), /boom/);
    assert.equal((await client.get(key)).state, RecordState.RELEASED);
    const v = await client.once(key, (ctx) => ctx.attempt);
    assert.equal(v, 2);
  });

  it("passes previousLeaseExpired to fn after a crashed holder", async () => {
    const key = "once-crash-" + Math.random();
    await client.begin(key, { leaseMs: 100 }); // a holder that never completes
    const seen = await client.once(key, (ctx) => ({ previousLeaseExpired: ctx.previousLeaseExpired, attempt: ctx.attempt }), { waitTimeoutMs: 10_000 });
    assert.deepEqual(seen, { previousLeaseExpired: true, attempt: 2 });
  });

  it("gives up waiting on a live holder after waitTimeoutMs", async () => {
    const key = "once-wait-" + Math.random();
    await client.begin(key, { leaseMs: 60_000 });
    await assert.rejects(client.once(key, () => 1, { waitTimeoutMs: 200 }), (e: unknown) => e instanceof StepwellError && e.reason === "WAIT_TIMEOUT");
  });
});

describe("Unix socket", () => {
  it("connects through unix:/path (authority localhost) and runs every service", async () => {
    const s = await startSidecar({ unix: true });
    const c = new StepwellClient(s.target);
    try {
      assert.ok(s.target.startsWith("unix:/"));
      const res = await c.checkpoint({ turnId: "u", phase: "started", state: { via: "uds" }, timestamp: new Date() });
      assert.equal(res.inserted, true);
      const ex = new StepwellDurableExecutor(c);
      assert.deepEqual((await ex.restore("u")).map((x) => x.state), [{ via: "uds" }]);
      assert.equal(await c.once("uds-key", () => "ok"), "ok");
    } finally {
      c.close();
      await s.stop();
    }
  });
});
