// The Node half of the LangGraph.js savers' benchmark: a long-lived process
// that bench/langgraphjs/bench.py starts once per run and drives through JSON
// lines on stdin, one request per line, answering with JSON lines on stdout.
// It runs the load and measures it (the savers, LangGraph.js and the
// serialization all live in this process, as in an application), while the
// Python side keeps the sidecars, the databases and the CPU meter, which it
// reads at the "go" and "end" events this program prints around a window.
// One process for the whole run keeps Node's start-up and LangGraph.js's
// module loading out of every point, so that the smoke run stays short.
import { createInterface } from "node:readline";
import { performance } from "node:perf_hooks";
import { isDeepStrictEqual } from "node:util";
import { setImmediate as yieldToLoop } from "node:timers/promises";
import pg from "pg";
import { MemorySaver, emptyCheckpoint, uuid6 } from "@langchain/langgraph-checkpoint";
import { PostgresSaver } from "@langchain/langgraph-checkpoint-postgres";
import { Annotation, END, START, StateGraph } from "@langchain/langgraph";
import { StepwellSaver } from "@stepwell/client/langgraph";

const CHANNELS = ["messages", "context", "plan", "scratch"];
const VALUE_BYTES = 1000;
const GRAPH_NODES = 10;
// The Postgres saver's pool: one connection per thread up to 64, as the
// Python benchmark gives its saver, so that the pool is not what queues a put.
const POOL_MAX = 64;
const STRETCH_S = 60;

function emit(obj) {
  // Writes to a pipe are synchronous on Linux, so the event leaves when it is made.
  process.stdout.write(JSON.stringify(obj) + "\n");
}

// A fixed pseudo-random text, so that every run writes the same bytes.
const FILLER = (() => {
  let seed = 7;
  const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ ";
  let out = "";
  for (let i = 0; i < 8192; i++) {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    out += letters[seed % letters.length];
  }
  return out;
})();

/** A ~1 KB channel value: a list of messages, as an agent's state holds. */
function channelValue(step, channel) {
  const start = (((step * 131 + channel.length * 17) % (FILLER.length - VALUE_BYTES)) + FILLER.length) % FILLER.length;
  const text = FILLER.slice(start, start + VALUE_BYTES);
  const messages = [0, 1, 2, 3].map((i) => ({ role: i % 2 ? "ai" : "human", content: text.slice(i * 250, (i + 1) * 250) }));
  return { channel, step, messages };
}

/** The checkpoints of one thread in the order a graph writes them: step -1
 * (the input) sets every channel, each later step one or two. */
class Chain {
  constructor(saver, threadId) {
    this.saver = saver;
    this.config = { configurable: { thread_id: threadId, checkpoint_ns: "" } };
    this.checkpoint = emptyCheckpoint();
    this.step = -1;
    this.ids = [];
  }

  next() {
    const step = this.step;
    let changed = CHANNELS;
    if (step >= 0) {
      changed = [CHANNELS[step % CHANNELS.length]];
      if (step % 2) changed.push(CHANNELS[(step + 1) % CHANNELS.length]);
    }
    const prev = this.checkpoint;
    const values = { ...prev.channel_values };
    const versions = { ...prev.channel_versions };
    const newVersions = {};
    for (const ch of changed) {
      versions[ch] = newVersions[ch] = this.saver.getNextVersion(versions[ch]);
      values[ch] = channelValue(step, ch);
    }
    const seen = { ...prev.versions_seen, [step < 0 ? "__input__" : `node_${step % GRAPH_NODES}`]: Object.fromEntries(changed.map((ch) => [ch, versions[ch]])) };
    const checkpoint = {
      v: 4, id: uuid6(step), ts: new Date().toISOString(),
      channel_values: values, channel_versions: versions, versions_seen: seen,
    };
    const metadata = { source: step < 0 ? "input" : "loop", step, parents: {} };
    return [checkpoint, metadata, newVersions];
  }

  advance(checkpoint, config) {
    this.checkpoint = checkpoint;
    this.config = config;
    this.step += 1;
    this.ids.push(checkpoint.id);
  }
}

/** A closed-loop measurement: operations that complete inside the window
 * count. A window in which nothing has completed (an operation slower than
 * the window, on a starved machine) stretches until the first completion, up
 * to STRETCH_S past its start: a point is then slow, not empty. */
class Window {
  constructor(warm, window) {
    this.start = performance.now() + 1000 * warm;
    this.end = this.start + 1000 * window;
    this.latencies = [];
    this.errors = [];
    this.harnessMs = 0;
    this.ended = false;
  }

  record(t0, t1) {
    if (!this.latencies.length && this.end < t1 && t1 <= this.start + 1000 * STRETCH_S) this.end = t1;
    if (this.start <= t1 && t1 <= this.end) this.latencies.push(t1 - t0);
    this.announceEnd(t1);
  }

  stretching(now) {
    return !this.latencies.length && now < this.start + 1000 * STRETCH_S;
  }

  running() {
    const now = performance.now();
    this.announceEnd(now);
    return (now < this.end || this.stretching(now)) && this.errors.length < 5;
  }

