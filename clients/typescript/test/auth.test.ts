// The bearer token and the auth errors, against an in-process gRPC server
// that records each call's authorization header and answers the way the
// sidecar does with auth on: UNAUTHENTICATED for a missing or unknown token,
// PERMISSION_DENIED for a token without the role. It shows the header is on
// every call (the methods, once(), the DurableExecutor, raw), that the two
// errors are typed and sent once, and that the token shows up in no printed
// client, error or interceptor.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { inspect } from "node:util";
import { create, type DescMessage } from "@bufbuild/protobuf";
import { Code, ConnectError, type ConnectRouter, type HandlerContext } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import {
  BeginOutcome,
  PermissionDenied,
  StepwellClient,
  StepwellDurableExecutor,
  StepwellError,
  Unauthenticated,
  toStepwellError,
} from "../src/index.js";
import { ErrorInfoSchema } from "../src/gen/google/rpc/error_details_pb.js";
import { CheckpointService } from "../src/gen/stepwell/v1/checkpoint_pb.js";
import { BeginResponseSchema, IdempotencyService } from "../src/gen/stepwell/v1/idempotency_pb.js";

const TOKEN = "tok-3f9a1c7e5b2d4068a1f0c9e8d7b6a5f4";
const READER = "reader-5e1d2c3b4a59687766554433221100ff";
const T0 = "2026-01-01T00:00:00.000Z";

function refuse(code: Code, reason: string, message: string): ConnectError {
  return new ConnectError(message, code, undefined, [{ desc: ErrorInfoSchema, value: { reason, domain: "stepwell.dev" } }]);
}

/** Every RPC answers an empty response (Begin: ACQUIRED) for TOKEN. */
class FakeSidecar {
  calls: { method: string; auth: string | null }[] = [];
  private server!: http2.Http2Server;
  target = "";

