// The worker steps of the scenario runner (clients/scenarios/README.md,
// "Worker steps"): scenario worker processes it starts, watches, kills and
// waits for; a signal sent through a peer, the scenario worker of another
// language named by STEPWELL_SCENARIO_PEER; and the count of the effects
// file the workers share.
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

/** This language's scenario worker, compiled next to this file. */
export const WORKER_JS = join(dirname(fileURLToPath(import.meta.url)), "scenario-worker.js");

/** The steps of this module, as a scenario file gives them. */
export interface ProcStep {
  worker?: string;
  start?: "approval" | "sleep";
  run?: string;
  seconds?: number;
  line?: string;
  kill?: boolean;
  exit?: number;
  timeoutMs?: number;
  signal?: { run: string; name: string; payload: string };
  expect?: unknown;
  effects?: number;
}

/** Whether a step is one of this module's. */
export function isProcStep(step: ProcStep): boolean {
  return step.start !== undefined || (step.worker !== undefined && (step.line !== undefined || step.kill !== undefined || step.exit !== undefined)) || step.signal !== undefined || step.effects !== undefined;
}

/** A process the runner started: the lines it printed, and its exit code once it exited. */
interface Proc {
  child: ChildProcess;
  lines: string[];
  stderr: string;
  exited: Promise<number | null>;
  code?: number | null;
}

function startProc(cmd: string, args: string[]): Proc {
  const child = spawn(cmd, args, { stdio: ["ignore", "pipe", "pipe"] });
  const p: Proc = { child, lines: [], stderr: "", exited: undefined as unknown as Promise<number | null> };
  createInterface({ input: child.stdout! }).on("line", (l) => p.lines.push(l));
  child.stderr!.on("data", (d: Buffer) => (p.stderr = (p.stderr + d.toString()).slice(-10_000)));
  // The exit code once stdout is drained too, so every line printed is in `lines`.
  p.exited = new Promise((resolve) => child.once("close", (code, signal) => resolve((p.code = signal ? null : code))));
  return p;
}

/** Polls every 20 ms until done() holds; fails with what() after timeoutMs. */
async function until(done: () => boolean, timeoutMs: number, what: () => string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!done()) {
    if (Date.now() > deadline) assert.fail(what());
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** What the worker steps of one scenario run share: its sidecar, namespace, effects file and workers. */
export class ScenarioProcs {
  private readonly workers = new Map<string, Proc>();

  constructor(
    private readonly target: string,
    private readonly namespace: string,
    private readonly effectsFile: string,
  ) {}

  /** Fails a scenario that signals through a peer when no peer is configured: never a skip. */
  static checkPeer(steps: ProcStep[], file: string): void {
    if (steps.some((s) => s.signal !== undefined) && !process.env.STEPWELL_SCENARIO_PEER) {
      assert.fail(`${file} signals through a peer, and STEPWELL_SCENARIO_PEER (the command line of another language's scenario worker) is not set`);
    }
  }

  async step(step: ProcStep, where: string): Promise<void> {
    if (step.signal !== undefined) return this.peerSignal(step, where);
    if (step.effects !== undefined) return this.checkEffects(step.effects, where);
    if (step.start !== undefined) return this.start(step, where);
    const w = this.workers.get(step.worker!);
    if (!w) assert.fail(`${where}: worker ${step.worker} was never started`);
    if (step.kill) return this.kill(w);
    if (step.exit !== undefined) return this.exit(w, step, where);
    return this.line(w, step, where);
  }

  private start(step: ProcStep, where: string): void {
    const old = this.workers.get(step.worker!);
    if (old && old.code === undefined) assert.fail(`${where}: worker ${step.worker} is still running`);
    const args = [WORKER_JS, step.start!, "--target", this.target, "--namespace", this.namespace, "--run", step.run!, "--effects", this.effectsFile];
    if (step.start === "sleep") args.push("--seconds", String(step.seconds));
    this.workers.set(step.worker!, startProc(process.execPath, args));
  }

  private async line(w: Proc, step: ProcStep, where: string): Promise<void> {
    await until(
      () => w.lines.includes(step.line!) || w.code !== undefined,
      step.timeoutMs ?? 5000,
      () => `${where}: no line ${JSON.stringify(step.line)} in ${step.timeoutMs} ms; printed ${JSON.stringify(w.lines)}; stderr: ${w.stderr}`,
    );
    if (!w.lines.includes(step.line!)) assert.fail(`${where}: the worker exited (${w.code}) without printing ${JSON.stringify(step.line)}: ${JSON.stringify(w.lines)}; stderr: ${w.stderr}`);
  }

  private async kill(w: Proc): Promise<void> {
    if (w.code === undefined) w.child.kill("SIGKILL");
    await w.exited;
  }

  private async exit(w: Proc, step: ProcStep, where: string): Promise<void> {
    const timeoutMs = step.timeoutMs ?? 5000;
    await until(() => w.code !== undefined, timeoutMs, () => `${where}: the worker did not exit in ${timeoutMs} ms; printed ${JSON.stringify(w.lines)}; stderr: ${w.stderr}`);
    assert.equal(w.code, step.exit, `${where}: exit code; printed ${JSON.stringify(w.lines)}; stderr: ${w.stderr}`);
    if (step.line !== undefined) assert.ok(w.lines.includes(step.line), `${where}: no line ${JSON.stringify(step.line)} in ${JSON.stringify(w.lines)}`);
  }

  /** Signals through the peer: its command line prefix, run by the shell, with the signal arguments appended. */
  private async peerSignal(step: ProcStep, where: string): Promise<void> {
    const peer = process.env.STEPWELL_SCENARIO_PEER;
    if (!peer) assert.fail(`${where}: STEPWELL_SCENARIO_PEER is not set`);
    const s = step.signal!;
    const args = ["signal", "--target", this.target, "--namespace", this.namespace, "--run", s.run, "--name", s.name, "--payload", s.payload];
    const p = startProc("sh", ["-c", `${peer} "$@"`, "peer", ...args]);
    const timeoutMs = step.timeoutMs ?? 60_000;
    await until(() => p.code !== undefined, timeoutMs, () => `${where}: the peer (${peer}) did not exit in ${timeoutMs} ms`);
    assert.equal(p.code, 0, `${where}: the peer (${peer}) failed: ${p.stderr}`);
    assert.equal(p.lines.at(-1)?.trim(), step.expect, `${where}: the peer printed ${JSON.stringify(p.lines)}`);
  }

  private checkEffects(n: number, where: string): void {
    const lines = existsSync(this.effectsFile) ? readFileSync(this.effectsFile, "utf8").split("\n").filter((l) => l !== "") : [];
    assert.equal(lines.length, n, `${where}: effects ${JSON.stringify(lines)}`);
  }

  /** Kills every worker still running, at the end of the scenario whatever its outcome. */
  async close(): Promise<void> {
    for (const w of this.workers.values()) await this.kill(w);
  }
}
