// The real LangGraph.js graphs of the end-to-end specs (graph.spec.ts,
// crash.spec.ts, fencing.spec.ts) and of their worker program
// (graph-worker.ts), with what the specs share: a bounded poll, and a
// snapshot of everything the store holds of a thread, so a spec can tell that
// a worker stored nothing. A graph is built here once, so a worker process and
// the test process run the very same nodes.
import { appendFileSync, existsSync } from "node:fs";
import { createHash } from "node:crypto";
import { Annotation, END, START, StateGraph } from "@langchain/langgraph";
import type { BaseCheckpointSaver } from "@langchain/langgraph-checkpoint";
import type { StepwellClient } from "../../src/index.js";
import { logLines, waitFor } from "../processes.js";

export { logLines, waitFor };

/** The nodes of the chain graph, in the order they run. */
export const CHAIN = ["n1", "n2", "blocker", "n4"] as const;

const ChainState = Annotation.Root({
  topic: Annotation<string>(),
  // Each node adds "node@worker", so the final state says who ran what.
  visited: Annotation<string[]>({ reducer: (a, b) => a.concat(b), default: () => [] }),
});

export interface ChainOptions {
  /** Names the worker in the side-effect log and in the state. */
  who: string;
  /** The side-effect log, outside the store: each node appends "who:node" before it returns. */
  logFile: string;
  /** The blocker node waits until this file exists; without it, it does not wait. */
  gateFile?: string;
  /** Called when the blocker node starts, before it waits. */
  onBlocked?: () => void;
}

/** What graph-worker.js is told to do, as JSON in its one argument. */
export interface WorkerArgs {
  target: string;
  namespace: string;
  threadId: string;
  who: string;
  logFile: string;
  gateFile?: string;
  /** The graph's input; none resumes the thread from its latest checkpoint. */
  input?: { topic: string };
  fenced?: boolean;
  leaseMs?: number;
  /** Run inside saver.threadLease(threadId, ...), which extends the lease while the run lasts. */
  holdLease?: boolean;
}

/** n1 → n2 → blocker → n4; blocker waits for the gate file, so a test can hold a run inside a node. */
export function chainGraph(opts: ChainOptions, checkpointer: BaseCheckpointSaver) {
  const node = (name: string) => async () => {
    if (name === "blocker") {
      opts.onBlocked?.();
      if (opts.gateFile) await waitFor(() => existsSync(opts.gateFile!), `the gate file ${opts.gateFile}`, 600_000);
    }
    appendFileSync(opts.logFile, `${opts.who}:${name}\n`);
    return { visited: [`${name}@${opts.who}`] };
  };
  return new StateGraph(ChainState)
    .addNode("n1", node("n1"))
    .addNode("n2", node("n2"))
    .addNode("blocker", node("blocker"))
    .addNode("n4", node("n4"))
    .addEdge(START, "n1")
    .addEdge("n1", "n2")
    .addEdge("n2", "blocker")
    .addEdge("blocker", "n4")
    .addEdge("n4", END)
    .compile({ checkpointer });
}


/**
 * Every record of a thread in the store (checkpoints, pending writes and
 * blobs, in every checkpoint namespace), each as one line with digests of
 * its payload and metadata, sorted: two snapshots are equal when nothing of
 * the thread was added, removed or changed in between.
 */
export async function storeSnapshot(client: StepwellClient, namespace: string, threadId: string): Promise<string[]> {
  const lines: string[] = [];
  const digest = (b: Uint8Array) => createHash("sha256").update(b).digest("hex").slice(0, 16);
  for (const kind of ["checkpoint", "write", "blob"]) {
    let pageToken = "";
    do {
      const page = await client.listRecords({ namespace, turnId: threadId, kind, pageToken });
      for (const e of page.entries) {
        const r = e.record!;
        lines.push([r.kind, r.scope, r.id, r.parentId, digest(r.payload), digest(r.metadata)].join(" | "));
      }
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
  }
  return lines.sort();
}
