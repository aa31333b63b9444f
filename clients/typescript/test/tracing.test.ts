// Trace context from the TypeScript client to the real sidecar's spans.
//
// An OTLP/gRPC trace receiver runs in the test process (node:http2, the
// ExportTraceServiceRequest decoded by hand); a sidecar is started exporting
// its spans to it. The OpenTelemetry SDK is registered with the W3C
// propagator and an AsyncLocalStorage context manager, and calls are made
// inside a span, outside any span, with `traceContext: false`, and with a
// `traceparent` the caller set itself. The sidecar is then stopped with
// SIGTERM, which exports every span it still holds, so once it has exited
// the receiver has them all. Each test then checks the server spans of one
// namespace: their trace id and parent are the caller's span's, or not.
// A last test runs the client, copied where `@opentelemetry/api` cannot be
// found, in a child process: it sends no trace context and works as before.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";
import { trace, type SpanContext } from "@opentelemetry/api";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { NodeTracerProvider } from "@opentelemetry/sdk-trace-node";
import { StepwellClient, StepwellDurableExecutor, traceContextAvailable } from "../src/index.js";
import { PKG_ROOT, freshNamespace, startSidecar, type Sidecar } from "./sidecar.js";

const EXPORT_PATH = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
const CHECKPOINT_SPAN = "stepwell.v1.CheckpointService/Checkpoint";
const BEGIN_SPAN = "stepwell.v1.IdempotencyService/Begin";

interface ReceivedSpan {
  traceId: string; // hex, 32 digits
  spanId: string; // hex, 16 digits
  parentSpanId: string; // hex, "" for a root span
  name: string;
  attributes: Map<string, string>; // the string-valued ones
}

const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");
const utf8 = new TextDecoder();

/** The length-delimited fields of a message, in order; other wire types are skipped. */
function lengthDelimited(buf: Uint8Array): Array<[number, Uint8Array]> {
  const r = new BinaryReader(buf);
  const out: Array<[number, Uint8Array]> = [];
  while (r.pos < r.len) {
    const [no, wireType] = r.tag();
    if (wireType === WireType.LengthDelimited) out.push([no, r.bytes()]);
    else r.skip(wireType, no);
  }
  return out;
}

/** opentelemetry.proto.trace.v1.Span: trace_id 1, span_id 2, parent_span_id 4, name 5, attributes 9. */
function decodeSpan(buf: Uint8Array): ReceivedSpan {
  const span: ReceivedSpan = { traceId: "", spanId: "", parentSpanId: "", name: "", attributes: new Map() };
  for (const [no, value] of lengthDelimited(buf)) {
    if (no === 1) span.traceId = hex(value);
    else if (no === 2) span.spanId = hex(value);
    else if (no === 4) span.parentSpanId = hex(value);
    else if (no === 5) span.name = utf8.decode(value);
    else if (no === 9) {
      // KeyValue: key 1, value 2 (AnyValue: string_value 1)
      let key = "";
      let text: string | undefined;
      for (const [kvNo, kvValue] of lengthDelimited(value)) {
        if (kvNo === 1) key = utf8.decode(kvValue);
        else if (kvNo === 2) for (const [avNo, avValue] of lengthDelimited(kvValue)) if (avNo === 1) text = utf8.decode(avValue);
      }
      if (text !== undefined) span.attributes.set(key, text);
    }
  }
  return span;
}

/** ExportTraceServiceRequest: resource_spans 1 → scope_spans 2 → spans 2. */
function decodeExport(message: Uint8Array): ReceivedSpan[] {
  const spans: ReceivedSpan[] = [];
  for (const [rsNo, resourceSpans] of lengthDelimited(message)) {
    if (rsNo !== 1) continue;
    for (const [ssNo, scopeSpans] of lengthDelimited(resourceSpans)) {
      if (ssNo !== 2) continue;
      for (const [spNo, span] of lengthDelimited(scopeSpans)) if (spNo === 2) spans.push(decodeSpan(span));
    }
  }
  return spans;
}

/** An OTLP/gRPC trace endpoint (plaintext HTTP/2) on a free loopback port that keeps every span it is sent. */
class OtlpReceiver {
  readonly spans: ReceivedSpan[] = [];
  readonly errors: unknown[] = [];
  readonly server = http2.createServer();

  constructor() {
    this.server.on("stream", (stream, headers) => {
      if (headers[":method"] !== "POST" || headers[":path"] !== EXPORT_PATH) {
        stream.respond({ ":status": 200, "content-type": "application/grpc", "grpc-status": "12" }, { endStream: true });
        return;
      }
      const chunks: Buffer[] = [];
      stream.on("data", (chunk: Buffer) => chunks.push(chunk));
      stream.on("end", () => {
        try {
          this.take(Buffer.concat(chunks));
        } catch (err) {
          this.errors.push(err);
        }
        stream.respond({ ":status": 200, "content-type": "application/grpc" }, { waitForTrailers: true });
        stream.on("wantTrailers", () => stream.sendTrailers({ "grpc-status": "0" }));
        stream.end(Buffer.alloc(5)); // one uncompressed frame of an empty ExportTraceServiceResponse
      });
    });
  }

