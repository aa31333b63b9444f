// Real LangGraph.js graphs on StepwellSaver, on SQLite and on Postgres, each
// test in a fresh namespace: a graph with a subgraph stops at interrupt(),
// its state (the subgraph's under its own checkpoint_ns) is read back by a
// second saver with a client of its own, as a new process would, which
// resumes it with Command({ resume }); and the thread's history is listed
// newest first with its parent links, replayed from a past checkpoint and
// forked there with updateState, the original branch left as it was.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Annotation, Command, END, START, StateGraph, interrupt, type StateSnapshot } from "@langchain/langgraph";
import type { RunnableConfig } from "@langchain/core/runnables";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { StepwellSaver } from "../../src/langgraph/index.js";
import { freshNamespace, type Sidecar } from "../sidecar.js";
import { BACKENDS, startBackend } from "./backends.js";
import { chainGraph, logLines, storeSnapshot } from "./graphs.js";

const ReviewState = Annotation.Root({
  order: Annotation<string>(),
  answer: Annotation<string>(),
  // The subgraph's own channel: only its checkpoints hold it.
  steps: Annotation<string[]>({ reducer: (a, b) => a.concat(b), default: () => [] }),
});

const OrderState = Annotation.Root({
  order: Annotation<string>(),
  answer: Annotation<string>(),
  status: Annotation<string>(),
  log: Annotation<string[]>({ reducer: (a, b) => a.concat(b), default: () => [] }),
});

/**
 * prepare → review (a compiled subgraph: intake → ask, which calls
 * interrupt(), → note) → finish. Every node call is added to `calls` as
 * "node@who", so a test sees which saver's graph ran what.
 */
function orderGraph(checkpointer: StepwellSaver, who: string, calls: string[]) {
  const call = (name: string) => calls.push(`${name}@${who}`);
  const review = new StateGraph(ReviewState)
    .addNode("intake", () => (call("intake"), { steps: ["intake"] }))
    .addNode("ask", (s) => {
      call("ask");
      const answer = interrupt({ question: `ship ${s.order}?` }) as string;
      return { answer, steps: [`ask:${answer}`] };
    })
    .addNode("note", () => (call("note"), { steps: ["note"] }))
    .addEdge(START, "intake")
    .addEdge("intake", "ask")
    .addEdge("ask", "note")
    .addEdge("note", END)
    .compile();
  return new StateGraph(OrderState)
    .addNode("prepare", () => (call("prepare"), { log: ["prepare"] }))
    .addNode("review", review)
    .addNode("finish", (s) => (call("finish"), { status: s.answer === "yes" ? "approved" : "rejected", log: ["finish"] }))
    .addEdge(START, "prepare")
    .addEdge("prepare", "review")
    .addEdge("review", "finish")
    .addEdge("finish", END)
    .compile({ checkpointer });
}

async function all<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const x of it) out.push(x);
  return out;
}

const idOf = (c?: RunnableConfig) => c?.configurable?.checkpoint_id as string | undefined;

/** What a snapshot says about its checkpoint, for comparing one read with another. */
const summary = (s: StateSnapshot) => ({ id: idOf(s.config), parent: idOf(s.parentConfig), values: s.values, next: s.next, metadata: s.metadata });

