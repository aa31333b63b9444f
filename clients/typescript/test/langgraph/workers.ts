// Starts graph-worker.js (compiled next to this file) as a Node process of
// its own, and follows it: the lines it printed, waiting for one, its exit,
// and a SIGKILL as a crash would deliver it. The crash and fencing specs use
// it to run a graph in another process than the test's.
import { spawn, type ChildProcess } from "node:child_process";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { waitFor, type WorkerArgs } from "./graphs.js";

const WORKER_JS = join(dirname(fileURLToPath(import.meta.url)), "graph-worker.js");

export interface Worker {
  child: ChildProcess;
  lines: string[];
  /** Resolves once the process exited and its output is read: its exit code, or the signal that ended it. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Waits (bounded) until the worker printed a line starting with `prefix`; fails early if it exits first. */
  waitLine(prefix: string, timeoutMs?: number): Promise<string>;
  /** What the run ended with: the final state ("done") or the error ("error"), after it exited. */
  outcome(): Promise<{ done?: Record<string, unknown>; error?: { name: string; message: string; threadId?: string } }>;
  /** SIGKILLs it and waits until it is gone. */
  kill(): Promise<void>;
}

export function startWorker(args: WorkerArgs): Worker {
  const child = spawn(process.execPath, [WORKER_JS, JSON.stringify(args)], { stdio: ["ignore", "pipe", "pipe"] });
  const lines: string[] = [];
  let stderr = "";
  let gone = false;
  createInterface({ input: child.stdout! }).on("line", (l) => lines.push(l));
  child.stderr!.on("data", (d: Buffer) => (stderr = (stderr + d.toString()).slice(-10_000)));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once("close", (code, signal) => {
      gone = true;
      resolve({ code, signal });
    }),
  );
  const worker: Worker = {
    child,
    lines,
    exited,
    async waitLine(prefix, timeoutMs = 60_000) {
      const find = () => lines.find((l) => l.startsWith(prefix));
      await waitFor(() => find() !== undefined || gone, `worker ${args.who} to print "${prefix}"`, timeoutMs);
      const line = find();
      if (line === undefined) throw new Error(`worker ${args.who} exited without printing "${prefix}": ${lines.join("\n")}\n${stderr}`);
      return line;
    },
    async outcome() {
      const { code, signal } = await exited;
      const last = lines.at(-1) ?? "";
      const [word, ...rest] = last.split(" ");
      if (word === "done" && code === 0) return { done: JSON.parse(rest.join(" ")) };
      if (word === "error" && code === 1) return { error: JSON.parse(rest.join(" ")) };
      throw new Error(`worker ${args.who} ended with code ${code}, signal ${signal}: ${lines.join("\n")}\n${stderr}`);
    },
    async kill() {
      if (!gone) child.kill("SIGKILL");
      const { signal } = await exited;
      if (signal !== "SIGKILL") throw new Error(`worker ${args.who} exited before it was killed: ${lines.join("\n")}\n${stderr}`);
    },
  };
  return worker;
}
