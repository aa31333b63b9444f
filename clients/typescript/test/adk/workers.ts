// Starts adk-worker.js (compiled next to this file) as a Node process of its
// own and follows it: its lines, waiting for one, its end, and a SIGKILL as
// a crash would deliver it.
import { spawn } from "node:child_process";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import type { WorkerArgs } from "./adk-worker.js";
import { waitFor } from "./harness.js";

const WORKER_JS = join(dirname(fileURLToPath(import.meta.url)), "adk-worker.js");

export interface Worker {
  lines: string[];
  /** Waits (bounded) until the worker printed a line starting with `prefix`; fails if it ends first. */
  waitLine(prefix: string): Promise<string>;
  /** Waits for its end and returns its lines; fails unless it printed "done" and exited 0. */
  done(): Promise<string[]>;
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
  const fail = (what: string) => new Error(`worker ${args.who} ${what}: ${lines.join("\n")}\n${stderr}`);
  return {
    lines,
    async waitLine(prefix) {
      const find = () => lines.find((l) => l.startsWith(prefix));
      await waitFor(() => find() !== undefined || gone, `worker ${args.who} to print "${prefix}"`, 120_000);
      const line = find();
      if (line === undefined) throw fail(`ended without printing "${prefix}"`);
      return line;
    },
    async done() {
      const { code } = await exited;
      if (code !== 0 || lines.at(-1) !== "done") throw fail(`ended with code ${code}`);
      return lines;
    },
    async kill() {
      if (!gone) child.kill("SIGKILL");
      const { signal } = await exited;
      if (signal !== "SIGKILL") throw fail("ended before it was killed");
    },
  };
}
