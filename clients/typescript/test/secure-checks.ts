// Checks of a sidecar serving TLS (client certificates required) and auth.
// The second pass of test.sh runs this file with scenarios.test.js after
// generating a CA, certificates, an auth file and tokens into the folder
// STEPWELL_TEST_SECURITY_DIR names. Its name (not *.test.ts) keeps it out of
// the plaintext pass.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  PermissionDenied,
  StepwellClient,
  StepwellDurableExecutor,
  StepwellError,
  Unauthenticated,
  type StepwellClientOptions,
} from "../src/index.js";
import { freshNamespace, startSidecar, type Security, type Sidecar } from "./sidecar.js";

const T0 = "2026-01-01T00:00:00.000Z";

describe("a sidecar with TLS and auth", () => {
  let sidecar: Sidecar;
  let security: Security;
  const clients: StepwellClient[] = [];
  const make = (o: StepwellClientOptions) => {
    const c = new StepwellClient({ target: sidecar.target, ...o });
    clients.push(c);
    return c;
  };
  before(async () => {
    sidecar = await startSidecar();
    assert.ok(sidecar.security, "run by the second pass of test.sh (STEPWELL_TEST_SECURITY_DIR)");
    security = sidecar.security;
  });
  after(async () => {
    for (const c of clients) c.close();
    await sidecar?.stop();
  });

  it("answers the token and client certificate on every layer", async () => {
    const namespace = freshNamespace("sec");
    const sw = make({ namespace, token: security.token, tls: security.tls() });
    assert.ok((await sw.checkpoint({ turnId: "t", phase: "started", state: { n: 1 }, timestamp: T0 })).inserted);
    assert.deepEqual((await sw.restore("t")).map((c) => c.phase), ["started"]);
    assert.deepEqual(await sw.once("t/charge", () => ({ charged: 1 })), { charged: 1 });
    assert.deepEqual(await sw.once("t/charge", () => assert.fail("ran twice")), { charged: 1 });
    const executor = new StepwellDurableExecutor({
      clientOptions: { target: sidecar.target, namespace, token: security.token, tls: security.tls() },
    });
    try {
      await executor.checkpoint({ turnId: "e", sessionId: "s", phase: "started", state: { x: 1 }, timestamp: T0 });
      assert.deepEqual((await executor.restore("e")).map((c) => c.state), [{ x: 1 }]);
    } finally {
      executor.close();
    }
  });

  for (const [what, token] of [
    ["no token", undefined],
    ["a wrong token", "wrong-token"],
  ] as const) {
    it(`refuses ${what} with Unauthenticated`, async () => {
      const sw = make({ namespace: freshNamespace("sec"), token, tls: security.tls() });
      const err = await sw
        .checkpoint({ turnId: "t", phase: "started", state: {}, timestamp: T0 })
        .then(() => assert.fail("expected Unauthenticated"), (e: unknown) => e as StepwellError);
      assert.ok(err instanceof Unauthenticated, String(err));
      assert.equal(err.code, "UNAUTHENTICATED");
      assert.equal(err.reason, "UNAUTHENTICATED");
    });
  }

  it("lets a read-only token read but not write", async () => {
    const sw = make({ namespace: freshNamespace("sec"), token: security.readerToken, tls: security.tls() });
    assert.deepEqual(await sw.restore("t"), []);
    const err = await sw
      .checkpoint({ turnId: "t", phase: "started", state: {}, timestamp: T0 })
      .then(() => assert.fail("expected PermissionDenied"), (e: unknown) => e as StepwellError);
    assert.ok(err instanceof PermissionDenied, String(err));
    assert.equal(err.code, "PERMISSION_DENIED");
    assert.equal(err.reason, "PERMISSION_DENIED");
  });

  it("refuses connections without a client certificate, to an untrusted server, or in plaintext", async () => {
    const refused: [string, StepwellClientOptions][] = [
      // --tls-client-ca requires a client certificate.
      ["no client certificate", { tls: security.tls({ clientCert: false }) }],
      // The system roots do not know the throwaway CA.
      ["untrusted server", { tls: true }],
      ["plaintext", {}],
    ];
    for (const [what, o] of refused) {
      const sw = make({ ...o, token: security.token, maxAttempts: 1, timeoutMs: 5000 });
      const err = await sw.get("k").then(() => assert.fail(`${what}: expected a failure`), (e: unknown) => e as StepwellError);
      // Node reports a failed handshake as INTERNAL and a refused stream as
      // CANCELLED or UNAVAILABLE: what matters is that no call got through.
      assert.ok(err instanceof StepwellError, `${what}: ${String(err)}`);
      assert.ok(!(err instanceof Unauthenticated) && !(err instanceof PermissionDenied), `${what}: ${err.code} ${err.message}`);
    }
  });
});
