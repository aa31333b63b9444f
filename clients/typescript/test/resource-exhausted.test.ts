// RESOURCE_EXHAUSTED and its reasons: which error class each becomes and
// which of them the client retries. OVERLOADED, AWAITS (and a
// RESOURCE_EXHAUSTED without ErrorInfo) are retried with backoff;
// MESSAGE_TOO_LARGE, STORE_FULL and WAITS_PER_TURN are thrown after one
// attempt. The oversized message goes to the
// real sidecar; the other statuses are built here and thrown by an
// interceptor in place of the RPC, so the client's own retry loop decides.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import {
  MessageTooLarge,
  Overloaded,
  StepwellClient,
  StepwellError,
  StoreFull,
  Unavailable,
  WaitsPerTurnExceeded,
  isRetryable,
  toStepwellError,
} from "../src/index.js";
import { ErrorInfoSchema } from "../src/gen/google/rpc/error_details_pb.js";
import { freshNamespace, startSidecar, type Sidecar } from "./sidecar.js";

/** The sidecar's default --message-bytes-max. */
const MESSAGE_BYTES_MAX = 4_194_304;
const T0 = "2026-01-01T00:00:00.000Z";

/** A status as the sidecar sends it: `code`, with a stepwell ErrorInfo unless reason is undefined. */
function constructed(code: Code, reason?: string, metadata: Record<string, string> = {}): ConnectError {
  const details = reason === undefined ? [] : [{ desc: ErrorInfoSchema, value: { reason, domain: "stepwell.dev", metadata } }];
  return new ConnectError("constructed", code, undefined, details);
}

/** An interceptor that counts attempts and, when given an error, throws it instead of calling the sidecar. */
function counting(fail?: ConnectError): { attempts: () => number; interceptor: Interceptor } {
  let attempts = 0;
  return {
    attempts: () => attempts,
    interceptor: (next) => async (req) => {
      attempts++;
      if (fail) throw fail;
      return next(req);
    },
  };
}

let sidecar: Sidecar;
before(async () => {
  sidecar = await startSidecar();
});
after(async () => {
  await sidecar?.stop();
});

