// Seeds a sidecar through the TypeScript client of this repository, over
// gRPC, with what the console must show: turns open, terminal and (once the
// threshold passes) stalled, a turn whose clients' clocks are skewed, keys in
// every state, waits pending, timed and settled, a LangGraph-style thread,
// the injection payloads in every field the console renders, and namespace
// beta, which the reader must never see. It returns the fixture: the names
// the tests look for.
import { execFileSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { PutMode, RecordState, StepwellClient } from "../../../clients/typescript/dist/src/index.js";
import { until } from "./sidecar.mjs";
import { IMG, QUOTES, SCRIPT, XSS_TURN, XSS_TURN_2 } from "./payloads.mjs";

/** How many extra turns the paging test walks through. */
export const BULK_TURNS = 60;

const json = (v) => new TextEncoder().encode(JSON.stringify(v));
const now = () => new Date();

/** A turn of checkpoints, each stamped with the client's clock as it is sent. */
async function turn(client, turnId, phases, opts = {}) {
  for (const [i, phase] of phases.entries()) {
    await client.checkpoint({
      turnId,
      phase,
      sessionId: opts.session ?? "",
      state: opts.state ?? { step: i, phase },
      workflowVersion: opts.version ?? "v1",
      terminal: opts.terminal === true && i === phases.length - 1,
      timestamp: now(),
    });
  }
}

/** Turns of alpha: the open, terminal, skewed, live, action and bulk ones. */
async function seedTurns(alpha) {
  await turn(alpha, "open-1", ["plan", "act"], { session: "s-filter" });
  await turn(alpha, "terminal-1", ["plan", "done"], { session: "s-filter", terminal: true });
  await turn(alpha, "live-1", ["start"]);
  await turn(alpha, "delete-me", ["start"]);
  await turn(alpha, "csrf-keep", ["start"]);
  await turn(alpha, "reader-keep", ["start"]);
  // Commit times come from the store's clock; these clients' clocks run 2 h ahead and 3 s behind it.
  await alpha.checkpoint({ turnId: "skew-1", phase: "on-time", state: {}, timestamp: now() });
  await alpha.checkpoint({ turnId: "skew-1", phase: "ahead", state: {}, timestamp: new Date(Date.now() + 2 * 3600_000) });
  await alpha.checkpoint({ turnId: "skew-1", phase: "behind", state: {}, timestamp: new Date(Date.now() - 3000) });
  for (let i = 0; i < BULK_TURNS; i++) {
    await turn(alpha, `bulk-${String(i).padStart(3, "0")}`, ["only"]);
  }
}

/** Turns whose every rendered field is an injection payload. */
async function seedXssTurns(alpha) {
  const state = { [SCRIPT]: IMG, quotes: QUOTES, nested: { [IMG]: [SCRIPT, QUOTES] } };
  for (const turnId of [XSS_TURN, XSS_TURN_2]) {
    // Phases are [A-Za-z0-9._:/-]+ by the API's rules, so they cannot carry markup.
    await turn(alpha, turnId, ["plan", "act"], { session: IMG, version: `${SCRIPT}${QUOTES}`, state });
  }
}

/** A lease held past its end, polled until the store reports it expired. */
async function expiredKey(client, key) {
  await client.begin(key, { leaseMs: 200 });
  await until(async () => (await client.get(key)).state === RecordState.EXPIRED, `${key} to expire`);
}

async function failedKey(client, key, error) {
  const begun = await client.begin(key);
  await client.release(key, begun.leaseToken, { permanent: true, error });
}

async function completedKey(client, key, result) {
  const begun = await client.begin(key);
  await client.complete(key, begun.leaseToken, result);
}

/** Keys of alpha in every state, payload-named ones among them, and the held keys the release actions free. */
async function seedKeys(alpha) {
  await alpha.begin("open-1/charge", { leaseMs: 3600_000 });
  await expiredKey(alpha, "open-1/expired");
  await failedKey(alpha, "terminal-1/failed", "card declined");
  await completedKey(alpha, "terminal-1/done", JSON.stringify({ ok: true }));
  await alpha.begin("act-retry", { leaseMs: 3600_000 });
  await alpha.begin("act-perm", { leaseMs: 3600_000 });
  await alpha.begin("reader-held", { leaseMs: 3600_000 });
  await failedKey(alpha, `${XSS_TURN}/${IMG}`, `${SCRIPT}${IMG}${QUOTES}`);
  await completedKey(alpha, `${XSS_TURN}/${QUOTES}`, SCRIPT);
}

/** Waits of alpha: pending, with a deadline, a timer, settled by the payload-named writer, and the action targets. */
async function seedWaits(alpha, writer) {
  const hour = () => new Date(Date.now() + 3600_000);
  await alpha.createWait("open-1", { name: "approval", metadata: { reason: QUOTES } });
  await alpha.createWait("open-1", { name: "deadline", expireAt: hour() });
  await alpha.createWait("open-1", { name: "timer", resolveAt: hour() });
  await alpha.createWait("terminal-1", { name: "settled" });
  await writer.signal("terminal-1", "settled", SCRIPT, { contentType: "text/plain" });
  await alpha.createWait("act-wait", { name: "to-signal" });
  await alpha.createWait("act-wait", { name: "to-cancel" });
  await alpha.createWait("act-wait", { name: "reader-keep" });
  await alpha.createWait(XSS_TURN, { name: IMG, metadata: { [SCRIPT]: IMG, quotes: QUOTES }, expireAt: hour() });
  await alpha.createWait(XSS_TURN, { name: SCRIPT });
  await writer.signal(XSS_TURN, SCRIPT, IMG, { contentType: "text/plain" });
}

/** A LangGraph-style thread: checkpoint records chained by parent id, one fork, payloads in the metadata. */
async function seedThread(alpha, threadId) {
  await turn(alpha, threadId, ["started"]);
  const chain = [
    ["c1", ""],
    ["c2", "c1"],
    ["c3", "c2"],
    ["c2-fork", "c1"],
  ];
  const records = chain.map(([id, parentId], step) => ({
    turnId: threadId,
    scope: "",
    kind: "checkpoint",
    id,
    parentId,
    payload: json({ v: 4, id, channel_versions: {} }),
    contentType: "json",
    metadata: json({ source: "loop", step, note: `${SCRIPT}${IMG}` }),
    mode: PutMode.UPSERT,
  }));
  await alpha.putRecords({ records });
}

const repo = join(dirname(fileURLToPath(import.meta.url)), "../../..");

/**
 * Runs that live in records, seeded through the real Python integrations
 * (lib/seed_runs.py): a LangGraph thread paused at interrupt() and one
 * finished, an Agents SDK session and an ADK session. The Python is the
 * client's test venv (STEPWELL_TEST_PYTHON, else clients/python/venv makes
 * it, or waits for the lane making it).
 */
function seedRuns(sidecar) {
  const python =
    process.env.STEPWELL_TEST_PYTHON || execFileSync(join(repo, "clients/python/venv"), { encoding: "utf8" }).trim();
  const script = join(repo, "tests/console/lib/seed_runs.py");
  const out = execFileSync(python, [script, sidecar.target, sidecar.tokens.admin, "alpha"], { encoding: "utf8" });
  return JSON.parse(out.trim().split("\n").pop());
}

/** Namespace beta: what the reader may never see. */
async function seedBeta(beta) {
  await turn(beta, "beta-secret-turn", ["plan"]);
  await turn(beta, "beta-done", ["plan", "done"], { terminal: true });
  await beta.begin("beta-secret-key", { leaseMs: 3600_000 });
  await expiredKey(beta, "beta-expired-key");
  await failedKey(beta, "beta-failed-key", "beta error");
  await completedKey(beta, "beta-done-key", "beta result");
  await beta.createWait("beta-secret-turn", { name: "beta-secret-wait" });
  await beta.createWait("beta-secret-turn", { name: "beta-timer", resolveAt: new Date(Date.now() + 3600_000) });
}

/** Seeds everything and returns the fixture the tests read. */
export async function seed(sidecar) {
  const connect = (namespace, token) => new StepwellClient({ target: sidecar.target, namespace, token });
  const alpha = connect("alpha", sidecar.tokens.admin);
  const beta = connect("beta", sidecar.tokens.admin);
  const writer = connect("alpha", sidecar.tokens.writer);
  const seededFrom = new Date();
  let runs;
  try {
    // The stalled turn goes first, so it has waited longest when the tests look for it.
    await turn(alpha, "stalled-1", ["plan"], { session: "s-stalled" });
    await seedTurns(alpha);
    await seedXssTurns(alpha);
    await seedKeys(alpha);
    await seedWaits(alpha, writer);
    await seedThread(alpha, "lg-thread");
    await seedBeta(beta);
    runs = seedRuns(sidecar);
  } finally {
    alpha.close();
    beta.close();
    writer.close();
  }
  return { seededFrom: seededFrom.toISOString(), seededTo: new Date().toISOString(), bulkTurns: BULK_TURNS, runs };
}