for (const backend of BACKENDS) {
  describe(`real graphs on StepwellSaver (${backend})`, () => {
    let sidecar: Sidecar;
    let dir: string;
    beforeAll(async () => {
      sidecar = await startBackend(backend);
      dir = mkdtempSync(join(tmpdir(), "lgjs-graph-"));
    });
    afterAll(async () => {
      await sidecar?.stop();
      if (dir) rmSync(dir, { recursive: true, force: true });
    });

    it("a subgraph stops at interrupt(), a second saver reads its state and resumes it with Command({ resume })", async () => {
      const namespace = freshNamespace(`lgjs-e2e-sub-${backend}`);
      const first = StepwellSaver.fromAddress(sidecar.target, { namespace });
      const second = StepwellSaver.fromAddress(sidecar.target, { namespace });
      const calls: string[] = [];
      const config = { configurable: { thread_id: "order-1" } };
      try {
        const graphA = orderGraph(first, "A", calls);
        const paused = (await graphA.invoke({ order: "A-17" }, config)) as unknown as { __interrupt__: { value: unknown }[] };
        expect(paused.__interrupt__.map((i) => i.value)).toEqual([{ question: "ship A-17?" }]);
        expect(calls).toEqual(["prepare@A", "intake@A", "ask@A"]);

        const stateA = await graphA.getState(config, { subgraphs: true });
        const subNs = await checkPaused(stateA, first);

        // A second saver, on a client of its own, sees the same state, and resumes it.
        const graphB = orderGraph(second, "B", calls);
        const stateB = await graphB.getState(config, { subgraphs: true });
        expect(summary(stateB)).toEqual(summary(stateA));
        expect(summary(stateB.tasks[0].state as StateSnapshot)).toEqual(summary(stateA.tasks[0].state as StateSnapshot));
        expect(stateB.tasks[0].interrupts).toEqual(stateA.tasks[0].interrupts);

        const done = await graphB.invoke(new Command({ resume: "yes" }), config);
        expect(done).toEqual({ order: "A-17", answer: "yes", status: "approved", log: ["prepare", "finish"] });
        // The resumed node ran again with the answer; the nodes before it did not.
        expect(calls).toEqual(["prepare@A", "intake@A", "ask@A", "ask@B", "note@B", "finish@B"]);

        const final = await graphA.getState(config);
        expect(final.values).toEqual(done);
        expect(final.next).toEqual([]);
        const subLatest = await first.getTuple({ configurable: { thread_id: "order-1", checkpoint_ns: subNs } });
        expect(subLatest?.checkpoint.channel_values.steps).toEqual(["intake", "ask:yes", "note"]);
      } finally {
        await first.close();
        await second.close();
      }
    });

    it("lists history newest first, replays from a past checkpoint and forks there, leaving the original branch as it was", async () => {
      const namespace = freshNamespace(`lgjs-e2e-history-${backend}`);
      const saver = StepwellSaver.fromAddress(sidecar.target, { namespace });
      const logFile = join(dir, `history-${backend}.log`);
      const config = { configurable: { thread_id: "h" } };
      try {
        const graph = chainGraph({ who: "main", logFile }, saver);
        const out = await graph.invoke({ topic: "t" }, config);
        expect(out.visited).toEqual(["n1@main", "n2@main", "blocker@main", "n4@main"]);
        const original = await all(graph.getStateHistory(config));
        checkChain(original);
        const before = await storeSnapshot(saver.client, namespace, "h");
        const past = original.find((s) => s.metadata?.step === 2)!;
        expect(past.next).toEqual(["blocker"]);

        const replayed = await replay(graph, past, logFile);
        const forked = await fork(graph, past);

        // The original branch: every checkpoint, write and blob as it was.
        const after = await all(graph.getStateHistory(config));
        const byId = new Map(after.map((s) => [idOf(s.config), summary(s)]));
        for (const s of original) expect(byId.get(idOf(s.config))).toEqual(summary(s));
        expect(await storeSnapshot(saver.client, namespace, "h")).toEqual(expect.arrayContaining(before));
        // Three branches from one root: the original, the replay and the fork, each an unbroken chain.
        expect(new Set([...replayed, ...forked]).size).toBe(replayed.length + forked.length);
        expect(after).toHaveLength(original.length + replayed.length + forked.length);
        expect(idOf(after[0].config)).toBe(forked[0]);
      } finally {
        await saver.close();
      }
    });
  });
}

/**
 * Checks the state of the order graph paused at interrupt(): the interrupt
 * on the review task, the subgraph's state under its own checkpoint_ns, and
 * the subgraph's checkpoints listed under that namespace and not the root's.
 * Returns the subgraph's checkpoint_ns.
 */
