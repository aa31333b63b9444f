// Runs every language-neutral scenario in clients/scenarios/*.json against a
// live sidecar: RPC steps through the generated clients (one call per RPC, no
// retries), adapter steps through one StepwellDurableExecutor per worker
// (timestamps from the worker's clock, stored as given, so loads and
// histories follow those timestamps), and sidecar steps (stop / start /
// restart) against a sidecar of the scenario's own, and worker steps (worker
// processes, a signal through another language's worker, the effects they
// ran) through scenario-procs.ts.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fromJson, toJson, type DescMessage, type JsonValue } from "@bufbuild/protobuf";
import { CheckpointService } from "../src/gen/stepwell/v1/checkpoint_pb.js";
import { IdempotencyService } from "../src/gen/stepwell/v1/idempotency_pb.js";
import { WaitService } from "../src/gen/stepwell/v1/waits_pb.js";
import { StepwellClient, StepwellDurableExecutor, toStepwellError, toTimestamp } from "../src/index.js";
import { SCENARIOS_DIR, freshNamespace, startSidecar, type Sidecar } from "./sidecar.js";
import { ScenarioProcs, isProcStep, type ProcStep } from "./scenario-procs.js";

type Json = JsonValue;
interface Step extends Omit<ProcStep, "expect"> {
  call?: string;
  request?: Record<string, Json>;
  expect?: Json;
  expectError?: { code: string; reason?: string; field?: string };
  save?: Record<string, string>;
  until?: Json;
  retryWhile?: string;
  timeoutMs?: number;
  // adapter steps
  adapter?: "save" | "load" | "history";
  clock?: string;
  step?: string;
  state?: Json;
  // sidecar steps
  sidecar?: "stop" | "start" | "restart";
}
interface Scenario {
  name: string;
  description: string;
  /** The adapter steps' expectations are those of an adapter that stamps saves from its own clock. */
  adapterStamps?: boolean;
  steps: Step[];
}

const b64 = (s: string) => Buffer.from(s, "utf8").toString("base64");
const unb64 = (s: string) => Buffer.from(s, "base64").toString("utf8");

function substitute(v: Json, saved: Record<string, Json>): Json {
  if (typeof v === "string" && v.startsWith("$") && v.slice(1) in saved) return saved[v.slice(1)]!;
  if (Array.isArray(v)) return v.map((x) => substitute(x, saved));
  if (v && typeof v === "object") return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, substitute(x, saved)]));
  return v;
}

function requestJson(call: string, request: Record<string, Json>, ns: string, saved: Record<string, Json>): Json {
  const r = substitute(request, saved) as Record<string, Json>;
  if ("namespace" in request) r.namespace = String(request.namespace).replaceAll("$ns", ns);
  else r.namespace = ns;
  if (call === "Checkpoint" && "state" in r) r.state = b64(JSON.stringify(r.state));
  for (const f of ["result", "fingerprint", "payload"]) if (typeof r[f] === "string") r[f] = b64(r[f] as string);
  return r;
}

function responseJson(call: string, json: Json): Json {
  const r = { ...(json as Record<string, Json>) };
  const fixCheckpoint = (c: Json): Json => {
    const o = { ...(c as Record<string, Json>) };
    if (typeof o.state === "string") o.state = JSON.parse(unb64(o.state)) as Json;
    return o;
  };
  if (r.checkpoint) r.checkpoint = fixCheckpoint(r.checkpoint);
  if (Array.isArray(r.checkpoints)) r.checkpoints = r.checkpoints.map(fixCheckpoint);
  if ((call === "Begin" || call === "Get") && typeof r.result === "string") r.result = unb64(r.result);
  if (call === "Get" && typeof r.fingerprint === "string") r.fingerprint = unb64(r.fingerprint);
  const fixWait = (w: Json): Json => {
    const o = { ...(w as Record<string, Json>) };
    if (typeof o.payload === "string") o.payload = unb64(o.payload);
    return o;
  };
  if (r.wait) r.wait = fixWait(r.wait);
  if (Array.isArray(r.waits)) r.waits = r.waits.map(fixWait);
  return r;
}

const DEFAULTS: Json[] = [false, 0, ""];