  /** Decodes the gRPC frames of a request body: a compressed-flag byte, a 4-byte big-endian length, the message. */
  private take(body: Buffer): void {
    for (let at = 0; at < body.length; ) {
      assert.ok(at + 5 <= body.length, "truncated gRPC frame header");
      assert.equal(body[at], 0, "the exporter sent a compressed message");
      const length = body.readUInt32BE(at + 1);
      assert.ok(at + 5 + length <= body.length, "truncated gRPC message");
      this.spans.push(...decodeExport(body.subarray(at + 5, at + 5 + length)));
      at += 5 + length;
    }
  }

  async listen(): Promise<number> {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    return (this.server.address() as AddressInfo).port;
  }

  async close(): Promise<void> {
    await new Promise((resolve) => this.server.close(resolve));
  }

  /** The server spans named `name` of calls made in `namespace`. */
  of(name: string, namespace: string): ReceivedSpan[] {
    return this.spans.filter((s) => s.name === name && s.attributes.get("stepwell.namespace") === namespace);
  }
}

const receiver = new OtlpReceiver();
const provider = new NodeTracerProvider();
const tracer = provider.getTracer("stepwell-typescript-client-tests");
let sidecar: Sidecar | undefined;

const ns = {
  inSpan: freshNamespace("trace-in-span"),
  executor: freshNamespace("trace-executor"),
  noSpan: freshNamespace("trace-no-span"),
  off: freshNamespace("trace-off"),
  callerHeader: freshNamespace("trace-caller-header"),
};
// The span contexts of the spans active during the calls, and the traceparent a caller set itself.
let inSpan: SpanContext;
let offSpan: SpanContext;
let headerSpan: SpanContext;
const CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c";
const CALLER_SPAN = "b7ad6b7169203331";
let sidecarExit: { code: number | null; signal: NodeJS.Signals | null };
// The traceparent of each call of the in-span client, as its own interceptor saw it before and after the rest ran.
const seenByCallerInterceptor: Array<{ before: string | null; after: string | null }> = [];

/** Runs fn inside a new active span and returns that span's context once fn is done and the span ended. */
async function inActiveSpan(name: string, fn: () => Promise<void>): Promise<SpanContext> {
  return tracer.startActiveSpan(name, async (span) => {
    try {
      await fn();
    } finally {
      span.end();
    }
    return span.spanContext();
  });
}

