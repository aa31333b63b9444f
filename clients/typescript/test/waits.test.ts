// The wait calls against the real sidecar: signal(), waitForSignal() and
// sleepUntil(), the WaitService methods under them, and their typed errors.
// Nothing here waits by sleeping: a test that needs the other side to be
// somewhere polls for it, with a bound, and asserts on the wait's stored
// state rather than on how long anything took.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import type { Interceptor } from "@connectrpc/connect";
import {
  Overloaded,
  StepwellClient,
  WaitCancelled,
  WaitExpired,
  WaitNotFound,
  WaitSettled,
  WaitStatus,
  WaitTimeout,
  WaitsPerTurnExceeded,
  timestampToIso,
  toStepwellError,
  type Wait,
} from "../src/index.js";
import { freshNamespace, startSidecar, type Sidecar } from "./sidecar.js";

const utf8 = new TextDecoder();
const text = (b: Uint8Array) => utf8.decode(b);
// A bound for every wait here: generous, for a busy machine; a test that reaches it has failed.
const LONG = { timeout: 120_000 };

let sidecar: Sidecar;
let client: StepwellClient;
before(async () => {
  sidecar = await startSidecar();
  client = new StepwellClient({ target: sidecar.target, namespace: freshNamespace("ts-waits"), ...sidecar.connect });
});
after(async () => {
  client?.close();
  await sidecar?.stop();
});