/** Subset match; returns a description of the first difference, or "" when it matches. */
function mismatch(expected: Json, actual: Json | undefined, path = "$"): string {
  if (actual === undefined || actual === null) {
    if (DEFAULTS.includes(expected)) return "";
    if (Array.isArray(expected) && expected.length === 0) return "";
    if (expected && typeof expected === "object" && !Array.isArray(expected)) return mismatch(expected, {}, path);
    return `${path}: expected ${JSON.stringify(expected)}, got nothing`;
  }
  if (Array.isArray(expected)) {
    if (!Array.isArray(actual)) return `${path}: expected an array, got ${JSON.stringify(actual)}`;
    if (expected.length !== actual.length) return `${path}: expected ${expected.length} elements, got ${actual.length}: ${JSON.stringify(actual)}`;
    for (let i = 0; i < expected.length; i++) {
      const m = mismatch(expected[i]!, actual[i], `${path}[${i}]`);
      if (m) return m;
    }
    return "";
  }
  if (expected && typeof expected === "object") {
    if (!actual || typeof actual !== "object" || Array.isArray(actual)) return `${path}: expected an object, got ${JSON.stringify(actual)}`;
    for (const [k, v] of Object.entries(expected)) {
      const m = mismatch(v, (actual as Record<string, Json>)[k], `${path}.${k}`);
      if (m) return m;
    }
    return "";
  }
  if (typeof expected === "number" && typeof actual === "string" && String(expected) === actual) return "";
  if (typeof expected === "string" && typeof actual === "number" && expected === String(actual)) return "";
  return expected === actual ? "" : `${path}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(actual)}`;
}

const services = [CheckpointService, IdempotencyService, WaitService] as const;
function findMethod(call: string) {
  for (const s of services) {
    const m = s.methods.find((x) => x.name === call);
    if (m) return { service: s, method: m };
  }
  throw new Error(`unknown call ${call}`);
}

async function invoke(client: StepwellClient, call: string, req: Json): Promise<Json> {
  const { service, method } = findMethod(call);
  const raw = (service === CheckpointService ? client.raw.checkpoints : service === WaitService ? client.raw.waits : client.raw.idempotency) as unknown as Record<
    string,
    (r: unknown, o: { timeoutMs: number }) => Promise<unknown>
  >;
  const msg = fromJson(method.input as DescMessage, req);
  const resp = await raw[method.localName]!(msg, { timeoutMs: 10_000 });
  return responseJson(call, toJson(method.output as DescMessage, resp as never));
}

/** A worker of adapter steps: its own client and executor, and the clock its caller reads. */
interface Worker {
  client: StepwellClient;
  executor: StepwellDurableExecutor;
  clock: string | undefined;
}

/** A checkpoint an adapter step saved: at the instant its caller's timestamp names, as the executor stores it. */
interface Saved {
  ns: bigint;
  step: string;
  state: Json;
}

/**
 * What a scenario's adapter steps share: its workers, every run's saves in
 * the order they were stored, and whether the scenario's expectations are
 * those of an adapter that stamps saves from its own clock (`adapterStamps`).
 */
interface Adapters {
  workers: Map<string, Worker>;
  saves: Map<string, Saved[]>;
  adapterStamps: boolean;
}

function instantNs(iso: string): bigint {
  const t = toTimestamp(iso);
  return t.seconds * 1_000_000_000n + BigInt(t.nanos);
}

/** A run's saves in the order restore() gives them: by timestamp, equal timestamps in the order stored. */
function byTimestamp(saves: readonly Saved[]): Saved[] {
  return [...saves].sort((a, b) => (a.ns < b.ns ? -1 : a.ns > b.ns ? 1 : 0));
}

async function saveStep(step: Step, worker: Worker, saves: Saved[]): Promise<void> {
  // The caller of a DurableExecutor stamps the checkpoint from its clock; the executor stores that timestamp.
  const timestamp = worker.clock ?? new Date().toISOString();
  await worker.executor.checkpoint({ turnId: step.run!, sessionId: "", phase: step.step!, state: step.state ?? null, timestamp });
  const ns = instantNs(timestamp);
  if (!saves.some((s) => s.ns === ns && s.step === step.step)) saves.push({ ns, step: step.step!, state: step.state ?? null });
}