before(async () => {
  provider.register({ propagator: new W3CTraceContextPropagator() }); // and an AsyncLocalStorage context manager
  const port = await receiver.listen();
  sidecar = await startSidecar({ security: undefined, env: { OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}` } });
  const target = sidecar.target;
  const checkpoint = (turnId: string) => ({ turnId, phase: "started", state: { step: 1 }, timestamp: new Date() });

  const client = new StepwellClient({
    target,
    namespace: ns.inSpan,
    interceptors: [
      (next) => async (req) => {
        const before = req.header.get("traceparent");
        const res = await next(req);
        seenByCallerInterceptor.push({ before, after: req.header.get("traceparent") });
        return res;
      },
    ],
  });
  const executor = new StepwellDurableExecutor({ clientOptions: { target, namespace: ns.executor } });
  const off = new StepwellClient({ target, namespace: ns.off, traceContext: false });
  const callerHeader = new StepwellClient({
    target,
    namespace: ns.callerHeader,
    interceptors: [
      (next) => async (req) => {
        req.header.set("traceparent", `00-${CALLER_TRACE}-${CALLER_SPAN}-01`);
        return next(req);
      },
    ],
  });
  try {
    inSpan = await inActiveSpan("caller", async () => {
      assert.ok((await client.checkpoint(checkpoint("turn-1"))).inserted);
      await client.begin("key-1");
      await executor.checkpoint({ turnId: "turn-1", sessionId: "s1", phase: "started", state: {}, timestamp: new Date().toISOString() });
    });
    // Outside any span: the same client, another namespace.
    assert.ok((await client.checkpoint(checkpoint("turn-1"), { namespace: ns.noSpan })).inserted);
    await client.begin("key-1", { namespace: ns.noSpan });
    offSpan = await inActiveSpan("caller-off", async () => {
      assert.ok((await off.checkpoint(checkpoint("turn-1"))).inserted);
      await off.begin("key-1");
    });
    headerSpan = await inActiveSpan("caller-header", async () => {
      assert.ok((await callerHeader.checkpoint(checkpoint("turn-1"))).inserted);
    });
  } finally {
    client.close();
    await executor.close();
    off.close();
    callerHeader.close();
    // SIGTERM: the sidecar exports every span it still holds before it exits.
    await sidecar.stop();
    sidecarExit = { code: sidecar.proc.exitCode, signal: sidecar.proc.signalCode };
  }
});

after(async () => {
  await sidecar?.stop();
  await receiver.close();
  await provider.shutdown();
});

/** The one server span `name` of `namespace`. */
function only(name: string, namespace: string): ReceivedSpan {
  const found = receiver.of(name, namespace);
  const names = [...new Set(receiver.spans.map((s) => s.name))].sort();
  assert.equal(found.length, 1, `${name} spans in ${namespace}: ${found.length} of ${receiver.spans.length} received (${names.join(", ")})`);
  return found[0]!;
}

test("@opentelemetry/api is loaded for these tests, the sidecar stopped cleanly and every export decoded", () => {
  assert.equal(traceContextAvailable, true);
  assert.deepEqual(sidecarExit, { code: 0, signal: null });
  assert.deepEqual(receiver.errors, []);
});

test("a checkpoint inside an active span is a child of that span", () => {
  const span = only(CHECKPOINT_SPAN, ns.inSpan);
  assert.equal(span.traceId, inSpan.traceId);
  assert.equal(span.parentSpanId, inSpan.spanId);
});

test("a begin inside an active span is a child of that span", () => {
  const span = only(BEGIN_SPAN, ns.inSpan);
  assert.equal(span.traceId, inSpan.traceId);
  assert.equal(span.parentSpanId, inSpan.spanId);
});

test("the DurableExecutor's checkpoint inside an active span is a child of that span", () => {
  const span = only(CHECKPOINT_SPAN, ns.executor);
  assert.equal(span.traceId, inSpan.traceId);
  assert.equal(span.parentSpanId, inSpan.spanId);
});

test("the caller's interceptors run before the trace context is added", () => {
  const traceparent = `00-${inSpan.traceId}-${inSpan.spanId}-01`;
  // checkpoint and begin inside the span, then checkpoint and begin outside any span
  assert.deepEqual(seenByCallerInterceptor, [
    { before: null, after: traceparent },
    { before: null, after: traceparent },
    { before: null, after: null },
    { before: null, after: null },
  ]);
});

test("calls outside any span work and their server spans are roots of other traces", () => {
  for (const name of [CHECKPOINT_SPAN, BEGIN_SPAN]) {
    const span = only(name, ns.noSpan);
    assert.equal(span.parentSpanId, "", name);
    assert.match(span.traceId, /^[0-9a-f]{32}$/, name);
    assert.notEqual(span.traceId, inSpan.traceId, name);
  }
});

test("with traceContext: false a call inside an active span is not its child", () => {
  for (const name of [CHECKPOINT_SPAN, BEGIN_SPAN]) {
    const span = only(name, ns.off);
    assert.equal(span.parentSpanId, "", name);
    assert.notEqual(span.traceId, offSpan.traceId, name);
  }
});

test("a traceparent the caller set itself is kept", () => {
  const span = only(CHECKPOINT_SPAN, ns.callerHeader);
  assert.equal(span.traceId, CALLER_TRACE);
  assert.equal(span.parentSpanId, CALLER_SPAN);
  assert.notEqual(span.traceId, headerSpan.traceId);
});

test("without @opentelemetry/api installed the client sends no trace context and works", async () => {
  // The built client, copied into a folder whose node_modules has its three
  // runtime dependencies and not @opentelemetry/api, run in a child process
  // against a sidecar of its own.
  const dir = mkdtempSync(join(tmpdir(), "stepwell-ts-no-otel-"));
  const side = await startSidecar({ security: undefined });
  try {
    const pkg = join(dir, "node_modules", "@stepwell", "client");
    mkdirSync(pkg, { recursive: true });
    cpSync(join(PKG_ROOT, "package.json"), join(pkg, "package.json"));
    cpSync(join(PKG_ROOT, "dist", "src"), join(pkg, "dist", "src"), { recursive: true });
    for (const dep of ["@bufbuild/protobuf", "@connectrpc/connect", "@connectrpc/connect-node"]) {
      mkdirSync(join(dir, "node_modules", dep, ".."), { recursive: true });
      symlinkSync(join(PKG_ROOT, "node_modules", dep), join(dir, "node_modules", dep), "dir");
    }
    const script = `
      import assert from "node:assert/strict";
      import { StepwellClient, activeTraceHeaders, traceContextAvailable } from "@stepwell/client";
      assert.equal(traceContextAvailable, false);
      assert.deepEqual(activeTraceHeaders(), {});
      const seen = [];
      const client = new StepwellClient({
        target: ${JSON.stringify(side.target)},
        namespace: ${JSON.stringify(freshNamespace("trace-absent"))},
        interceptors: [(next) => async (req) => { const res = await next(req); seen.push(req.header.get("traceparent")); return res; }],
      });
      assert.ok((await client.checkpoint({ turnId: "turn-1", phase: "started", state: {}, timestamp: new Date() })).inserted);
      assert.deepEqual((await client.restore("turn-1")).map((c) => c.phase), ["started"]);
      client.close();
      assert.deepEqual(seen, [null, null]);
      console.log("ok");
    `;
    writeFileSync(join(dir, "main.mjs"), script);
    const out = spawnSync(process.execPath, [join(dir, "main.mjs")], {
      cwd: dir,
      encoding: "utf8",
      timeout: 60_000,
      env: { ...process.env, NODE_PATH: "" },
    });
    assert.equal(out.status, 0, out.stderr);
    assert.equal(out.stdout.trim(), "ok");
  } finally {
    await side.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});