  async start(): Promise<void> {
    const routes = (router: ConnectRouter) => {
      for (const service of [CheckpointService, IdempotencyService]) {
        const impl = Object.fromEntries(
          service.methods.map((m) => [m.localName, (_req: unknown, ctx: HandlerContext) => this.answer(m.name, m.output, ctx)]),
        );
        router.service(service, impl as never);
      }
    };
    this.server = http2.createServer(connectNodeAdapter({ routes }));
    await new Promise<void>((res) => this.server.listen(0, "127.0.0.1", res));
    this.target = `127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  private answer(method: string, output: DescMessage, ctx: HandlerContext): unknown {
    const auth = ctx.requestHeader.get("authorization");
    this.calls.push({ method, auth });
    if (auth === `Bearer ${READER}`) throw refuse(Code.PermissionDenied, "PERMISSION_DENIED", "no write grant");
    if (auth !== `Bearer ${TOKEN}`) throw refuse(Code.Unauthenticated, "UNAUTHENTICATED", "unknown or missing token");
    if (method === "Begin") return create(BeginResponseSchema, { outcome: BeginOutcome.ACQUIRED, leaseToken: 7n, attempt: 1 });
    return create(output);
  }

  methods(): Set<string> {
    return new Set(this.calls.map((c) => c.method));
  }

  async stop(): Promise<void> {
    await new Promise((res) => this.server.close(res));
  }
}

describe("bearer token", () => {
  let fake: FakeSidecar;
  const clients: StepwellClient[] = [];
  const make = (o: ConstructorParameters<typeof StepwellClient>[0] & object) => {
    const c = new StepwellClient({ target: fake.target, ...o });
    clients.push(c);
    return c;
  };
  before(async () => {
    fake = new FakeSidecar();
    await fake.start();
  });
  after(async () => {
    for (const c of clients) c.close();
    await fake.stop();
  });

  it("is sent on every call, and the caller's interceptors do not see it", async () => {
    fake.calls = [];
    const seenByInterceptor: (string | null)[] = [];
    const sw = make({
      token: TOKEN,
      namespace: "n",
      interceptors: [(next) => async (req) => (seenByInterceptor.push(req.header.get("authorization")), next(req))],
    });
    await sw.checkpoint({ turnId: "t", phase: "started", state: { a: 1 }, timestamp: T0 });
    await sw.restore("t");
    await sw.latest("t");
    await sw.listTurns();
    await sw.deleteTurn("t");
    await sw.begin("k");
    await sw.complete("k", 7n, "1");
    await sw.release("k", 7n);
    await sw.extend("k", 7n);
    await sw.get("k");
    assert.deepEqual(await sw.once("k2", () => ({ done: true })), { done: true });
    await sw.raw.idempotency.get({ key: "k" });
    const executor = new StepwellDurableExecutor({ clientOptions: { target: fake.target, token: TOKEN } });
    try {
      await executor.checkpoint({ turnId: "t", sessionId: "s", phase: "started", state: {}, timestamp: T0 });
      await executor.restore("t");
    } finally {
      executor.close();
    }
    assert.deepEqual(
      fake.methods(),
      new Set(["Checkpoint", "Restore", "ListTurns", "DeleteTurn", "Begin", "Complete", "Release", "Extend", "Get"]),
    );
    for (const c of fake.calls) assert.equal(c.auth, `Bearer ${TOKEN}`, c.method);
    assert.ok(seenByInterceptor.length > 0);
    assert.ok(seenByInterceptor.every((h) => h === null), "the token is added after the caller's interceptors");
  });

  it("is not sent when not given", async () => {
    fake.calls = [];
    await assert.rejects(make({}).get("k"), Unauthenticated);
    assert.deepEqual(fake.calls, [{ method: "Get", auth: null }]);
  });

  it("that is unknown gives Unauthenticated, sent once", async () => {
    fake.calls = [];
    const err = await make({ token: "not-the-token", maxAttempts: 5, initialBackoffMs: 1 })
      .checkpoint({ turnId: "t", phase: "started", state: {}, timestamp: T0 })
      .then(() => assert.fail("expected Unauthenticated"), (e: unknown) => e);
    assert.ok(err instanceof Unauthenticated, String(err));
    assert.equal(err.code, "UNAUTHENTICATED");
    assert.equal(err.reason, "UNAUTHENTICATED");
    assert.equal(fake.calls.length, 1);
  });

  it("without the role gives PermissionDenied, sent once", async () => {
    fake.calls = [];
    const err = await make({ token: READER, maxAttempts: 5, initialBackoffMs: 1 })
      .begin("k")
      .then(() => assert.fail("expected PermissionDenied"), (e: unknown) => e);
    assert.ok(err instanceof PermissionDenied, String(err));
    assert.equal(err.code, "PERMISSION_DENIED");
    assert.equal(err.reason, "PERMISSION_DENIED");
    assert.equal(fake.calls.length, 1);
  });

  it("codes without ErrorInfo are typed too", () => {
    assert.ok(toStepwellError(new ConnectError("proxy", Code.Unauthenticated)) instanceof Unauthenticated);
    assert.ok(toStepwellError(new ConnectError("proxy", Code.PermissionDenied)) instanceof PermissionDenied);
    assert.equal(toStepwellError(new ConnectError("proxy", Code.Internal)).constructor, StepwellError);
  });

  it("never shows up in a printed client or error", async () => {
    fake.calls = [];
    const sw = make({ token: TOKEN });
    await sw.get("k");
    const wrongToken = TOKEN.split("").reverse().join("");
    const wrong = make({ token: wrongToken });
    const err = await wrong.get("k").then(() => assert.fail("expected Unauthenticated"), (e: unknown) => e as StepwellError);
    assert.ok(err instanceof Unauthenticated);
    // The check has teeth: the calls did carry the tokens.
    assert.deepEqual(
      fake.calls.map((c) => c.auth),
      [`Bearer ${TOKEN}`, `Bearer ${wrongToken}`],
    );
    const deep = { depth: Infinity, showHidden: true, getters: true } as const;
    const shown = [
      inspect(sw, deep),
      inspect(wrong, deep),
      inspect(err, deep),
      String(err),
      err.stack ?? "",
      JSON.stringify(err),
      JSON.stringify(sw, (_k, v: unknown) => (typeof v === "bigint" ? String(v) : v)),
    ];
    for (const text of shown) {
      assert.ok(!text.includes(TOKEN) && !text.includes(wrongToken), text.slice(0, 2000));
    }
  });

  it("and TLS options that cannot work are refused without echoing the token", () => {
    for (const bad of ["two words", "line\nbreak", ""]) {
      assert.throws(
        () => new StepwellClient({ target: "127.0.0.1:1", token: bad }),
        (e: Error) => e instanceof TypeError && (bad === "" || !e.message.includes(bad)),
      );
    }
    assert.throws(() => new StepwellClient({ target: "127.0.0.1:1", tls: { cert: Buffer.from("c") } }), TypeError);
    assert.throws(() => new StepwellClient({ target: "127.0.0.1:1", tls: { ca: "/nonexistent/ca.pem" } }), /\/nonexistent\/ca\.pem/);
    assert.throws(() => new StepwellClient({ target: "https://127.0.0.1:1" }), TypeError);
  });

  it("is never sent in the clear beyond loopback", () => {
    const remote = ["stepwell.internal:50051", "10.0.0.7:50051", "[2001:db8::1]:50051", "http://stepwell.internal:50051", "128.0.0.1:1"];
    const local = ["127.0.0.1:1", "127.8.9.10:1", "localhost:1", "[::1]:1", "unix:/tmp/stepwell.sock", "http://localhost:1"];
    for (const target of remote) {
      assert.throws(
        () => new StepwellClient({ target, token: TOKEN }),
        (e: Error) => e instanceof TypeError && /never sent in the clear/.test(e.message) && !e.message.includes(TOKEN),
        target,
      );
      assert.throws(
        () => new StepwellDurableExecutor({ clientOptions: { target, token: TOKEN } }),
        /never sent in the clear/,
        target,
      );
      // Without a token, or over TLS, the same target is fine.
      new StepwellClient({ target }).close();
      new StepwellClient({ target, token: TOKEN, tls: true }).close();
    }
    for (const target of local) new StepwellClient({ target, token: TOKEN }).close();
  });
});