async function loadStep(step: Step, worker: Worker, adapters: Adapters, where: string): Promise<void> {
  const newest = (await worker.executor.restore(step.run!)).at(-1);
  const got: Json = newest ? { step: newest.phase, state: newest.state as Json } : null;
  const last = byTimestamp(adapters.saves.get(step.run!) ?? []).at(-1);
  assert.deepEqual(got, last ? { step: last.step, state: last.state } : null, `${where}: not the save with the latest timestamp`);
  if (adapters.adapterStamps || step.expect === undefined) return;
  if (step.expect === null) assert.equal(got, null, `${where}: expected no checkpoint, got ${JSON.stringify(got)}`);
  else {
    assert.notEqual(got, null, `${where}: expected ${JSON.stringify(step.expect)}, got no checkpoint`);
    const m = mismatch(step.expect, got);
    assert.equal(m, "", `${where}: ${m}`);
  }
}

async function historyStep(step: Step, worker: Worker, adapters: Adapters, where: string): Promise<void> {
  const steps = (await worker.executor.restore(step.run!)).map((c) => c.phase);
  const expected = byTimestamp(adapters.saves.get(step.run!) ?? []).map((s) => s.step);
  assert.deepEqual(steps, expected, `${where}: not in the order of the callers' timestamps`);
  if (adapters.adapterStamps || step.expect === undefined) return;
  const m = mismatch(step.expect, { steps });
  assert.equal(m, "", `${where}: ${m}`);
}

/**
 * An adapter step. The executor stores its caller's timestamps, so every
 * load and history is checked against the saves ordered by those
 * timestamps, and against the scenario's `expect` unless the scenario's
 * expectations are those of an adapter that stamps saves itself.
 */
async function adapterStep(step: Step, adapters: Adapters, where: string): Promise<void> {
  const worker = adapters.workers.get(step.worker ?? "")!;
  if (step.clock !== undefined) worker.clock = step.clock;
  let saves = adapters.saves.get(step.run!);
  if (!saves) adapters.saves.set(step.run!, (saves = []));
  switch (step.adapter) {
    case "save":
      return saveStep(step, worker, saves);
    case "load":
      return loadStep(step, worker, adapters, where);
    case "history":
      return historyStep(step, worker, adapters, where);
    default:
      throw new Error(`${where}: unknown adapter step ${String(step.adapter)}`);
  }
}

async function sidecarStep(step: Step, sidecar: Sidecar, where: string): Promise<void> {
  switch (step.sidecar) {
    case "stop":
      return sidecar.kill();
    case "start":
      return sidecar.start();
    case "restart":
      await sidecar.kill();
      return sidecar.start();
    default:
      throw new Error(`${where}: unknown sidecar step ${String(step.sidecar)}`);
  }
}