/** Polls fn every 20 ms until it returns a value that is not undefined; fails after timeoutMs. */
async function until<T>(what: string, fn: () => Promise<T | undefined>, timeoutMs = 60_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > deadline) assert.fail(`${what}: not reached in ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** The wait once it exists (a waitForSignal or sleepUntil running elsewhere made it). */
function created(c: StepwellClient, turnId: string, name: string, namespace?: string): Promise<Wait> {
  return until(`wait ${name} of ${turnId} created`, async () => {
    try {
      return (await c.getWait({ turnId, name }, { namespace })).wait;
    } catch (err) {
      if (err instanceof WaitNotFound) return undefined;
      throw err;
    }
  });
}

/** A promise awaited later: a rejection before then must fail the test that awaits it, not the process. */
function handled<T>(p: Promise<T>): Promise<T> {
  p.catch(() => undefined);
  return p;
}

const turn = () => "turn-" + Math.random().toString(36).slice(2);

describe("signal and waitForSignal", () => {
  it("a signal before its wait is kept, and waitForSignal returns it", LONG, async () => {
    const t = turn();
    assert.equal(await client.signal(t, "approve", "yes"), true);
    assert.equal(text(await client.waitForSignal(t, "approve")), "yes");
    const { wait } = await client.getWait({ turnId: t, name: "approve" });
    assert.equal(wait!.status, WaitStatus.RESOLVED);
  });

  it("a waitForSignal running is woken by a signal after it", LONG, async () => {
    const t = turn();
    const waiting = handled(client.waitForSignal(t, "approve"));
    assert.equal((await created(client, t, "approve")).status, WaitStatus.PENDING);
    assert.equal(await client.signal(t, "approve", "yes"), true);
    assert.equal(text(await waiting), "yes");
  });

  it("repeating the winning signal is false; another payload throws WaitSettled with the winner", async () => {
    const t = turn();
    assert.equal(await client.signal(t, "approve", "yes", { contentType: "text/plain" }), true);
    assert.equal(await client.signal(t, "approve", "yes", { contentType: "text/plain" }), false);
    await assert.rejects(client.signal(t, "approve", "no"), (e: unknown) => {
      assert.ok(e instanceof WaitSettled, `want WaitSettled, got ${String(e)}`);
      assert.equal(e.code, "ALREADY_EXISTS");
      assert.equal(e.reason, "WAIT_SETTLED");
      assert.equal(e.wait.status, WaitStatus.RESOLVED);
      assert.equal(text(e.wait.payload), "yes");
      assert.equal(e.wait.contentType, "text/plain");
      assert.equal(e.wait.turnId, t);
      return true;
    });
  });

  it("a winner's payload too large for the error is read back, so WaitSettled always carries it", async () => {
    const t = turn();
    const big = "y".repeat(10_000);
    assert.equal(await client.signal(t, "approve", big), true);
    // The RPC alone: the sidecar leaves the payload out of the error's details.
    const raw = await client.raw.waits
      .signal({ namespace: client.namespace, turnId: t, name: "approve", payload: new TextEncoder().encode("no") })
      .then(
        () => assert.fail("a different payload was accepted"),
        (err: unknown) => toStepwellError(err),
      );
    assert.ok(raw instanceof WaitSettled, `want WaitSettled, got ${String(raw)}`);
    assert.equal(raw.payloadOmitted, true);
    assert.equal(raw.wait.payload.length, 0);
    await assert.rejects(client.signal(t, "approve", "no"), (e: unknown) => {
      assert.ok(e instanceof WaitSettled);
      assert.equal(e.payloadOmitted, false);
      assert.equal(text(e.wait.payload), big);
      return true;
    });
  });

  it("an expired wait throws WaitExpired", LONG, async () => {
    const t = turn();
    await client.createWait(t, { name: "approve", expireAt: new Date(Date.now() + 1000) });
    await assert.rejects(client.waitForSignal(t, "approve"), (e: unknown) => {
      assert.ok(e instanceof WaitExpired, `want WaitExpired, got ${String(e)}`);
      assert.equal(e.wait.status, WaitStatus.EXPIRED);
      assert.equal(e.wait.settledBy, "stepwell:expiry");
      return true;
    });
  });

  it("a cancelled wait throws WaitCancelled; cancelling again is false; a signal after it throws WaitSettled", LONG, async () => {
    const t = turn();
    const waiting = handled(client.waitForSignal(t, "approve"));
    await created(client, t, "approve");
    assert.equal((await client.cancelWait({ turnId: t, name: "approve" })).cancelled, true);
    await assert.rejects(waiting, (e: unknown) => e instanceof WaitCancelled && e.wait.status === WaitStatus.CANCELLED);
    assert.equal((await client.cancelWait({ turnId: t, name: "approve" })).cancelled, false);
    await assert.rejects(client.signal(t, "approve", "yes"), (e: unknown) => e instanceof WaitSettled && e.wait.status === WaitStatus.CANCELLED);
  });

  it("a timeout throws WaitTimeout and leaves the wait pending for a later call", LONG, async () => {
    const t = turn();
    await assert.rejects(client.waitForSignal(t, "approve", { timeoutMs: 300 }), (e: unknown) => {
      assert.ok(e instanceof WaitTimeout, `want WaitTimeout, got ${String(e)}`);
      assert.equal(e.code, "DEADLINE_EXCEEDED");
      assert.equal(e.reason, "WAIT_TIMEOUT");
      assert.equal(e.wait.status, WaitStatus.PENDING);
      return true;
    });
    assert.equal((await client.getWait({ turnId: t, name: "approve" })).wait!.status, WaitStatus.PENDING);
    assert.equal(await client.signal(t, "approve", "later"), true);
    assert.equal(text(await client.waitForSignal(t, "approve", { timeoutMs: 300 })), "later");
  });

  it("namespace per call: a signal reaches only the wait of its namespace", LONG, async () => {
    const t = turn();
    const namespace = freshNamespace("ts-waits-other");
    assert.equal(await client.signal(t, "approve", "there", { namespace }), true);
    assert.equal(text(await client.waitForSignal(t, "approve", { namespace })), "there");
    await assert.rejects(client.getWait({ turnId: t, name: "approve" }), WaitNotFound);
  });

  it("waitForSignal outlives a sidecar restart under it", LONG, async () => {
    const own = await startSidecar();
    // The waiter has the default retries, which give up on one call within
    // about a second: waitForSignal itself waits through the restart. The
    // signaller retries enough to reach the restarted sidecar on a busy machine.
    const namespace = freshNamespace("ts-waits-restart");
    const c = new StepwellClient({ target: own.target, namespace, ...own.connect });
    const signaller = new StepwellClient({ target: own.target, namespace, maxAttempts: 1000, maxBackoffMs: 200, ...own.connect });
    try {
      const t = turn();
      const waiting = handled(c.waitForSignal(t, "approve"));
      await created(c, t, "approve");
      await own.kill();
      await own.start();
      assert.equal(await signaller.signal(t, "approve", "after restart"), true);
      assert.equal(text(await waiting), "after restart");
    } finally {
      signaller.close();
      c.close();
      await own.stop();
    }
  });
});

describe("sleepUntil", () => {
  it("a time in the past returns, and a resumed run asking a later time keeps the first", LONG, async () => {
    const t = turn();
    const when = new Date(Date.now() - 3_600_000);
    await client.sleepUntil(t, "nap", when);
    const { wait } = await client.getWait({ turnId: t, name: "nap" });
    assert.equal(wait!.status, WaitStatus.RESOLVED);
    assert.equal(wait!.settledBy, "stepwell:timer");
    // A resumed run computes a later time; the first creation stands, so it returns without waiting for it.
    await client.sleepUntil(t, "nap", new Date(Date.now() + 3_600_000));
    assert.equal(timestampToIso((await client.getWait({ turnId: t, name: "nap" })).wait!.resolveAt!), when.toISOString());
  });

  it("a time shortly ahead returns once the timer fired", LONG, async () => {
    const t = turn();
    const when = new Date(Date.now() + 1000);
    await client.sleepUntil(t, "nap", when);
    const { wait } = await client.getWait({ turnId: t, name: "nap" });
    assert.equal(wait!.status, WaitStatus.RESOLVED);
    assert.equal(wait!.settledBy, "stepwell:timer");
    assert.equal(timestampToIso(wait!.resolveAt!), when.toISOString());
  });

  it("a signal wakes a sleep early; a cancel throws WaitCancelled", LONG, async () => {
    const t = turn();
    const later = new Date(Date.now() + 3_600_000);
    const sleeping = handled(client.sleepUntil(t, "nap", later));
    await created(client, t, "nap");
    assert.equal(await client.signal(t, "nap", "wake"), true);
    await sleeping;
    const cancelled = handled(client.sleepUntil(t, "nap2", later));
    await created(client, t, "nap2");
    await client.cancelWait({ turnId: t, name: "nap2" });
    await assert.rejects(cancelled, WaitCancelled);
  });
});

describe("WaitService methods", () => {
  it("an unnamed CreateWait gets a name and a handle, and the handle can be signalled and awaited", async () => {
    const t = turn();
    const r = await client.createWait(t, { metadata: { for: "approval page" } });
    assert.equal(r.created, true);
    const w = r.wait!;
    assert.notEqual(w.name, "");
    assert.notEqual(w.handle, "");
    assert.deepEqual(JSON.parse(text(w.metadata)), { for: "approval page" });
    const again = await client.createWait(t, { name: w.name });
    assert.equal(again.created, false);
    assert.equal(again.wait!.handle, w.handle);
    const s = await client.signalWait({ handle: w.handle }, { payload: "via handle" });
    assert.equal(s.settled, true);
    assert.equal(s.wait!.name, w.name);
    const a = await client.awaitWait({ handle: w.handle }, { waitMs: 1000 });
    assert.equal(a.wait!.status, WaitStatus.RESOLVED);
    assert.equal(text((await client.getWait({ turnId: t, name: w.name })).wait!.payload), "via handle");
  });

  it("Await answers PENDING after its waitMs; an unknown wait is WaitNotFound", async () => {
    const t = turn();
    await client.createWait(t, { name: "w" });
    assert.equal((await client.awaitWait({ turnId: t, name: "w" }, { waitMs: 200 })).wait!.status, WaitStatus.PENDING);
    await assert.rejects(client.awaitWait({ turnId: t, name: "nobody" }, { waitMs: 200 }), (e: unknown) => e instanceof WaitNotFound && e.reason === "WAIT_NOT_FOUND");
    await assert.rejects(client.getWait({ turnId: t, name: "nobody" }), WaitNotFound);
  });

  it("listWaits and allWaits filter by turn and status, and page", async () => {
    const t = turn();
    for (const name of ["a", "b", "c"]) await client.createWait(t, { name });
    await client.signal(t, "b", "x");
    const pending = await client.listWaits({ turnId: t, status: WaitStatus.PENDING });
    assert.deepEqual(pending.waits.map((w) => w.name), ["a", "c"]);
    const names: string[] = [];
    for await (const w of client.allWaits({ turnId: t, pageSize: 1 })) names.push(w.name);
    assert.deepEqual(names, ["a", "b", "c"]);
  });
});

describe("the sidecar's wait limits", () => {
  it("a turn over --waits-per-turn-max is WaitsPerTurnExceeded; an Await over --awaits-max is retried until a slot frees", LONG, async () => {
    const own = await startSidecar({ extraArgs: ["--waits-per-turn-max", "1", "--awaits-max", "1"] });
    const c = new StepwellClient({ target: own.target, namespace: freshNamespace("ts-waits-limits"), ...own.connect });
    // Many attempts, so the second waiter keeps asking for as long as the first holds the only Await slot;
    // its interceptor counts the refusals it saw.
    let refused = 0;
    const counter: Interceptor = (next) => async (req) => {
      try {
        return await next(req);
      } catch (err) {
        if (toStepwellError(err).reason === "AWAITS") refused++;
        throw err;
      }
    };
    const patient = new StepwellClient({ target: own.target, namespace: c.namespace, maxAttempts: 1000, maxBackoffMs: 100, interceptors: [counter], ...own.connect });
    try {
      await c.createWait("t1", { name: "a" });
      await assert.rejects(c.createWait("t1", { name: "b" }), (e: unknown) => e instanceof WaitsPerTurnExceeded && e.reason === "WAITS_PER_TURN");
      const first = handled(c.waitForSignal("t1", "a"));
      await c.createWait("t2", { name: "a" });
      // The first waiter holds the slot once a lone Await of another wait is refused for it.
      await until("the first waiter holds the Await slot", async () => {
        try {
          await c.awaitWait({ turnId: "t2", name: "a" }, { waitMs: 1, maxAttempts: 1 });
          return undefined;
        } catch (err) {
          if (err instanceof Overloaded && err.reason === "AWAITS") return true;
          throw err;
        }
      });
      const second = handled(patient.waitForSignal("t2", "a"));
      await until("the second waiter refused for want of a slot", async () => (refused > 0 ? true : undefined));
      assert.equal(await c.signal("t1", "a", "one"), true);
      assert.equal(text(await first), "one");
      assert.equal(await c.signal("t2", "a", "two"), true);
      assert.equal(text(await second), "two");
    } finally {
      c.close();
      patient.close();
      await own.stop();
    }
  });
});
