// Starts graph-worker.js (compiled next to this file) as a Node process of
// its own, and follows it (../processes.ts): the lines it printed, waiting
// for one, its exit, and a SIGKILL as a crash would deliver it. The crash
// and fencing specs use it to run a graph in another process than the test's.
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { spawnWorker, type WorkerProcess } from "../processes.js";
import type { WorkerArgs } from "./graphs.js";

const WORKER_JS = join(dirname(fileURLToPath(import.meta.url)), "graph-worker.js");

export interface Worker extends WorkerProcess {
  /** What the run ended with: the final state ("done") or the error ("error"), after it exited. */
  outcome(): Promise<{ done?: Record<string, unknown>; error?: { name: string; message: string; threadId?: string } }>;
}

export function startWorker(args: WorkerArgs): Worker {
  const worker = spawnWorker(WORKER_JS, args.who, args);
  return {
    ...worker,
    async outcome() {
      const { code, signal } = await worker.exited;
      const last = worker.lines.at(-1) ?? "";
      const [word, ...rest] = last.split(" ");
      if (word === "done" && code === 0) return { done: JSON.parse(rest.join(" ")) };
      if (word === "error" && code === 1) return { error: JSON.parse(rest.join(" ")) };
      throw worker.fail(`ended with code ${code}, signal ${signal}`);
    },
  };
}
