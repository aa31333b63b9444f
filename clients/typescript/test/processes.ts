// What the specs that run work in other Node processes share: polling for a
// condition, reading a side-effect log, and a worker process followed line by line (its output, waiting
// for a line, its end, and a SIGKILL as a crash would deliver it). The
// LangGraph, Agents SDK and ADK specs each start their own worker script
// through it.
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { createInterface } from "node:readline";

/**
 * Polls until check() holds (awaiting it if it is async), every 20 ms, and
 * fails naming what it waited for after timeoutMs. The bound is generous:
 * it is there so a broken run fails instead of hanging, not to time anything.
 */
export async function waitFor(check: () => boolean | Promise<boolean>, what: string, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** The lines of a side-effect log file ([] when it does not exist yet). */
export function logLines(file: string): string[] {
  return existsSync(file) ? readFileSync(file, "utf8").split("\n").filter((l) => l !== "") : [];
}

export interface WorkerProcess {
  child: ChildProcess;
  lines: string[];
  /** Resolves once the process exited and its output is read: its exit code, or the signal that ended it. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Waits (bounded) until the worker printed a line starting with `prefix`; fails if it ends first. */
  waitLine(prefix: string, timeoutMs?: number): Promise<string>;
  /** Waits for its end and returns its lines; fails unless it printed "done" and exited 0. */
  done(): Promise<string[]>;
  /** SIGKILLs it and waits until it is gone. */
  kill(): Promise<void>;
  /** An error naming the worker and `what`, with its output. */
  fail(what: string): Error;
}

/** Runs `script` under this Node with `args` as its JSON argument; `who` names it in errors. */
export function spawnWorker(script: string, who: string, args: unknown): WorkerProcess {
  const child = spawn(process.execPath, [script, JSON.stringify(args)], { stdio: ["ignore", "pipe", "pipe"] });
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
  const fail = (what: string) => new Error(`worker ${who} ${what}: ${lines.join("\n")}\n${stderr}`);
  return {
    child,
    lines,
    exited,
    fail,
    async waitLine(prefix, timeoutMs = 120_000) {
      const find = () => lines.find((l) => l.startsWith(prefix));
      await waitFor(() => find() !== undefined || gone, `worker ${who} to print "${prefix}"`, timeoutMs);
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