  /** Prints "end" once the window is over, from whichever operation sees it
   * first (a timer could wait behind a loop that never yields). */
  announceEnd(now) {
    if (this.ended || now < this.end || (this.stretching(now) && this.errors.length < 5)) return;
    this.ended = true;
    emit({ event: "end" });
  }
}

function percentile(sorted, q) {
  return sorted.length ? sorted[Math.max(0, Math.ceil(q * sorted.length) - 1)] : null;
}

/** Runs the workers through warm-up and window and answers the window's
 * figures. "go" tells the Python side when the window starts. */
async function measure(w, workers, opsPerLatency = 1) {
  emit({ event: "go", start_in_s: Math.max(0, (w.start - performance.now()) / 1000) });
  await Promise.all(workers.map((run) => run()));
  if (!w.ended) {
    w.ended = true;
    emit({ event: "end" });
  }
  const lat = [...w.latencies].sort((a, b) => a - b);
  const n = lat.length;
  const windowS = (w.end - w.start) / 1000;
  if (!n && !w.errors.length) w.errors.push("nothing completed inside the window");
  const counts = new Map();
  for (const e of w.errors) counts.set(e.slice(0, 500), (counts.get(e.slice(0, 500)) ?? 0) + 1);
  return {
    completed: n,
    ops: n * opsPerLatency,
    ops_per_s: (n * opsPerLatency) / windowS,
    window_s: windowS,
    p50_ms: percentile(lat, 0.5),
    p99_ms: percentile(lat, 0.99),
    max_ms: n ? lat[n - 1] : null,
    // Only the put points make their checkpoints here; a graph makes its own.
    harness_us_per_op: n && w.harnessMs ? (1000 * w.harnessMs) / (n * opsPerLatency) : null,
    errors: [...counts].map(([e, c]) => (c > 1 ? `${e} (x${c})` : e)),
  };
}

function describe(e) {
  return `${e?.constructor?.name ?? "Error"}: ${e?.message ?? e}`;
}

/** `put` at `threads` concurrent threads through one shared saver. */
async function putPoint(saver, req) {
  const w = new Window(req.warm_s, req.window_s);
  const chains = Array.from({ length: req.threads }, (_, i) => new Chain(saver, `${req.prefix}-t${i}`));
  // MemorySaver's put never waits for I/O: without a turn of the loop between
  // puts, one thread would run alone and nothing else would be served.
  const yieldEach = saver instanceof MemorySaver;
  const worker = (chain) => async () => {
    while (w.running()) {
      const h0 = performance.now();
      const [checkpoint, metadata, newVersions] = chain.next();
      const t0 = performance.now();
      if (w.start <= h0 && t0 <= w.end) w.harnessMs += t0 - h0;
      let config;
      try {
        config = await saver.put(chain.config, checkpoint, metadata, newVersions);
      } catch (e) {
        w.errors.push(`put: ${describe(e)}`);
        return;
      }
      w.record(t0, performance.now());
      chain.advance(checkpoint, config);
      if (yieldEach) await yieldToLoop();
    }
  };
  const result = await measure(w, chains.map(worker));
  result.puts_total = chains.reduce((sum, c) => sum + c.ids.length, 0);
  result.checks = await checkChains(saver, chains);
  return result;
}

/** Every thread's newest checkpoint reads back through getTuple as it was
 * put, and the first thread's newest five list newest first. */
async function checkChains(saver, chains) {
  const problems = [];
  try {
    for (const chain of chains) {
      if (!chain.ids.length) {
        problems.push(`thread ${chain.config.configurable.thread_id}: no checkpoint was put`);
        continue;
      }
      const config = { configurable: { thread_id: chain.config.configurable.thread_id, checkpoint_ns: "" } };
      const got = await saver.getTuple(config);
      const last = chain.ids[chain.ids.length - 1];
      if (!got) problems.push(`${config.configurable.thread_id}: getTuple found no checkpoint`);
      else if (got.checkpoint.id !== last) problems.push(`${config.configurable.thread_id}: getTuple answered ${got.checkpoint.id}, the newest put was ${last}`);
      else if (!isDeepStrictEqual(got.checkpoint.channel_values, chain.checkpoint.channel_values)) problems.push(`${config.configurable.thread_id}: getTuple's channel values differ from those put`);
      else if (got.metadata?.step !== chain.step - 1) problems.push(`${config.configurable.thread_id}: getTuple's metadata step is ${got.metadata?.step}, put ${chain.step - 1}`);
    }
    const first = chains[0];
    const listed = [];
    for await (const t of saver.list({ configurable: { thread_id: first.config.configurable.thread_id, checkpoint_ns: "" } }, { limit: 5 })) listed.push(t.checkpoint.id);
    const want = [...first.ids].reverse().slice(0, 5);
    if (JSON.stringify(listed) !== JSON.stringify(want)) problems.push(`list(limit 5) answered ${listed}, the newest puts were ${want}`);
  } catch (e) {
    problems.push(`reading back: ${describe(e)}`);
  }
  return problems.slice(0, 5);
}

