// Starts agent-worker.js (compiled next to this file) as a Node process of its own
// and follows it (../processes.ts): its lines, waiting for one, its end, and
// a SIGKILL as a crash would deliver it.
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { spawnWorker, type WorkerProcess } from "../processes.js";
import type { WorkerArgs } from "./agent-worker.js";

const WORKER_JS = join(dirname(fileURLToPath(import.meta.url)), "agent-worker.js");

export type Worker = WorkerProcess;

export function startWorker(args: WorkerArgs): Worker {
  return spawnWorker(WORKER_JS, args.who, args);
}