/** Calls once; with retryWhile, again every 20 ms (at most timeoutMs) while the call fails with that code. */
async function invokeStep(client: StepwellClient, step: Step, req: Json, where: string): Promise<Json> {
  if (step.retryWhile === undefined) return invoke(client, step.call!, req);
  const deadline = Date.now() + (step.timeoutMs ?? 5000);
  for (;;) {
    try {
      return await invoke(client, step.call!, req);
    } catch (err) {
      const e = toStepwellError(err);
      if (e.code !== step.retryWhile) throw err;
      if (Date.now() > deadline) assert.fail(`${where}: still ${e.code} after ${step.timeoutMs} ms: ${e.message}`);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function runScenario(file: string, scenario: Scenario, sidecar: Sidecar, client: StepwellClient): Promise<void> {
  const ns = freshNamespace(`sc-${scenario.name}`);
  const saved: Record<string, Json> = {};
  ScenarioProcs.checkPeer(scenario.steps, file);
  // One effects file per scenario run, shared by its workers.
  const effectsDir = mkdtempSync(join(tmpdir(), "stepwell-ts-effects-"));
  const procs = new ScenarioProcs(sidecar.target, ns, join(effectsDir, "effects"));
  // Every worker's client and adapter, made once before the first step.
  const workers = new Map<string, Worker>();
  const adapters: Adapters = { workers, saves: new Map(), adapterStamps: scenario.adapterStamps === true };
  for (const step of scenario.steps) {
    if (step.adapter !== undefined && !workers.has(step.worker ?? "")) {
      const workerClient = new StepwellClient({ target: sidecar.target, ...sidecar.connect });
      workers.set(step.worker ?? "", { client: workerClient, executor: new StepwellDurableExecutor({ client: workerClient, namespace: ns }), clock: undefined });
    }
  }
  try {
    for (const [i, step] of scenario.steps.entries()) {
      const where = `${file} step ${i} (${step.call ?? (step.adapter ? `adapter ${step.adapter} by ${step.worker}` : step.sidecar ? `sidecar ${step.sidecar}` : `worker step ${JSON.stringify(step)}`)})`;
      if (isProcStep(step as ProcStep)) {
        await procs.step(step as ProcStep, where);
        continue;
      }
      if (step.sidecar !== undefined) {
        await sidecarStep(step, sidecar, where);
        continue;
      }
      if (step.adapter !== undefined) {
        await adapterStep(step, adapters, where);
        continue;
      }
      const call = step.call!;
      const req = requestJson(call, step.request ?? {}, ns, saved);
      let resp: Json;
      if (step.expectError) {
        try {
          resp = await invokeStep(client, step, req, where);
        } catch (err) {
          const e = toStepwellError(err);
          assert.equal(e.code, step.expectError.code, `${where}: code (${e.message})`);
          if (step.expectError.reason !== undefined) assert.equal(e.reason, step.expectError.reason, `${where}: reason (${e.message})`);
          if (step.expectError.field !== undefined) assert.equal(e.field, step.expectError.field, `${where}: field`);
          continue;
        }
        assert.fail(`${where}: expected ${step.expectError.code}/${step.expectError.reason ?? "any reason"}, got ${JSON.stringify(resp)}`);
      }
      if (step.until !== undefined) {
        const deadline = Date.now() + (step.timeoutMs ?? 5000);
        for (;;) {
          let last: string;
          try {
            resp = await invoke(client, call, req);
            last = mismatch(step.until, resp);
          } catch (err) {
            last = String(err);
          }
          if (!last) break;
          if (Date.now() > deadline) assert.fail(`${where}: until not reached in ${step.timeoutMs} ms: ${last}`);
          await new Promise((r) => setTimeout(r, 20));
        }
      } else {
        resp = await invokeStep(client, step, req, where);
      }
      if (step.expect !== undefined) {
        const m = mismatch(step.expect, resp!);
        assert.equal(m, "", `${where}: ${m}`);
      }
      for (const [name, field] of Object.entries(step.save ?? {})) {
        const v = (resp! as Record<string, Json>)[field];
        saved[name] = v ?? "";
      }
    }
  } finally {
    for (const w of workers.values()) w.client.close();
    await procs.close();
    rmSync(effectsDir, { recursive: true, force: true });
  }
}

const scenarioFiles = readdirSync(SCENARIOS_DIR).filter((f) => f.endsWith(".json")).sort();

describe("scenarios", () => {
  let sidecar: Sidecar;
  let client: StepwellClient;
  before(async () => {
    sidecar = await startSidecar();
    client = new StepwellClient({ target: sidecar.target, ...sidecar.connect });
  });
  after(async () => {
    client?.close();
    await sidecar?.stop();
  });

  it("finds the scenario files", () => {
    assert.ok(scenarioFiles.length > 0, `no scenarios in ${SCENARIOS_DIR}`);
  });

  for (const file of scenarioFiles) {
    const scenario = JSON.parse(readFileSync(join(SCENARIOS_DIR, file), "utf8")) as Scenario;
    const ownSidecar = scenario.steps.some((s) => s.sidecar !== undefined);
    // Worker processes, this language's and a peer's, are given a target and nothing else: their sidecar is plaintext, without auth.
    const workers = scenario.steps.some((s) => isProcStep(s as ProcStep));
    it(`${scenario.name}: ${scenario.description}`, async () => {
      if (!ownSidecar && !workers) return runScenario(file, scenario, sidecar, client);
      // Sidecar or worker steps: a sidecar of the scenario's own (fresh SQLite file, free port), and a client made once.
      const own = await startSidecar(workers ? { security: undefined } : {});
      const ownClient = new StepwellClient({ target: own.target, ...own.connect });
      try {
        await runScenario(file, scenario, own, ownClient);
      } finally {
        ownClient.close();
        await own.stop();
      }
    });
  }
});
