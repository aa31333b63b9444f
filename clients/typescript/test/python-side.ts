// The Python side of the cross-language specs: one Python process per spec
// file, serving the commands of a script of the Python client's tests
// (clients/python/tests/xlang_serve.py: a JSON line in, a JSON line out),
// rather than a process, and an import of the agent SDK (seconds of CPU),
// per command. Each command opens its own client there, as a process of its
// own would.
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

/** The Python with the client and the SDKs: STEPWELL_TEST_PYTHON (test.sh sets it), or the Python client's test venv. */
function pythonPath(): string {
  return process.env.STEPWELL_TEST_PYTHON || join(process.env.STEPWELL_CACHE_DIR || join(homedir(), ".cache", "stepwell"), "py-test", "bin", "python");
}

export class PythonSide {
  private child: ChildProcess | undefined;
  private waiting: { resolve: (out: string) => void; reject: (e: Error) => void; what: string }[] = [];
  private stderr = "";

  /** `script` serves the commands; `imports` is a Python statement the venv must run (checked once, before the first command). */
  constructor(private readonly script: string, private readonly imports: string) {}

  /** Checks the Python and the script once, then starts the process (once). */
  private start(): ChildProcess {
    if (this.child) return this.child;
    const py = pythonPath();
    const probe = existsSync(py) ? spawnSync(py, ["-c", this.imports], { encoding: "utf8" }) : undefined;
    if (probe?.status !== 0) throw new Error(`no Python that can ${this.imports} at ${py} (set STEPWELL_TEST_PYTHON): ${probe?.stderr || "missing"}`);
    if (!existsSync(this.script)) throw new Error(`the Python side ${this.script} is missing`);
    const child = spawn(py, [this.script, "serve"], { stdio: ["pipe", "pipe", "pipe"] });
    child.stderr!.on("data", (d: Buffer) => (this.stderr = (this.stderr + d.toString()).slice(-20_000)));
    createInterface({ input: child.stdout! }).on("line", (line) => this.answer(line));
    child.once("close", (code, signal) => {
      for (const w of this.waiting.splice(0)) w.reject(new Error(`${this.script} ended (${code ?? signal}) before answering ${w.what}: ${this.stderr}`));
    });
    this.child = child;
    return child;
  }

  private answer(line: string): void {
    const w = this.waiting.shift();
    if (!w) throw new Error(`${this.script} printed a line nobody asked for: ${line}`);
    const got = JSON.parse(line) as { ok: boolean; out?: string; err?: string };
    if (got.ok) w.resolve((got.out ?? "").trim());
    else w.reject(new Error(`${this.script} ${w.what} failed: ${got.err}\n${this.stderr}`));
  }

  /** Checks the Python side can run (a beforeAll calls it, so that a missing venv fails there). */
  ready(): void {
    this.start();
  }

  /** Runs the script's command `argv` with `stdin`, and resolves to what it printed, trimmed; rejects when it fails. */
  run(argv: string[], stdin = ""): Promise<string> {
    const child = this.start();
    return new Promise((resolve, reject) => {
      this.waiting.push({ resolve, reject, what: argv.join(" ") });
      child.stdin!.write(JSON.stringify({ argv, stdin }) + "\n");
    });
  }

  /** Ends the process (its stdin closes, it exits) and waits until it is gone. */
  async close(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const gone = new Promise((resolve) => child.once("close", resolve));
    child.stdin!.end();
    await gone;
  }
}