describe("RESOURCE_EXHAUSTED reasons", () => {
  it("map to their error classes; an unknown or missing reason stays Overloaded", () => {
    const tooLarge = toStepwellError(constructed(Code.ResourceExhausted, "MESSAGE_TOO_LARGE", { limit_bytes: "4194304" }));
    assert.ok(tooLarge instanceof MessageTooLarge);
    assert.equal(tooLarge.code, "RESOURCE_EXHAUSTED");
    assert.equal(tooLarge.reason, "MESSAGE_TOO_LARGE");
    assert.equal(tooLarge.limitBytes, MESSAGE_BYTES_MAX);
    const noLimit = toStepwellError(constructed(Code.ResourceExhausted, "MESSAGE_TOO_LARGE"));
    assert.ok(noLimit instanceof MessageTooLarge);
    assert.equal(noLimit.limitBytes, undefined);

    const full = toStepwellError(constructed(Code.ResourceExhausted, "STORE_FULL"));
    assert.ok(full instanceof StoreFull);
    assert.equal(full.reason, "STORE_FULL");
    assert.ok(toStepwellError(constructed(Code.ResourceExhausted, "OVERLOADED")) instanceof Overloaded);
    assert.equal(toStepwellError(constructed(Code.ResourceExhausted, "AWAITS")).constructor, Overloaded);
    const perTurn = toStepwellError(constructed(Code.ResourceExhausted, "WAITS_PER_TURN"));
    assert.ok(perTurn instanceof WaitsPerTurnExceeded);
    // None of these reasons is an Overloaded: code that retries Overloaded must not see them.
    assert.ok(!(tooLarge instanceof Overloaded) && !(full instanceof Overloaded) && !(perTurn instanceof Overloaded));

    for (const reason of ["SOMETHING_NEW", undefined]) {
      const e = toStepwellError(constructed(Code.ResourceExhausted, reason));
      assert.equal(e.constructor, Overloaded, `reason ${reason}`);
    }
  });

  it("decide the retry: OVERLOADED, AWAITS or no ErrorInfo yes, MESSAGE_TOO_LARGE, STORE_FULL and WAITS_PER_TURN no", () => {
    const cases: [string | undefined, boolean][] = [
      ["OVERLOADED", true],
      ["AWAITS", true],
      [undefined, true],
      ["MESSAGE_TOO_LARGE", false],
      ["STORE_FULL", false],
      ["WAITS_PER_TURN", false],
      ["SOMETHING_NEW", false],
    ];
    for (const [reason, retried] of cases) {
      assert.equal(isRetryable(toStepwellError(constructed(Code.ResourceExhausted, reason))), retried, `reason ${reason}`);
    }
    for (const reason of ["STORE_UNAVAILABLE", "NOT_READY", undefined]) {
      const e = toStepwellError(constructed(Code.Unavailable, reason));
      assert.ok(e instanceof Unavailable);
      assert.equal(isRetryable(e), true, `UNAVAILABLE ${reason}`);
    }
    assert.equal(isRetryable(toStepwellError(constructed(Code.AlreadyExists, "CHECKPOINT_CONFLICT"))), false);
  });

  const attemptsByReason: [string | undefined, new (...args: never[]) => StepwellError, number][] = [
    ["OVERLOADED", Overloaded, 5],
    [undefined, Overloaded, 5],
    ["MESSAGE_TOO_LARGE", MessageTooLarge, 1],
    ["STORE_FULL", StoreFull, 1],
    ["AWAITS", Overloaded, 5],
    ["WAITS_PER_TURN", WaitsPerTurnExceeded, 1],
  ];
  /** A client allowing 5 attempts with tiny backoffs, each attempt counted by `counter`. */
  const countedClient = (counter: ReturnType<typeof counting>, prefix: string) =>
    new StepwellClient({
      target: sidecar.target,
      namespace: freshNamespace(prefix),
      maxAttempts: 5,
      initialBackoffMs: 1,
      maxBackoffMs: 2,
      interceptors: [counter.interceptor],
    });

  for (const [reason, errorClass, attempts] of attemptsByReason) {
    it(`the client makes ${attempts} attempt(s) on RESOURCE_EXHAUSTED ${reason ?? "without ErrorInfo"}`, async () => {
      const counter = counting(constructed(Code.ResourceExhausted, reason));
      const client = countedClient(counter, "ts-exhausted");
      try {
        await assert.rejects(
          client.checkpoint({ turnId: "t", phase: "started", state: {}, timestamp: T0 }),
          (e: unknown) => e instanceof errorClass && (e as StepwellError).code === "RESOURCE_EXHAUSTED",
        );
        assert.equal(counter.attempts(), attempts);
      } finally {
        client.close();
      }
    });
  }

  it("an oversized checkpoint is MessageTooLarge, sent once, and stores nothing", async () => {
    const counter = counting();
    const client = countedClient(counter, "ts-too-large");
    try {
      // A 4.5 MB JSON string: the message is over the limit.
      const state = "x".repeat(4_500_000);
      await assert.rejects(client.checkpoint({ turnId: "big", phase: "started", state, timestamp: T0 }), (e: unknown) => {
        assert.ok(e instanceof MessageTooLarge, String(e));
        assert.equal(e.code, "RESOURCE_EXHAUSTED");
        assert.equal(e.reason, "MESSAGE_TOO_LARGE");
        assert.equal(e.limitBytes, MESSAGE_BYTES_MAX);
        return true;
      });
      assert.equal(counter.attempts(), 1);
      assert.deepEqual(await client.restore("big"), []);
      // The client stays usable: a small checkpoint of the same turn is stored.
      const small = await client.checkpoint({ turnId: "big", phase: "started", state: { small: true }, timestamp: T0 });
      assert.equal(small.inserted, true);
      assert.deepEqual((await client.restore("big")).map((c) => c.phase), ["started"]);
    } finally {
      client.close();
    }
  });
});
