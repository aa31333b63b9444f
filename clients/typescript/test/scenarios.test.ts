// Runs every language-neutral scenario in clients/scenarios/*.json against a
// live sidecar, through the generated clients (one call per RPC, no retries).
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fromJson, toJson, type DescMessage, type JsonValue } from "@bufbuild/protobuf";
import { CheckpointService } from "../src/gen/stepwell/v1/checkpoint_pb.js";
import { IdempotencyService } from "../src/gen/stepwell/v1/idempotency_pb.js";
import { StepwellClient, toStepwellError } from "../src/index.js";
import { SCENARIOS_DIR, freshNamespace, startSidecar, type Sidecar } from "./sidecar.js";

type Json = JsonValue;
interface Step {
  call: string;
  request: Record<string, Json>;
  expect?: Json;
  expectError?: { code: string; reason: string; field?: string };
  save?: Record<string, string>;
  until?: Json;
  timeoutMs?: number;
}
interface Scenario {
  name: string;
  description: string;
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
  for (const f of ["result", "fingerprint"]) if (typeof r[f] === "string") r[f] = b64(r[f] as string);
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

const services = [CheckpointService, IdempotencyService] as const;
function findMethod(call: string) {
  for (const s of services) {
    const m = s.methods.find((x) => x.name === call);
    if (m) return { service: s, method: m };
  }
  throw new Error(`unknown call ${call}`);
}

async function invoke(client: StepwellClient, call: string, req: Json): Promise<Json> {
  const { service, method } = findMethod(call);
  const raw = (service === CheckpointService ? client.raw.checkpoints : client.raw.idempotency) as unknown as Record<
    string,
    (r: unknown, o: { timeoutMs: number }) => Promise<unknown>
  >;
  const msg = fromJson(method.input as DescMessage, req);
  const resp = await raw[method.localName]!(msg, { timeoutMs: 10_000 });
  return responseJson(call, toJson(method.output as DescMessage, resp as never));
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
    it(`${scenario.name}: ${scenario.description}`, async () => {
      const ns = freshNamespace(`sc-${scenario.name}`);
      const saved: Record<string, Json> = {};
      for (const [i, step] of scenario.steps.entries()) {
        const where = `${file} step ${i} (${step.call})`;
        const req = requestJson(step.call, step.request, ns, saved);
        let resp: Json;
        if (step.expectError) {
          try {
            resp = await invoke(client, step.call, req);
          } catch (err) {
            const e = toStepwellError(err);
            assert.equal(e.code, step.expectError.code, `${where}: code (${e.message})`);
            assert.equal(e.reason, step.expectError.reason, `${where}: reason (${e.message})`);
            if (step.expectError.field !== undefined) assert.equal(e.field, step.expectError.field, `${where}: field`);
            continue;
          }
          assert.fail(`${where}: expected ${step.expectError.code}/${step.expectError.reason}, got ${JSON.stringify(resp)}`);
        }
        if (step.until !== undefined) {
          const deadline = Date.now() + (step.timeoutMs ?? 5000);
          for (;;) {
            let last: string;
            try {
              resp = await invoke(client, step.call, req);
              last = mismatch(step.until, resp);
            } catch (err) {
              last = String(err);
            }
            if (!last) break;
            if (Date.now() > deadline) assert.fail(`${where}: until not reached in ${step.timeoutMs} ms: ${last}`);
            await new Promise((r) => setTimeout(r, 20));
          }
        } else {
          resp = await invoke(client, step.call, req);
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
    });
  }
});