const GraphState = Annotation.Root({
  items: Annotation({ reducer: (a, b) => a.concat(b), default: () => [] }),
});

/** A linear graph of GRAPH_NODES trivial nodes, each appending its name. */
function buildGraph(saver) {
  let builder = new StateGraph(GraphState);
  const names = Array.from({ length: GRAPH_NODES }, (_, i) => `n${i}`);
  for (const name of names) builder = builder.addNode(name, async () => ({ items: [name] }));
  builder = builder.addEdge(START, names[0]);
  for (let i = 1; i < names.length; i++) builder = builder.addEdge(names[i - 1], names[i]);
  return builder.addEdge(names[names.length - 1], END).compile({ checkpointer: saver });
}

/** The graph invoked by `threads` concurrent loops, each invocation on a new
 * thread; throughput counts nodes executed. */
async function graphPoint(saver, req) {
  const graph = buildGraph(saver);
  const w = new Window(req.warm_s, req.window_s);
  const want = JSON.stringify(Array.from({ length: GRAPH_NODES }, (_, i) => `n${i}`));
  let lastThread = null;
  const worker = (k) => async () => {
    for (let n = 0; w.running(); n++) {
      const threadId = `${req.prefix}-g${k}-${n}`;
      const t0 = performance.now();
      let out;
      try {
        out = await graph.invoke({ items: [] }, { configurable: { thread_id: threadId } });
      } catch (e) {
        w.errors.push(`invoke: ${describe(e)}`);
        return;
      }
      w.record(t0, performance.now());
      if (JSON.stringify(out.items) !== want) {
        w.errors.push(`invoke answered items=${JSON.stringify(out.items)}`);
        return;
      }
      lastThread = threadId;
    }
  };
  const result = await measure(w, Array.from({ length: req.threads }, (_, k) => worker(k)), GRAPH_NODES);
  result.checks = [];
  if (lastThread === null) {
    result.checks.push("no invocation completed");
    return result;
  }
  try {
    const snap = await graph.getState({ configurable: { thread_id: lastThread } });
    if (JSON.stringify(snap.values.items) !== want) result.checks.push(`getState answered items=${JSON.stringify(snap.values.items)}`);
    if (snap.metadata?.step !== GRAPH_NODES) result.checks.push(`getState's step is ${snap.metadata?.step}, want ${GRAPH_NODES}`);
  } catch (e) {
    result.checks.push(`getState: ${describe(e)}`);
  }
  return result;
}

// The Postgres saver of each database, made (and set up) once, on first use.
const postgresSavers = new Map();

async function postgresSaver(url) {
  if (!postgresSavers.has(url)) {
    const pool = new pg.Pool({ connectionString: url, max: POOL_MAX });
    // A connection the server ends while idle must not end this process.
    pool.on("error", () => {});
    const saver = new PostgresSaver(pool);
    await saver.setup();
    postgresSavers.set(url, saver);
  }
  return postgresSavers.get(url);
}

/** Runs one point on one saver: the Postgres saver of the round's database,
 * a new StepwellSaver on the given sidecar (closed after), or MemorySaver. */
async function point(req) {
  let saver;
  let close = async () => {};
  if (req.system === "postgres-saver") saver = await postgresSaver(req.postgres_url);
  else if (req.system === "memory") saver = new MemorySaver();
  else {
    saver = StepwellSaver.fromAddress(req.address, { namespace: req.namespace });
    close = () => saver.close();
  }
  try {
    const result = req.kind === "put" ? await putPoint(saver, req) : await graphPoint(saver, req);
    if (req.system === "postgres-saver") result.pool = { total: saver.pool.totalCount, idle: saver.pool.idleCount, waiting: saver.pool.waitingCount };
    return result;
  } finally {
    await close();
  }
}

/** Database chores on the server's base URL: create or drop a database, and
 * the server's data directory (whose postmaster.pid names the process the
 * meter reads). */
async function admin(req) {
  if (req.op === "release") {
    const saver = postgresSavers.get(req.url);
    postgresSavers.delete(req.url);
    if (saver) await saver.pool.end();
    return {};
  }
  const client = new pg.Client({ connectionString: req.url });
  client.on("error", () => {});
  await client.connect();
  try {
    if (req.op === "data-directory") return { dir: (await client.query("SHOW data_directory")).rows[0].data_directory };
    await client.query(`DROP DATABASE IF EXISTS "${req.name}" WITH (FORCE)`);
    if (req.op === "create-db") await client.query(`CREATE DATABASE "${req.name}"`);
    return {};
  } finally {
    await client.end();
  }
}

async function serve() {
  const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
  emit({ event: "ready", versions: process.versions.node });
  for await (const line of lines) {
    if (!line.trim()) continue;
    const req = JSON.parse(line);
    if (req.op === "exit") break;
    try {
      const result = req.op === "point" ? await point(req) : await admin(req);
      emit({ event: "result", ...result });
    } catch (e) {
      // A failed point is reported as a result; Python counts it as an error.
      emit({ event: "result", errors: [describe(e)], checks: [] });
    }
  }
  for (const saver of postgresSavers.values()) await saver.pool.end();
}

await serve();
