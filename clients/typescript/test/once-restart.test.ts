// once() through a sidecar restart: the sidecar (a real one, on a free port
// and a SQLite file) is SIGKILLed while the effect runs, and started again on
// the same port and file while the holder retries Complete. The holder
// records its result with its fencing token, so the effect runs once; the
// caller's signal stops the retries; and a lease that runs out first is said
// so, and lets the next caller run the effect again.
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import type { Interceptor } from "@connectrpc/connect";
import { StepwellClient, StepwellError, Unavailable } from "../src/index.js";
import { freshNamespace, startSidecar, type Sidecar } from "./sidecar.js";

const sidecars: Sidecar[] = [];
const clients: StepwellClient[] = [];
after(async () => {
  for (const c of clients) c.close();
  for (const s of sidecars) await s.stop();
});

/** A promise and the function that resolves it. */
function signal(): { promise: Promise<void>; fire: () => void } {
  let fire!: () => void;
  const promise = new Promise<void>((r) => (fire = r));
  return { promise, fire };
}

/**
 * The attempts of Complete a client makes at most, without the holder's own
 * retries: the client's maxAttempts (5). The restart test waits for one more
 * failed attempt than that before it starts the sidecar again, so that only
 * a holder that goes on retrying through the outage records its result.
 */
const CALL_ATTEMPTS = 5;

/**
 * A sidecar of the test's own, a client of it, `completeFailed`, resolved
 * when an attempt of Complete fails, and `completeFailedMoreThanACall`,
 * resolved when CALL_ATTEMPTS + 1 attempts failed.
 */
async function setup(prefix: string): Promise<{ sidecar: Sidecar; client: StepwellClient; completeFailed: Promise<void>; completeFailedMoreThanACall: Promise<void> }> {
  const sidecar = await startSidecar();
  sidecars.push(sidecar);
  const failed = signal();
  const failedMore = signal();
  let failures = 0;
  const watch: Interceptor = (next) => async (req) => {
    try {
      return await next(req);
    } catch (err) {
      if (req.method.name === "Complete") {
        failed.fire();
        if (++failures > CALL_ATTEMPTS) failedMore.fire();
      }
      throw err;
    }
  };
  const client = new StepwellClient({
    target: sidecar.target,
    namespace: freshNamespace(prefix),
    interceptors: [watch],
    maxAttempts: CALL_ATTEMPTS,
    maxBackoffMs: 200,
    ...sidecar.connect,
  });
  clients.push(client);
  return { sidecar, client, completeFailed: failed.promise, completeFailedMoreThanACall: failedMore.promise };
}

/** Starts once() on an effect that counts its runs and waits for `finish`; `started` fires as it begins. */
function onceBlocked(client: StepwellClient, key: string, opts: Parameters<StepwellClient["once"]>[2]) {
  const started = signal();
  const finish = signal();
  const runs = { n: 0 };
  const outcome = client
    .once(
      key,
      async () => {
        runs.n++;
        started.fire();
        await finish.promise;
        return { receipt: "R-1" };
      },
      opts,
    )
    .then((value) => ({ value }), (error: unknown) => ({ error }));
  return { started: started.promise, finish: finish.fire, runs, outcome };
}

describe("once() through a sidecar restart", () => {
  it("records the result after the sidecar is back: the effect runs once, and a second once() returns it", async () => {
    const { sidecar, client, completeFailedMoreThanACall } = await setup("once-restart");
    const call = onceBlocked(client, "charge-1", { leaseMs: 60_000 });
    await call.started;
    await sidecar.kill();
    call.finish();
    // The holder has its result, and Complete finds no sidecar, more often than one call's retries
    // allow; a holder that gave up instead has settled the call.
    const ended = await Promise.race([completeFailedMoreThanACall.then(() => undefined), call.outcome]);
    assert.equal(ended, undefined, `once() ended while the sidecar was down: ${String((ended as { error?: unknown } | undefined)?.error)}`);
    await sidecar.start();
    const outcome = await call.outcome;
    assert.deepEqual(outcome, { value: { receipt: "R-1" } }, `once() did not return the effect's result: ${String((outcome as { error?: unknown }).error)}`);
    assert.equal(call.runs.n, 1);
    const again = await client.once("charge-1", () => {
      call.runs.n++;
      return { receipt: "R-2" };
    });
    assert.deepEqual(again, { receipt: "R-1" });
    assert.equal(call.runs.n, 1, "the effect ran again");
  });

  it("stops retrying Complete when the caller's signal aborts", async () => {
    const { sidecar, client, completeFailed } = await setup("once-abort");
    const ac = new AbortController();
    const call = onceBlocked(client, "charge-2", { leaseMs: 60_000, signal: ac.signal });
    await call.started;
    await sidecar.kill();
    call.finish();
    await completeFailed;
    const reason = new Error("the caller gave up");
    ac.abort(reason);
    // Aborted in the backoff between attempts: the signal's reason; during an attempt: that call's CANCELLED.
    const { error } = (await call.outcome) as { error?: unknown };
    assert.ok(error === reason || (error instanceof StepwellError && error.code === "CANCELLED"), `want the abort, got ${String(error)}`);
    assert.equal(call.runs.n, 1);
  });

  it("gives up when the lease runs out before the sidecar is back, naming the key; the next caller runs the effect again", async () => {
    const { sidecar, client, completeFailed } = await setup("once-lease-out");
    const call = onceBlocked(client, "charge-3", { leaseMs: 1500 });
    await call.started;
    await sidecar.kill();
    call.finish();
    await completeFailed;
    const outcome = (await call.outcome) as { error?: unknown };
    assert.ok(outcome.error instanceof Unavailable, `want Unavailable, got ${JSON.stringify(outcome)}`);
    assert.match(outcome.error.message, /once\("charge-3"\): the result was not recorded before the lease ran out/);
    assert.equal(outcome.error.metadata.key, "charge-3");
    // What at most once does not cover: the holder gave up, so the next caller runs the effect again.
    await sidecar.start();
    const seen = await client.once("charge-3", (ctx) => ({ previousLeaseExpired: ctx.previousLeaseExpired, attempt: ctx.attempt }));
    assert.deepEqual(seen, { previousLeaseExpired: true, attempt: 2 });
  });
});
