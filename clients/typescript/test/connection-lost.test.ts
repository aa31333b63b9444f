// Calls whose connection to the sidecar is lost, through a DropProxy in
// front of a sidecar (plaintext; TLS in the second pass of test.sh): the
// client reports Unavailable and retries, but keeps the caller's own
// cancellation and the sidecar's own CANCELLED as they are.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { create, toBinary } from "@bufbuild/protobuf";
import { StepwellClient, StepwellError, Unavailable } from "../src/index.js";
import { ErrorInfoSchema } from "../src/gen/google/rpc/error_details_pb.js";
import { DropProxy, trailersOnly, type DropMode } from "./drop-proxy.js";
import { freshNamespace, startSidecar, type Sidecar } from "./sidecar.js";

let sidecar: Sidecar;
const proxies: DropProxy[] = [];
const clients: StepwellClient[] = [];
before(async () => {
  sidecar = await startSidecar();
});
after(async () => {
  for (const c of clients) c.close();
  for (const p of proxies) await p.close();
  await sidecar?.stop();
});

async function proxy(): Promise<DropProxy> {
  const p = await DropProxy.start(sidecar.target, sidecar.security);
  proxies.push(p);
  return p;
}

function clientVia(p: DropProxy, namespace: string, maxAttempts: number): StepwellClient {
  const c = new StepwellClient({ target: p.target, namespace, maxAttempts, initialBackoffMs: 1, ...sidecar.connect });
  clients.push(c);
  return c;
}

/** How many checkpoints `turnId` has, asked of the sidecar directly. */
async function stored(namespace: string, turnId: string): Promise<number> {
  const direct = new StepwellClient({ target: sidecar.target, namespace, ...sidecar.connect });
  try {
    return (await direct.restore(turnId)).length;
  } finally {
    direct.close();
  }
}

/**
 * A call through the proxy, so that the next call uses an established
 * connection; retried, since the client may first learn here that the proxy
 * cut its last connection.
 */
async function warm(c: StepwellClient): Promise<void> {
  await c.restore("warm", { maxAttempts: 10 });
}

const at = (second: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, second));

describe("a lost connection", () => {
  for (const mode of ["fin", "rst", "reset-stream"] as DropMode[]) {
    it(`cut mid-call (${mode}) is Unavailable, and retried to success`, async () => {
      const namespace = freshNamespace("lost");
      const p = await proxy();
      const once = clientVia(p, namespace, 1);
      await warm(once);
      p.arm(mode);
      const err = await once
        .checkpoint({ turnId: "once", phase: "p", state: { n: 1 }, timestamp: at(1) })
        .then(() => assert.fail("the lost call succeeded"), (e: unknown) => e);
      assert.ok(err instanceof Unavailable, `want Unavailable, got ${String(err)}`);
      assert.equal(err.code, "UNAVAILABLE");
      assert.equal(err.reason, "");
      assert.equal(await stored(namespace, "once"), 0);

      const retrying = clientVia(p, namespace, 5);
      await warm(retrying);
      p.arm(mode);
      const before = p.requests;
      assert.equal((await retrying.checkpoint({ turnId: "retried", phase: "p", state: { n: 1 }, timestamp: at(1) })).inserted, true);
      assert.equal(p.requests - before, 2, "the lost attempt and its retry");
      assert.equal(await stored(namespace, "retried"), 1);
    });
  }

  // The next call, made at once on the connection the client still holds,
  // goes through on a new one or fails Unavailable, never otherwise; with
  // retries it always goes through. Where the client learns of the loss is
  // a race, so it is run many times.
  for (const reset of [false, true]) {
    it(`between calls (${reset ? "RST" : "FIN"}) is Unavailable, and retried to success`, async () => {
      const namespace = freshNamespace("gone");
      const [pOnce, pRetrying] = [await proxy(), await proxy()];
      const once = clientVia(pOnce, namespace, 1);
      const retrying = clientVia(pRetrying, namespace, 5);
      // Over TLS, Node misses nearly every such RST until a keepalive PING goes unanswered, which
      // takes seconds each: fewer rounds.
      const rounds = reset ? 3 : 20;
      for (let i = 1; i <= rounds; i++) {
        await warm(once);
        pOnce.cutAll(reset);
        await once.checkpoint({ turnId: "once", phase: "p", state: { n: i }, timestamp: at(i) }).catch((e: unknown) => {
          assert.ok(e instanceof Unavailable, `round ${i}: want success or Unavailable, got ${String(e)}`);
        });
        await warm(retrying);
        pRetrying.cutAll(reset);
        await retrying.checkpoint({ turnId: "retried", phase: "p", state: { n: i }, timestamp: at(i) });
      }
      assert.equal(await stored(namespace, "retried"), rounds);
    });
  }

  it("the caller's own cancellation stays CANCELLED and is not retried", async () => {
    const p = await proxy();
    const c = clientVia(p, freshNamespace("cancel"), 5);
    await warm(c);
    p.arm("hold");
    const before = p.requests;
    const abort = new AbortController();
    const call = c.checkpoint({ turnId: "t", phase: "p", state: { n: 1 }, timestamp: at(1) }, { signal: abort.signal });
    await p.waitApplied(1);
    abort.abort();
    const err = await call.then(() => assert.fail("the aborted call succeeded"), (e: unknown) => e);
    assert.ok(err instanceof StepwellError && err.code === "CANCELLED", String(err));
    assert.equal(p.requests - before, 1);
  });

  it("a CANCELLED the sidecar sent (BODY_BROKEN_OFF) stays CANCELLED and is not retried", async () => {
    const info = toBinary(ErrorInfoSchema, create(ErrorInfoSchema, { reason: "BODY_BROKEN_OFF", domain: "stepwell.dev" }));
    const message = "the request body broke off";
    // google.rpc.Status { code = 1, message, details = [Any { type_url, value }] }, encoded by hand.
    const field = (tag: number, bytes: Buffer) => Buffer.concat([Buffer.from([tag, bytes.length]), bytes]);
    const any = Buffer.concat([field(0x0a, Buffer.from("type.googleapis.com/google.rpc.ErrorInfo")), field(0x12, Buffer.from(info))]);
    const status = Buffer.concat([Buffer.from([0x08, 1]), field(0x12, Buffer.from(message)), field(0x1a, any)]);
    const p = await proxy();
    const c = clientVia(p, freshNamespace("broken"), 5);
    await warm(c);
    p.arm(
      "answer",
      trailersOnly([
        [":status", "200"],
        ["content-type", "application/grpc"],
        ["grpc-status", "1"],
        ["grpc-message", "the request body broke off"],
        ["grpc-status-details-bin", status.toString("base64").replace(/=+$/, "")],
      ]),
    );
    const before = p.requests;
    const err = await c
      .checkpoint({ turnId: "t", phase: "p", state: { n: 1 }, timestamp: at(1) })
      .then(() => assert.fail("the call succeeded"), (e: unknown) => e);
    assert.ok(err instanceof StepwellError && err.code === "CANCELLED" && err.reason === "BODY_BROKEN_OFF", String(err));
    assert.equal(p.requests - before, 1);
  });
});