async function checkPaused(state: StateSnapshot, saver: StepwellSaver): Promise<string> {
  expect(state.next).toEqual(["review"]);
  expect(state.values).toEqual({ order: "A-17", log: ["prepare"] });
  expect(state.tasks).toHaveLength(1);
  expect(state.tasks[0].name).toBe("review");
  expect(state.tasks[0].interrupts.map((i) => i.value)).toEqual([{ question: "ship A-17?" }]);
  const sub = state.tasks[0].state as StateSnapshot;
  const subNs = sub.config.configurable!.checkpoint_ns as string;
  expect(subNs).toMatch(/^review:/);
  expect(sub.values).toEqual({ order: "A-17", steps: ["intake"] });
  expect(sub.next).toEqual(["ask"]);
  expect(sub.tasks[0].interrupts.map((i) => i.value)).toEqual([{ question: "ship A-17?" }]);

  const subList = await all(saver.list({ configurable: { thread_id: "order-1", checkpoint_ns: subNs } }));
  expect(subList.length).toBeGreaterThan(0);
  expect(subList[0].checkpoint.id).toBe(idOf(sub.config));
  for (const t of subList) expect(t.config.configurable?.checkpoint_ns).toBe(subNs);
  const rootList = await all(saver.list({ configurable: { thread_id: "order-1", checkpoint_ns: "" } }));
  expect(rootList[0].checkpoint.id).toBe(idOf(state.config));
  for (const t of rootList) expect(t.config.configurable?.checkpoint_ns).toBe("");
  return subNs;
}

/** One run's history, newest first: steps -1..4 in order, each linked to the next, the first an input and the rest loop steps. */
function checkChain(history: StateSnapshot[]): void {
  expect(history.map((s) => s.metadata?.step)).toEqual([4, 3, 2, 1, 0, -1]);
  expect(history.map((s) => s.metadata?.source)).toEqual(["loop", "loop", "loop", "loop", "loop", "input"]);
  expect(history.map((s) => s.next)).toEqual([[], ["n4"], ["blocker"], ["n2"], ["n1"], ["__start__"]]);
  for (let i = 0; i + 1 < history.length; i++) expect(idOf(history[i].parentConfig)).toBe(idOf(history[i + 1].config));
  expect(history.at(-1)!.parentConfig).toBeUndefined();
}

type Chain = ReturnType<typeof chainGraph>;

/** Walks a checkpoint's ancestors up to (not including) `stop`, newest first. */
async function ancestors(graph: Chain, from: RunnableConfig, stop: string): Promise<string[]> {
  const ids: string[] = [];
  let snap = await graph.getState(from);
  while (idOf(snap.config) !== stop) {
    ids.push(idOf(snap.config)!);
    expect(snap.parentConfig, `${idOf(snap.config)} has no parent before ${stop}`).toBeDefined();
    snap = await graph.getState(snap.parentConfig!);
  }
  return ids;
}

/** Replays the chain graph from a past checkpoint; returns the new branch's checkpoint ids, newest first. */
async function replay(graph: Chain, past: StateSnapshot, logFile: string): Promise<string[]> {
  const logged = logLines(logFile).length;
  const pastConfig = { configurable: { thread_id: "h", checkpoint_id: idOf(past.config) } };
  const out = await graph.invoke(null, pastConfig);
  expect(out.visited).toEqual(["n1@main", "n2@main", "blocker@main", "n4@main"]);
  // Only the nodes after the past checkpoint ran again.
  expect(logLines(logFile).slice(logged)).toEqual(["main:blocker", "main:n4"]);
  const head = await graph.getState({ configurable: { thread_id: "h" } });
  expect(head.values.visited).toEqual(out.visited);
  const branch = await ancestors(graph, head.config, idOf(past.config)!);
  expect(branch.length).toBeGreaterThan(0);
  return branch;
}

/** Forks the chain graph at a past checkpoint with updateState and runs the fork; returns its checkpoint ids, newest first. */
async function fork(graph: Chain, past: StateSnapshot): Promise<string[]> {
  const forkConfig = await graph.updateState(past.config, { visited: ["edited"] }, "n2");
  const forkState = await graph.getState(forkConfig);
  expect(idOf(forkState.parentConfig)).toBe(idOf(past.config));
  expect(forkState.metadata?.source).toBe("update");
  expect(forkState.values.visited).toEqual(["n1@main", "n2@main", "edited"]);
  expect(forkState.next).toEqual(["blocker"]);
  const out = await graph.invoke(null, forkConfig);
  expect(out.visited).toEqual(["n1@main", "n2@main", "edited", "blocker@main", "n4@main"]);
  const head = await graph.getState({ configurable: { thread_id: "h" } });
  expect(head.values.visited).toEqual(out.visited);
  const branch = await ancestors(graph, head.config, idOf(past.config)!);
  expect(branch.at(-1)).toBe(idOf(forkConfig));
  return branch;
}
